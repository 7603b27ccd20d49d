"""What inference costs on Synapse, per 1,000 inferences, next to one GPU invocation per request.

With P the GPU price per hour (`SYNAPSE_GPU_PRICE_PER_HOUR`) and N the completed jobs:

    batched cost per 1,000 = 1000 * (worker_seconds * P / 3600) / N
    naive cost per 1,000   = 1000 * (sum over completed jobs of T1(model) * P / 3600) / N

worker_seconds is the wall time of every registered worker, busy or idle, since an idle GPU costs
the same. T1(model) is the model's measured duration of a batch of one: the naive baseline charges
every request one whole GPU invocation for a single item. It leaves out cold starts and invocation
overheads, so the saving it shows (1 - batched / naive; the SLO wants more than 0.9) is a lower
bound. Pure: the manager feeds it durations and counts, Prometheus reads the totals.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
EWMA_WEIGHT = 0.1  # a new batch-of-one duration moves the estimate by a tenth: steady, yet it follows drift


@dataclass(slots=True)
class BatchOfOne:
    """Estimates T1, one model's batch-of-one duration.

    Measured batches of one win (an exponentially weighted mean). Until the first one is seen, a
    least-squares line through every (size, duration) pair stands in, once two sizes are known.
    """

    ewma_s: float | None = None
    n: int = 0
    sum_b: float = 0.0
    sum_t: float = 0.0
    sum_bb: float = 0.0
    sum_bt: float = 0.0

    def observe(self, size: int, seconds: float) -> None:
        if size < 1 or seconds < 0:
            raise ValueError(f"a batch needs size >= 1 and seconds >= 0, got {size}, {seconds}")
        if size == 1:
            self.ewma_s = (
                seconds if self.ewma_s is None else self.ewma_s + EWMA_WEIGHT * (seconds - self.ewma_s)
            )
        self.n += 1
        self.sum_b += size
        self.sum_t += seconds
        self.sum_bb += size * size
        self.sum_bt += size * seconds

    def estimate(self) -> float | None:
        if self.ewma_s is not None:
            return self.ewma_s
        spread = self.n * self.sum_bb - self.sum_b**2
        if self.n < 2 or spread <= 1e-9:
            return None
        slope = (self.n * self.sum_bt - self.sum_b * self.sum_t) / spread
        intercept = (self.sum_t - slope * self.sum_b) / self.n
        return max(0.0, intercept + slope)


def dollars(gpu_seconds: float, price_per_hour: float) -> float:
    return gpu_seconds * price_per_hour / SECONDS_PER_HOUR


def per_thousand(cost_dollars: float, completed: float) -> float | None:
    """Cost per 1,000 inferences; None before the first completed job."""
    return 1000.0 * cost_dollars / completed if completed > 0 else None


class CostLedger:
    """Running totals behind the cost metrics: worker time, completed jobs and what they would cost naively.

    Jobs that complete before their model's T1 can be estimated wait unpriced and are priced at the
    first estimate, so the naive total always covers every completed job once T1 is known.
    """

    def __init__(self, price_per_hour: float) -> None:
        self.price_per_hour = price_per_hour
        self.worker_seconds = 0.0
        self.gpu_cost_dollars = 0.0
        self.completed: defaultdict[str, int] = defaultdict(int)
        self.naive_cost_dollars: defaultdict[str, float] = defaultdict(float)
        self.batch_of_one: defaultdict[str, BatchOfOne] = defaultdict(BatchOfOne)
        self._unpriced: defaultdict[str, int] = defaultdict(int)

    def add_worker_time(self, seconds: float, running_workers: int) -> None:
        worker_seconds = max(0.0, seconds) * running_workers
        self.worker_seconds += worker_seconds
        self.gpu_cost_dollars += dollars(worker_seconds, self.price_per_hour)

    def observe_batch(self, model: str, size: int, seconds: float) -> None:
        self.batch_of_one[model].observe(size, seconds)
        if self._unpriced[model]:
            self._price(model, self._unpriced.pop(model))

    def complete(self, model: str, jobs: int) -> None:
        self.completed[model] += jobs
        self._unpriced[model] += jobs
        self._price(model, self._unpriced.pop(model))

    def _price(self, model: str, jobs: int) -> None:
        t1 = self.batch_of_one[model].estimate()
        if t1 is None:
            self._unpriced[model] += jobs
            return
        self.naive_cost_dollars[model] += dollars(jobs * t1, self.price_per_hour)

    def per_thousand(self) -> tuple[float | None, float | None]:
        """(batched, naive) dollars per 1,000 completed inferences since the manager started."""
        completed = sum(self.completed.values())
        return (
            per_thousand(self.gpu_cost_dollars, completed),
            per_thousand(sum(self.naive_cost_dollars.values()), completed),
        )
