"""The fleet's throughput estimate, which the autoscaler sizes the pool with."""

import time
from typing import Any, cast

from contract.workers import WorkerInfo, WorkerState
from manager.fleet import Fleet, WorkerSlot
from manager.metrics import BUSY


def worker(worker_id: str) -> WorkerSlot:
    info = WorkerInfo(id=worker_id, grpc_url="127.0.0.1:1", http_url="", metrics_url="",
                      models=frozenset({"gpu-sim"}), state=WorkerState.READY, started_ms=0)  # fmt: skip
    return WorkerSlot(info, client=cast(Any, None))


def test_throughput_is_unknown_before_any_batch_ran():
    assert Fleet(cast(Any, None), cast(Any, None), max_inflight_batches=2).throughput() == 0.0


def test_the_last_measured_throughput_outlives_a_pool_scaled_to_zero():
    fleet = Fleet(cast(Any, None), cast(Any, None), max_inflight_batches=2)
    slot = fleet.workers.setdefault("fleet-throughput-w1", worker("fleet-throughput-w1"))
    now = time.monotonic()
    BUSY.begin(slot.info.id, now - 2.0)
    BUSY.end(slot.info.id, now)  # busy for 2 s ...
    slot.jobs_done = 500  # ... and 500 jobs done: 250 jobs per busy second
    assert fleet.throughput() == 250.0

    del fleet.workers[slot.info.id]  # the pool scaled to zero
    BUSY.track([], now)
    assert fleet.throughput() == 250.0, "a burst after scale-to-zero is sized from what was measured"
