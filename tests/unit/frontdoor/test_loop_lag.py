"""The front door refuses new requests once its own event loop has run late past an allowance, the queue no
lane sees (frontdoor/loop_lag.py): on a clock the test moves, then on a real loop the test blocks."""

from __future__ import annotations

import asyncio
import time

from contract.settings import Settings
from frontdoor.lanes import LOOP_LATENESS_ALLOWANCE_S, Lanes
from frontdoor.loop_lag import LoopLag


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_late(lag: LoopLag, clock: Clock, seconds: float, lateness: float = 0.2, step: float = 0.1) -> None:
    """Wake-ups every `step` for `seconds`, each `lateness` late."""
    end = clock.now + seconds
    while clock.now < end - 1e-9:
        clock.now += step
        lag.observe(lateness)


def test_a_burst_that_keeps_the_loop_late_within_its_allowance_is_served() -> None:
    clock = Clock()
    lag = LoopLag(target_s=0.1, allowance_s=5.0, clock=clock)
    run_late(lag, clock, 4.5)
    assert not lag.standing(), "late for 4.5 s from idle: a burst, read within the allowance"
    run_late(lag, clock, 0.6)
    assert lag.standing(), "late past the allowance: standing"


def test_time_on_time_earns_the_allowance_back_only_as_long_as_it_lasts() -> None:
    clock = Clock()
    lag = LoopLag(target_s=0.1, allowance_s=5.0, clock=clock)
    run_late(lag, clock, 6.0)
    assert lag.standing()
    run_late(lag, clock, 0.3, lateness=0.0)  # shedding lets the loop catch up for a moment
    assert not lag.standing(), "on time: nothing to refuse"
    run_late(lag, clock, 0.4)
    assert lag.standing(), "a moment on time buys as much lateness, not a whole new allowance"
    run_late(lag, clock, 10.0, lateness=0.0)  # idle again for long
    run_late(lag, clock, 4.5)
    assert not lag.standing(), "the allowance is back, whole, for the next burst"


def test_a_suspended_process_thaws_with_its_allowance_and_serves_the_request_that_woke_it() -> None:
    """A Lambda environment is frozen between invocations while the clock runs on: the first wake-up after
    a thaw is as late as the freeze, which is no queue."""
    clock = Clock()
    lag = LoopLag(target_s=0.1, allowance_s=5.0, clock=clock)
    for freeze in (7.0, 30.0, 600.0):
        clock.now += freeze
        lag.observe(freeze)
        assert not lag.standing()
    run_late(lag, clock, 4.5)
    assert not lag.standing(), "the allowance is whole after the freezes"


def test_the_general_lane_refuses_with_503_overloaded_naming_the_setting_while_the_loop_stands() -> None:
    clock = Clock()
    lanes = Lanes.of(Settings(gateway_queue_delay_ms=100), clock)
    run_late(lanes.loop_lag, clock, LOOP_LATENESS_ALLOWANCE_S - 0.5)
    assert lanes.general.take("a") is None, "a burst of a thousand keeps the loop late for seconds"
    lanes.general.give_back("a")
    run_late(lanes.loop_lag, clock, 1.0)
    refused = lanes.general.take("a")
    assert refused is not None
    assert (refused.status, refused.code, refused.headers["Retry-After"]) == (503, "overloaded", "1")
    assert "SYNAPSE_GATEWAY_QUEUE_DELAY_MS" in refused.message and "event loop" in refused.message
    assert lanes.waits.take("a") is None, "a poll of a job already accepted is not new work"
    assert lanes.cancels.take("a") is None, "a cancel frees capacity: never refused for lateness"
    lanes.loop_lag.observe(0.0)
    assert lanes.general.take("a") is None


async def test_a_real_loop_kept_busy_is_seen_standing_and_an_idle_one_is_not() -> None:
    lag = LoopLag(target_s=0.05, allowance_s=1.0)
    lag.start()
    try:
        await asyncio.sleep(0.1)
        assert not lag.standing(), "an idle loop wakes on time"
        for _ in range(16):  # callbacks that hold the loop 100 ms each, back to back, for 1.6 s
            time.sleep(0.1)
            await asyncio.sleep(0)
        assert lag.standing()
        await asyncio.sleep(0.1)
        assert not lag.standing(), "once idle again, the next wake-up is on time"
    finally:
        await lag.aclose()
