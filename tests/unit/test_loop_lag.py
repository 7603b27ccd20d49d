"""The front door refuses new requests while its own event loop runs late for a whole interval, the queue
no lane sees (frontdoor/loop_lag.py): on a clock the test moves, then on a real loop the test blocks."""

from __future__ import annotations

import asyncio
import time

from contract.settings import Settings
from frontdoor.lanes import Lanes
from frontdoor.loop_lag import LoopLag


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_late_wake_ups_for_less_than_the_interval_are_a_burst_not_a_standing_queue() -> None:
    clock = Clock()
    lag = LoopLag(target_s=0.1, interval_s=1.0, clock=clock)
    for step in range(1, 9):
        clock.now = step * 0.1
        lag.observe(0.15)
        assert not lag.standing()
    clock.now = 0.9
    lag.observe(0.01)  # one on-time wake-up: what was late is history
    clock.now = 1.5
    lag.observe(0.2)
    assert not lag.standing(), "late again for 0.2 s only"


def test_a_loop_late_for_the_whole_interval_stands_until_a_wake_up_is_on_time() -> None:
    clock = Clock()
    lag = LoopLag(target_s=0.1, interval_s=1.0, clock=clock)
    clock.now = 0.3
    lag.observe(0.3)  # late from this wake-up on
    clock.now = 0.9
    lag.observe(0.12)
    clock.now = 1.2
    assert not lag.standing()
    clock.now = 1.3
    lag.observe(0.2)
    assert lag.standing()
    lag.observe(0.05)
    assert not lag.standing()


def test_the_general_lane_refuses_with_503_overloaded_naming_the_setting_while_the_loop_stands() -> None:
    clock = Clock()
    lanes = Lanes.of(Settings(gateway_queue_delay_ms=100), clock)
    lanes.loop_lag.observe(5.0)
    assert lanes.general.take("a") is None, "one wake-up five seconds late is one long block: a burst"
    lanes.general.give_back("a")
    clock.now = 1.0
    lanes.loop_lag.observe(0.3)  # late again a second on
    refused = lanes.general.take("a")
    assert refused is not None
    assert (refused.status, refused.code, refused.headers["Retry-After"]) == (503, "overloaded", "1")
    assert "SYNAPSE_GATEWAY_QUEUE_DELAY_MS" in refused.message and "event loop" in refused.message
    assert lanes.waits.take("a") is None, "a poll of a job already accepted is not new work"
    assert lanes.cancels.take("a") is None, "a cancel frees capacity: never refused for lateness"
    lanes.loop_lag.observe(0.0)
    assert lanes.general.take("a") is None


async def test_a_real_loop_kept_busy_is_seen_standing_and_an_idle_one_is_not() -> None:
    lag = LoopLag(target_s=0.01, interval_s=0.2)
    lag.start()
    try:
        await asyncio.sleep(0.1)
        assert not lag.standing(), "an idle loop wakes on time"
        for _ in range(10):  # callbacks that hold the loop 50 ms each, back to back, for half a second
            time.sleep(0.05)
            await asyncio.sleep(0)
        assert lag.standing()
        await asyncio.sleep(0.1)
        assert not lag.standing(), "once idle again, the next wake-up is on time"
    finally:
        await lag.aclose()
