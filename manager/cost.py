"""What inference costs on Synapse, per 1,000 inferences, priced as AWS bills it, next to one invocation
per request priced the same way.

The ledger adds up, in dollars since the manager started, each part of the bill (`PARTS`):

    gpu          wall time of every registered worker, busy or idle, at the GPU price P per hour
    api_gateway  every request the front door served: a submit, each poll, each /v1 call
    lambda       those requests' front-door invocations and billed milliseconds, each with its
                 authorizer call
    cache        the job store's idle minimum over wall time, plus its ECPUs: a fixed number per
                 submitted job and per request (contract/prices.py states the model)
    manager      this manager's wall time at the manager task's price
    idle         every other always-on resource, its monthly price spread over wall time

    cost per 1,000 = 1000 x (sum of the parts) / N completed jobs

The naive baseline is one invocation per request: per completed job, T1(model) x P / 3600 of GPU (T1
is the model's measured duration of a batch of one), one API Gateway request, and one front-door
invocation (and its authorizer call) billed for T1, as it holds the request while the GPU works. An
embedding job of N texts is one request whose invocation embeds them one by one: N x T1 of GPU, and
the invocation billed for that; its N embeddings count as N inferences on both sides. It
has no manager, no cache and no idle cost, and no cold starts: the most favourable case for it, so the
saving shown (1 - cost / naive cost) is a lower bound.

The front door's requests and the submissions are fleet-wide counters in Redis; every manager prices
their increase alike, as it does the worker time and the idle resources: aggregate those parts with
`max` across managers, and `manager` (and the naive parts, priced on each manager's own jobs) with
`sum`. Pure: the sampler feeds it durations and counter readings, Prometheus reads the totals.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from contract.prices import Prices, billed_ms
from contract.settings import Settings

SECONDS_PER_HOUR = 3600.0
EWMA_WEIGHT = 0.1  # a new batch-of-one duration moves the estimate by a tenth: steady, yet it follows drift
PARTS = ("gpu", "api_gateway", "lambda", "cache", "manager", "idle")
NAIVE_PARTS = ("gpu", "api_gateway", "lambda")
PER_MANAGER_PARTS = frozenset({"manager"})
LIST_PRICES = Prices()


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


def prices_of(settings: Settings) -> Prices:
    """A deployment's own prices (another region, other sizes), from its settings."""
    return Prices(
        api_gateway_per_million_requests=settings.api_gateway_price_per_million_requests,
        lambda_per_gb_second=settings.lambda_price_per_gb_second,
        lambda_per_million_requests=settings.lambda_price_per_million_requests,
        front_door_memory_mb=settings.front_door_memory_mb,
        manager_per_hour=settings.manager_price_per_hour,
        cache_per_hour=settings.cache_price_per_hour,
        cache_per_million_ecpus=settings.cache_price_per_million_ecpus,
        other_idle_per_month=settings.idle_other_price_per_month,
    )


def dollars(gpu_seconds: float, price_per_hour: float) -> float:
    return gpu_seconds * price_per_hour / SECONDS_PER_HOUR


def per_thousand(cost_dollars: float, completed: float) -> float | None:
    """Cost per 1,000 inferences; None before the first completed job."""
    return 1000.0 * cost_dollars / completed if completed > 0 else None


@dataclass(slots=True)
class CounterReading:
    """The increase of a counter another process keeps (in Redis) since the first reading.

    What was counted before the manager started is not its to price; a counter that went down was
    reset (its key deleted), and all of its new value is the increase, as Prometheus reads counters.
    """

    last: float | None = None

    def increase(self, total: float) -> float:
        last, self.last = self.last, total
        if last is None:
            return 0.0
        return total - last if total >= last else total


class CostLedger:
    """Running totals behind the cost metrics: each part of the bill, completed jobs, and what those
    jobs would cost naively.

    Jobs that complete before their model's T1 can be estimated wait unpriced and are priced at the
    first estimate, so the naive total always covers every completed job once T1 is known.
    """

    def __init__(self, price_per_hour: float, prices: Prices = LIST_PRICES) -> None:
        self.price_per_hour = price_per_hour
        self.prices = prices
        self.worker_seconds = 0.0
        self.cost_dollars: defaultdict[str, float] = defaultdict(float)
        self.naive_dollars: defaultdict[str, float] = defaultdict(float)
        self.completed: defaultdict[str, int] = defaultdict(int)
        self.naive_cost_dollars: defaultdict[str, float] = defaultdict(float)  # GPU part, by model
        self.batch_of_one: defaultdict[str, BatchOfOne] = defaultdict(BatchOfOne)
        self._unpriced: dict[str, tuple[int, int]] = {}  # by model: jobs and inferences awaiting T1
        self._requests = CounterReading()
        self._billed_ms = CounterReading()
        self._submitted = CounterReading()

    @property
    def gpu_cost_dollars(self) -> float:
        return self.cost_dollars["gpu"]

    def add_worker_time(self, seconds: float, running_workers: int) -> None:
        worker_seconds = max(0.0, seconds) * running_workers
        self.worker_seconds += worker_seconds
        self.cost_dollars["gpu"] += dollars(worker_seconds, self.price_per_hour)

    def add_uptime(self, seconds: float) -> None:
        """What runs whether or not jobs come: the manager, the cache's minimum, the other resources."""
        seconds = max(0.0, seconds)
        self.cost_dollars["manager"] += self.prices.manager(seconds)
        self.cost_dollars["cache"] += self.prices.cache_idle(seconds)
        self.cost_dollars["idle"] += self.prices.other_idle(seconds)

    def read_front_door(self, requests: float, billed_ms: float) -> None:
        """The front door's totals (every route): requests served and Lambda milliseconds billed."""
        new_requests = self._requests.increase(requests)
        self.cost_dollars["api_gateway"] += self.prices.api_gateway(new_requests)
        self.cost_dollars["lambda"] += self.prices.lambdas(new_requests, self._billed_ms.increase(billed_ms))
        self.cost_dollars["cache"] += self.prices.cache_ecpus(0, new_requests)

    def read_submitted(self, jobs: float) -> None:
        """Jobs accepted fleet-wide: each costs the cache the ECPUs of its submit and its handling."""
        self.cost_dollars["cache"] += self.prices.cache_ecpus(self._submitted.increase(jobs), 0)

    def observe_batch(self, model: str, size: int, seconds: float) -> None:
        self.batch_of_one[model].observe(size, seconds)
        if model in self._unpriced:
            self._price(model, *self._unpriced.pop(model))

    def complete(self, model: str, jobs: int, inferences: int | None = None) -> None:
        """`jobs` completed, holding `inferences` (an embedding job: one per text; else one per job)."""
        inferences = jobs if inferences is None else inferences
        self.completed[model] += inferences
        held_jobs, held_inferences = self._unpriced.pop(model, (0, 0))
        self._price(model, held_jobs + jobs, held_inferences + inferences)

    def _price(self, model: str, jobs: int, inferences: int) -> None:
        """Naively, each job is one request and one invocation, which runs its inferences one by one."""
        t1 = self.batch_of_one[model].estimate()
        if t1 is None:
            self._unpriced[model] = (jobs, inferences)
            return
        gpu = dollars(inferences * t1, self.price_per_hour)
        self.naive_cost_dollars[model] += gpu
        self.naive_dollars["gpu"] += gpu
        self.naive_dollars["api_gateway"] += self.prices.api_gateway(jobs)
        self.naive_dollars["lambda"] += self.prices.lambdas(jobs, jobs * billed_ms(inferences / jobs * t1))

    def per_thousand(self) -> tuple[float | None, float | None]:
        """(Synapse, naive) dollars per 1,000 completed inferences since the manager started."""
        completed = sum(self.completed.values())
        return (
            per_thousand(sum(self.cost_dollars.values()), completed),
            per_thousand(sum(self.naive_dollars.values()), completed),
        )
