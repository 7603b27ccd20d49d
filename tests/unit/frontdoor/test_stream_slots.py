"""A front door's streams in fair shares: a tenant past its share gets 429, any tenant past the
process's capacity 503, each with Retry-After; a slot taken for a stream comes back once, when it ends."""

import pytest
from pydantic import ValidationError

from contract.settings import Settings
from frontdoor.stream_handle import StreamSink
from frontdoor.stream_slots import POOL_HEADROOM, StreamSlots, pool_size


def test_a_tenant_past_its_share_gets_429_while_another_is_admitted():
    slots = StreamSlots(capacity=3, per_tenant=2)
    assert slots.take("hog") is None
    assert slots.take("hog") is None
    refused = slots.take("hog")
    assert refused is not None
    assert (refused.status, refused.code) == (429, "too_many_streams")
    assert int(refused.headers["Retry-After"]) >= 1
    assert "SYNAPSE_MAX_STREAMS_PER_TENANT" in refused.message
    assert slots.take("fair") is None
    assert (slots.held("hog"), slots.held("fair"), slots.held()) == (2, 1, 3)


def test_past_the_capacity_every_tenant_gets_503_until_a_stream_ends():
    slots = StreamSlots(capacity=3, per_tenant=2)
    for tenant in ("a", "a", "b"):
        assert slots.take(tenant) is None
    full = slots.take("c")
    assert full is not None
    assert (full.status, full.code) == (503, "streams_full")
    assert int(full.headers["Retry-After"]) >= 1
    assert "SYNAPSE_MAX_STREAMS" in full.message
    slots.give_back("a")
    assert slots.take("c") is None


def test_a_sink_takes_one_slot_and_gives_it_back_once():
    slots = StreamSlots(capacity=2, per_tenant=2)
    sink = StreamSink(slots)
    assert sink.admit("acme") is None
    assert sink.admit("acme") is None  # asked again by the same request: still one slot
    assert slots.held("acme") == 1
    sink.release()
    sink.release()
    assert slots.held() == 0


def test_a_route_that_admits_after_its_server_gave_up_takes_no_slot():
    slots = StreamSlots(capacity=1, per_tenant=1)
    sink = StreamSink(slots)
    sink.release()
    assert sink.admit("acme") is None
    assert slots.held() == 0


def test_a_sink_without_limits_admits_everything():
    assert StreamSink().admit("acme") is None


def test_the_streaming_pool_is_sized_from_the_stream_limit():
    settings = Settings(max_streams=10, max_streams_per_tenant=5)
    assert pool_size(settings) == 10 + POOL_HEADROOM
    assert StreamSlots.of(settings).capacity == 10


def test_a_tenant_share_past_the_capacity_is_refused():
    with pytest.raises(ValidationError, match=r"max_streams_per_tenant \(5\) must not exceed"):
        Settings(max_streams=4, max_streams_per_tenant=5)
