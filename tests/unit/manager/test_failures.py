"""How failures are told apart and turned into outcomes."""

from contract.jobs import Job, JobStatus
from manager import outcomes
from manager.queue import Delivery
from manager.triton import BatchError, RowResult, is_worker_fault


class StatusError(Exception):
    """Shaped like tritonclient's InferenceServerException: a message and a gRPC status."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self._status = status

    def status(self) -> str:
        return self._status


def delivery(attempt: int = 1) -> Delivery:
    job = Job.new(model="gpu-sim", prompt="p", max_tokens=4, timeout_ms=1000)
    return Delivery("1-0", job, attempt=attempt)


def test_transport_failures_are_the_workers_fault():
    assert is_worker_fault(StatusError("StatusCode.UNAVAILABLE"))
    assert is_worker_fault(StatusError("StatusCode.DEADLINE_EXCEEDED"))
    assert is_worker_fault(ConnectionResetError())


def test_an_error_status_from_the_model_is_not_the_workers_fault():
    assert not is_worker_fault(StatusError("StatusCode.INTERNAL"))
    assert not BatchError("x", worker_fault=False).worker_fault


def test_a_row_with_an_error_fails_only_that_job():
    ok = outcomes.from_row(delivery(), RowResult("yes", 1, 1), started_ms=1, completed_ms=2, size=2)
    bad = outcomes.from_row(
        delivery(), RowResult("", 1, 0, error="bad prompt"), started_ms=1, completed_ms=2, size=2
    )
    assert ok.status is JobStatus.COMPLETED and ok.text == "yes"
    assert bad.status is JobStatus.FAILED
    assert (bad.error_code, bad.error_message) == (outcomes.MODEL_ERROR, "bad prompt")


def test_exhausted_and_overdue_jobs_say_why():
    gone = outcomes.exhausted(delivery(attempt=3), "worker vanished", 10)
    assert gone.error_code == outcomes.MAX_ATTEMPTS_EXCEEDED
    assert "3 attempts" in gone.error_message and "worker vanished" in gone.error_message
    late = outcomes.overdue(delivery(), 10)
    assert late.error_code == outcomes.DEADLINE_EXCEEDED
