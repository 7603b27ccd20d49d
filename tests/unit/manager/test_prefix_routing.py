"""Where a generation goes: its prompt's prefix pins it to one worker, which every manager agrees on,
until that worker runs too far ahead of the least loaded; a worker that leaves moves only its own keys."""

from __future__ import annotations

from manager.pool import SequenceSlots
from manager.prefix_routing import PREFIX_CHARS, choose, load_bound, prefix_key

SYSTEM = "<|im_start|>system\nYou are the support agent of tenant {n}. " + "Follow these rules. " * 80
WORKERS = ["w-a", "w-b", "w-c"]


def idle(_: str) -> int:
    return 0


def test_prompts_that_share_their_beginning_share_a_key_and_others_do_not():
    first = SYSTEM.format(n=1) + "<|im_start|>user\nWhere is my order?"
    again = SYSTEM.format(n=1) + "<|im_start|>user\nCan I change my address?"
    other = SYSTEM.format(n=2) + "<|im_start|>user\nWhere is my order?"
    assert len(SYSTEM) > PREFIX_CHARS
    assert prefix_key(first) == prefix_key(again) != prefix_key(other)
    assert prefix_key("short question") != prefix_key("another short question")


def test_every_manager_sends_a_prefix_to_the_same_worker_whatever_order_it_lists_them():
    for n in range(20):
        key = prefix_key(SYSTEM.format(n=n))
        picks = {
            choose(order, idle, 32, key) for order in (WORKERS, WORKERS[::-1], WORKERS[1:] + WORKERS[:1])
        }
        assert len(picks) == 1


def test_keys_spread_over_the_workers():
    picks = [choose(WORKERS, idle, 32, prefix_key(f"prompt {n}")) for n in range(600)]
    assert min(picks.count(worker) for worker in WORKERS) > 150  # about 200 each


def test_a_worker_that_leaves_takes_only_its_own_keys_with_it():
    keys = [prefix_key(f"prompt {n}") for n in range(300)]
    before = {key: choose(WORKERS, idle, 32, key) for key in keys}
    after = {key: choose(["w-a", "w-b"], idle, 32, key) for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved and all(before[key] == "w-c" for key in moved)
    joined = {key: choose([*WORKERS, "w-d"], idle, 32, key) for key in keys}
    assert all(joined[key] in (before[key], "w-d") for key in keys)  # a new worker takes a share only


def test_the_preferred_worker_keeps_its_prefix_until_it_runs_past_the_load_bound():
    key = prefix_key(SYSTEM.format(n=3))
    preferred = choose(WORKERS, idle, 32, key)
    assert preferred is not None
    bound = load_bound(32)
    assert bound == 8
    load = dict.fromkeys(WORKERS, 0)
    load[preferred] = bound  # 8 ahead of the idle ones: still its own
    assert choose(WORKERS, load.__getitem__, 32, key) == preferred
    load[preferred] = bound + 1  # past the bound: the next-ranked worker takes it
    spilled = choose(WORKERS, load.__getitem__, 32, key)
    assert spilled not in (None, preferred)


def test_without_a_key_the_least_loaded_worker_with_room_gets_it_and_full_ones_none():
    load = {"w-a": 3, "w-b": 1, "w-c": 1}
    assert choose(WORKERS, load.__getitem__, 4, None) == "w-b"
    assert choose(WORKERS, {"w-a": 4, "w-b": 4, "w-c": 3}.__getitem__, 4, prefix_key("x")) == "w-c"
    assert choose(WORKERS, dict.fromkeys(WORKERS, 4).__getitem__, 4, prefix_key("x")) is None


def test_the_manager_s_sequence_slots_route_a_prefix_to_one_worker_while_it_has_room():
    slots = SequenceSlots()
    key = prefix_key(SYSTEM.format(n=5))
    preferred = slots.pick(WORKERS, "smollm2", 32, key)
    for _ in range(9):  # picked while 0 to 8 of its sequences run (the bound): all on the preferred one
        worker = slots.pick(WORKERS, "smollm2", 32, key)
        assert worker == preferred
        slots.acquire(worker, "smollm2")
    assert slots.pick(WORKERS, "smollm2", 32, key) != preferred  # 9 ahead of idle workers: it spills


def test_a_worker_whose_kv_cache_the_job_would_overflow_is_passed_over_and_a_full_fleet_waits():
    slots = SequenceSlots()
    key = prefix_key(SYSTEM.format(n=6))
    preferred = slots.pick(WORKERS, "smollm2", 32, key, need=1600, kv_tokens=10_240)
    assert preferred is not None
    for _ in range(6):  # 9,600 tokens: the seventh would pass 10,240
        slots.acquire(preferred, "smollm2", 1600)
    elsewhere = slots.pick(WORKERS, "smollm2", 32, key, need=1600, kv_tokens=10_240)
    assert elsewhere not in (None, preferred)
    assert slots.pick([preferred], "smollm2", 32, key, need=1600, kv_tokens=10_240) is None  # it waits
    slots.release(preferred, "smollm2", 1600)  # an answer ends: its tokens come back
    assert slots.pick([preferred], "smollm2", 32, key, need=1600, kv_tokens=10_240) == preferred


def test_a_job_larger_than_a_whole_cache_still_runs_on_an_idle_worker():
    slots = SequenceSlots()
    assert slots.pick(["w-a"], "smollm2", 32, None, need=20_000, kv_tokens=16_384) == "w-a"
    slots.acquire("w-a", "smollm2", 20_000)
    assert slots.pick(["w-a"], "smollm2", 32, None, need=10, kv_tokens=16_384) is None
