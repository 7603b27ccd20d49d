import asyncio
import time
from collections.abc import Sequence

import pytest

from manager import metrics
from manager.busy import BusyClock
from manager.triton import BatchError, RowResult


def test_a_worker_is_busy_while_a_batch_is_in_flight():
    clock = BusyClock()
    clock.begin("w", now=10.0)
    assert clock.busy_seconds("w", now=10.5) == pytest.approx(0.5)
    clock.end("w", now=11.0)
    assert clock.busy_seconds("w", now=20.0) == pytest.approx(1.0)


def test_overlapping_batches_count_once():
    clock = BusyClock()
    clock.begin("w", now=0.0)
    clock.begin("w", now=0.2)
    clock.end("w", now=0.5)
    clock.end("w", now=1.0)
    assert clock.busy_seconds("w", now=5.0) == pytest.approx(1.0)


def test_the_ratio_covers_the_window_and_never_exceeds_one():
    clock = BusyClock(window_s=10.0)
    for second in range(30):
        clock.track(["w"], now=float(second))
        if second >= 20:  # busy for the last ten seconds, half of each second
            clock.begin("w", now=second + 0.0)
            clock.end("w", now=second + 0.5)
    clock.track(["w"], now=30.0)
    assert clock.ratio("w", now=30.0) == pytest.approx(0.5)
    clock.begin("w", now=30.0)
    clock.begin("w", now=30.0)
    assert clock.ratio("w", now=40.0) <= 1.0


def test_a_worker_that_left_is_dropped_once_its_batches_are_done():
    clock = BusyClock()
    clock.track(["a", "b"], now=0.0)
    clock.begin("b", now=1.0)
    clock.track(["a"], now=2.0)
    assert clock.workers() == ["a", "b"], "b still has a batch in flight"
    clock.end("b", now=3.0)
    clock.track(["a"], now=4.0)
    assert clock.workers() == ["a"]
    clock.end("gone", now=5.0)  # a late reply from a forgotten worker is harmless


def test_a_new_worker_starts_idle():
    clock = BusyClock()
    clock.track(["new"], now=100.0)
    assert clock.busy_seconds("new", now=200.0) == 0.0
    assert clock.ratio("new", now=200.0) == 0.0
    assert clock.ratio("never-seen", now=200.0) == 0.0


class GatedClient:
    """An InferenceClient whose batch runs until the test lets it finish (or fail)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.fail = False

    async def infer(self, model: str, prompts: Sequence[str], max_tokens: Sequence[int]) -> list[RowResult]:
        await self.release.wait()
        if self.fail:
            raise BatchError("the worker went away", worker_fault=True)
        return [RowResult(text=p[::-1], prompt_tokens=1, completion_tokens=1) for p in prompts]

    async def max_batch_size(self, model: str) -> int:
        return 8

    async def close(self) -> None:
        return None


def in_flight(worker: str) -> bool:
    """Open stretch: busy time keeps growing with the clock."""
    later = time.monotonic() + 1000
    return metrics.BUSY.busy_seconds(worker, later) - metrics.BUSY.busy_seconds(worker, later - 1) == 1


@pytest.mark.parametrize("fails", [False, True])
async def test_a_worker_s_client_clocks_it_busy_while_a_batch_runs_and_no_longer(fails: bool):
    inner = GatedClient()
    client = metrics.BusyClient(f"unit-worker-{fails}", inner)
    batch = asyncio.create_task(client.infer("gpu-sim", ["ab"], [1]))
    await asyncio.sleep(0)
    assert in_flight(client.worker_id)
    inner.fail = fails
    inner.release.set()
    if fails:
        with pytest.raises(BatchError):
            await batch
    else:
        assert [row.text for row in await batch] == ["ba"]
    assert not in_flight(client.worker_id)
    assert await client.max_batch_size("gpu-sim") == 8
