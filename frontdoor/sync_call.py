"""The steps every synchronous `/v1` call shares (completions, chat, embeddings): submit one job, then
wait for it on its done-list and answer with what it became.

At zero workers a call answers 503 `capacity_starting` with Retry-After and wakes the pool
(`frontdoor.capacity`) instead of queueing a job that would only expire with its client gone. The wait
is `SYNAPSE_SYNC_TIMEOUT_S`, under API Gateway's 29 s; past it, a 504 carries the jobId, and the job is
cancelled: its client has gone, and a worker that computed it to the end would be lost to every other
call (a queued job is never sent; a running one's result is dropped).
"""

from __future__ import annotations

from collections.abc import Callable

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel

from contract.job_record import JobRecord
from contract.jobs import CLIENT_GONE, Job
from frontdoor.capacity import CapacityStartingError, require_capacity, starting_problem
from frontdoor.idempotency import Submitted
from frontdoor.intake import Intake
from frontdoor.openapi import errors
from frontdoor.responses import problem_response
from frontdoor.services import settings, store
from openai_api.answer_schemas import OpenAIErrorBody
from openai_api.errors import Problem
from openai_api.format import outcome_problem

SYNC_ERRORS = (400, 401, 403, 404, 409, 413, 415, 422, 429, 502, 503, 504)
SYNC_503 = (
    "no worker is ready yet (capacity_starting: the pool is starting from zero), the job store is "
    "unreachable or full, (stream: true) every stream of the front door is open (streams_full), or the "
    "front door is at capacity (overloaded, waits_full); nothing was stored; retry after Retry-After"
)
SYNC_504 = (
    "the job did not finish within the call's wait, its deadline: the error carries its jobId, and the job "
    "was cancelled"
)


def sync_errors() -> dict[int, OpenAPIResponse]:
    """The OpenAPI error responses of a synchronous call, in OpenAI's error shape."""
    described = errors(OpenAIErrorBody, *SYNC_ERRORS)
    described[503] = {**described[503], "description": SYNC_503}
    described[504] = {**described[504], "description": SYNC_504}
    return described


class SyncCall:
    """Submit a job, wait for it on its done-list, tell why it has no answer."""

    def __init__(self, router: Router, intake: Intake) -> None:
        self._router = router
        self._intake = intake

    def problem(self, found: Problem) -> Response[str]:
        return problem_response(self._router.current_event.path, found)

    def submit(
        self, new_job: Callable[[], Job], *, model: str, route: str, body: BaseModel, key: str | None
    ) -> Submitted | Response[str]:
        """The job this request stands for (created now, or an earlier one for its Idempotency-Key), or
        the 503 to answer while no worker is ready."""

        def create() -> Job:
            require_capacity(model)
            return new_job()

        try:
            return self._intake.submit(
                create, route=route, body=body, key=key, event=self._router.current_event,
                context=self._router.lambda_context,
            )  # fmt: skip
        except CapacityStartingError:
            return self.problem(starting_problem(model, settings().cold_start_retry_after_s))

    def outcome(self, submitted: Submitted, param: str) -> JobRecord | Response[str]:
        """The job's record once it completed, or the error to answer: expired, failed, or still running
        after the wait."""
        cfg = settings()
        record = store().wait(submitted.job_id, cfg.sync_timeout_s)
        if record is None:
            message = "the job for this Idempotency-Key has expired; send the request with a new key"
            return self.problem(Problem(404, "job_expired", message, job_id=submitted.job_id))
        found = outcome_problem(record, cfg.sync_timeout_s, param)
        if found is None:
            return record
        if found.status == 504 and found.code == "timeout":  # still not final: nobody waits for it now
            store().cancel(record, CLIENT_GONE)
        return self.problem(found)
