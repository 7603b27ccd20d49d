"""Job creation, as every submitting route does it: stored within its tenant's quota, once per
`Idempotency-Key`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from contract.job_store import QueueFullError
from contract.jobs import Job
from frontdoor.idempotency import IdempotencyGuard, Submitted, caller_scope
from frontdoor.schemas import IDEMPOTENCY_KEY_MAX
from frontdoor.services import redis_client, settings, store
from frontdoor.tenancy import caller_of

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        description="retries with the same key and body within 24 h create no new job",
    ),
]
REPLAYED_HEADER = "Idempotent-Replayed"


def api_key_id(event: Any) -> str | None:
    """API Gateway's id of the caller's API key (REST APIs with usage plans set it), or None."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    value = identity.get("apiKeyId")
    return str(value) if value else None


class _Guards(threading.local):
    guard: IdempotencyGuard | None = None


class Intake:
    """Creates jobs; with an Idempotency-Key, once per key. Shared by threads, each with its own guard
    (frontdoor/idempotency.py says why)."""

    def __init__(self) -> None:
        self._guards = _Guards()

    @property
    def _guard(self) -> IdempotencyGuard:
        """This thread's, built on its first use, so that building an app connects to nothing (the
        streaming server builds one on its event loop to look its routes up: frontdoor/route_traits.py)."""
        guard = self._guards.guard
        if guard is None:
            guard = self._guards.guard = IdempotencyGuard(redis_client(), settings().job_ttl_s)
        return guard

    def submit(
        self,
        new_job: Callable[[], Job],
        *,
        route: str,
        body: BaseModel,
        key: str | None,
        event: Any,
        context: LambdaContext | None,
    ) -> Submitted:
        """The id of the job this request stands for; `event` is the current proxy event."""

        max_inflight = caller_of(event).max_inflight

        def create() -> str:
            job = new_job()
            if not store().submit(job, max_inflight):
                raise QueueFullError(job.model)  # the idempotency record is dropped: a retry may succeed
            return job.id

        if key is None:
            return Submitted(job_id=create(), replayed=False)
        return self._guard.submit(
            route=route,
            key=key,
            caller=caller_scope(api_key_id(event), event.headers or {}),
            body=body.model_dump(mode="json"),
            create=create,
            context=context,
        )


def replay_headers(submitted: Submitted) -> dict[str, str]:
    """Tells a client that its request was answered from an earlier one with the same key."""
    return {REPLAYED_HEADER: "true"} if submitted.replayed else {}
