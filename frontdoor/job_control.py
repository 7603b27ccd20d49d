"""What a client does with its jobs after submitting them: `GET /jobs` lists them, `POST /jobs/{jobId}/cancel`
stops one, `POST /jobs/{jobId}/retry` runs a failed or cancelled one again. A tenant sees only its own
jobs: another's answers 404, like an unknown id."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import replace
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel

from contract.job_record import public_view
from contract.jobs import CANCELLED_BY_CLIENT, Job, JobStatus
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.jobs_routes import JOB_LINKS, job_not_found, owned_job
from frontdoor.openapi import API_KEY, errors, ok
from frontdoor.responses import json_response, problem_response
from frontdoor.route_traits import declares
from frontdoor.schemas import ErrorBody, JobList, JobStatusName, JobView, RetryResponse
from frontdoor.services import store
from frontdoor.tenancy import Caller, caller_of
from openai_api.errors import Problem

# A running job stops at its engine's next step, or when its one-shot batch returns: the answer waits
# this long for it to be final, so that a client usually sees CANCELLED at once.
CANCEL_WAIT_S = 2.0
MAX_PAGE = 100
RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
_INDEX_MEMBER = re.compile(r"^\d{13}\|[0-9a-fA-F-]{36}$")

StatusFilter = Annotated[JobStatusName | None, Query(description="only jobs in this status")]
ModelFilter = Annotated[str | None, Query(min_length=1, max_length=128, description="only this model's jobs")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="jobs per page")]
Cursor = Annotated[
    str | None, Query(min_length=1, max_length=128, description="`nextCursor` of the previous page")
]


def encode_cursor(member: str) -> str:
    return base64.urlsafe_b64encode(member.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str | None:
    """The index member a cursor stands for, or None for one this API never handed out."""
    try:
        member = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return member if _INDEX_MEMBER.match(member) else None


def retry_of(old: Job, caller: Caller) -> Job:
    """A new job with the same input as `old`, pointing back at it; a response's job stays one (its
    stored request goes with it), so the retry is read as `resp_<its id>`."""
    job = Job.new(
        model=old.model,
        prompt=old.prompt,
        inputs=old.inputs,
        max_tokens=old.max_tokens,
        parameters=old.parameters,
        timeout_ms=old.deadline_ms - old.created_ms,
        tenant=caller.tenant,
        priority=old.priority,
        callback=old.callback,
        ttl_s=old.ttl_s,
        retry_of=old.id,
    )
    return replace(job, request=old.request)


def listing(
    caller: Caller, status: str | None, model: str | None, limit: int, cursor: str | None
) -> Problem | tuple[int, dict[str, Any]]:
    after = None
    if cursor is not None:
        after = decode_cursor(cursor)
        if after is None:
            message = "cursor is not one this API returned: pass a page's nextCursor as it is"
            return Problem(400, "invalid_cursor", message, param="cursor")
    found, last = store().list_jobs(caller.tenant, limit=limit, after=after, status=status, model=model)
    return 200, {
        "jobs": [public_view(record, with_result=False) for record in found],
        "nextCursor": None if last is None else encode_cursor(last),
    }


def cancellation(job_id: str, caller: Caller) -> Problem | tuple[int, dict[str, Any]]:
    """200 with the job once CANCELLED; 202 while its worker still stops it; 409 for a final job."""
    record = owned_job(job_id, caller)
    status = None if record is None else store().cancel(record, CANCELLED_BY_CLIENT)
    if record is None or status is None:
        return job_not_found(job_id)
    if status.is_final:
        message = f"job {job_id} is {status.value}: only a QUEUED or RUNNING job can be cancelled"
        return Problem(409, "job_final", message)
    after = store().wait(job_id, CANCEL_WAIT_S) if status is JobStatus.RUNNING else store().get(job_id)
    now = after or record
    return 200 if now.status.is_final else 202, public_view(now)


def job_control_router(intake: Intake) -> Router:
    router = Router()  # type: ignore[no-untyped-call]

    def problem(found: Problem) -> Response[str]:
        return problem_response(router.current_event.path, found)

    def answer(outcome: Problem | tuple[int, dict[str, Any]]) -> Response[str]:
        return problem(outcome) if isinstance(outcome, Problem) else json_response(*outcome)

    @router.get(
        "/jobs",
        operation_id="listJobs",
        summary="Your jobs, newest first, a page at a time",
        tags=["jobs"],
        security=API_KEY,
        responses={**ok(200, JobList, "a page of jobs"), **errors(ErrorBody, 400, 401, 403, 503)},
    )
    def list_jobs(
        status: StatusFilter = None, model: ModelFilter = None, limit: Limit = 20, cursor: Cursor = None
    ) -> Response[str]:
        return answer(listing(caller_of(router.current_event), status, model, limit, cursor))

    @router.post(
        "/jobs/<job_id>/cancel",
        operation_id="cancelJob",
        summary="Stop a queued or running job",
        tags=["jobs"],
        security=API_KEY,
        responses={
            **ok(200, JobView, "the job, CANCELLED"),
            **ok(202, JobView, "the job is still stopping on its worker; it ends CANCELLED shortly"),
            **errors(ErrorBody, 400, 401, 403, 404, 503),
            **errors(ErrorBody, 409, why="the job is already COMPLETED, FAILED or CANCELLED"),
        },
    )
    @declares(cancels=True)  # for a running job to stop: CANCEL_WAIT_S, on a lane of its own
    def cancel(job_id: str) -> Response[str]:
        return answer(cancellation(job_id, caller_of(router.current_event)))

    @router.post(
        "/jobs/<job_id>/retry",
        operation_id="retryJob",
        summary="Run a FAILED or CANCELLED job again, as a new job with the same input",
        tags=["jobs"],
        security=API_KEY,
        responses={
            202: {
                "description": "the new job, queued",
                "content": {"application/json": {"model": RetryResponse}},
                "links": JOB_LINKS,
            },
            **errors(ErrorBody, 400, 401, 403, 404, 422, 429, 503),
            **errors(
                ErrorBody,
                409,
                why="the job is not FAILED or CANCELLED, or a request with this "
                "Idempotency-Key is still being processed",
            ),
        },
    )
    def retry(job_id: str, idempotency_key: IdempotencyKeyHeader = None) -> Response[str]:
        caller = caller_of(router.current_event)
        record = owned_job(job_id, caller)
        old = None if record is None else store().job(job_id)
        if record is None or old is None:
            return problem(job_not_found(job_id))
        if record.status not in RETRYABLE:
            message = f"job {job_id} is {record.status.value}: only a FAILED or CANCELLED job can be retried"
            return problem(Problem(409, "job_not_retryable", message))
        submitted = intake.submit(
            lambda: retry_of(old, caller),
            route="retry",
            body=RetryKey(jobId=job_id),
            key=idempotency_key,
            event=router.current_event,
            context=router.lambda_context,
        )
        if not submitted.replayed:
            store().link_retry(job_id, submitted.job_id)
        body = {"jobId": submitted.job_id, "status": "QUEUED", "retryOf": job_id}
        return json_response(202, body, replay_headers(submitted))

    return router


class RetryKey(BaseModel):
    """What an Idempotency-Key of a retry stands for: the job it retries."""

    jobId: str  # noqa: N815
