"""Idempotent job submission: the same `Idempotency-Key` with the same body creates one job.

Built on Powertools' idempotency utility and its Redis persistence layer (`CachePersistenceLayer`,
the current name of `RedisCachePersistenceLayer`), on the front door's own Redis client. A record
lives as long as a job (24 h by default), keyed per route and per caller, and holds the job id.

Two pieces of that utility's state must not be shared between the local gateway's threads:
`BasePersistenceLayer.configure` rewrites the layer's key prefix on every call (and keeps only the
first configuration it sees), and `IdempotencyConfig` holds the current invocation's Lambda context.
So each thread builds its own guard (`frontdoor/intake.py`), with a config and a persistence layer per
route, on the first submission it runs. In Lambda there is one thread, and one guard per execution
environment.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from contract.keys import idempotency_prefix
from contract.redis_client import SyncRedis
from frontdoor.api_key import presented_key

# Powertools 3 marks the class's old name deprecated; `CachePersistenceLayer` is the same class.
warnings.filterwarnings(
    "ignore", message="RedisCachePersistenceLayer will be removed", category=DeprecationWarning
)

REPLAYED = "_replayed"
# An in-progress record outlives a crashed invocation by this much when no Lambda context says more.
LOCAL_INVOCATION_BUDGET_MS = 30_000


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    replayed: bool


def caller_scope(api_key_id: str | None, headers: Mapping[str, str]) -> str:
    """Whose key namespace a request uses: API Gateway's API key id in AWS, else a hash of the presented
    key (never the key itself), else "" where no key is presented (unit tests call the handler bare)."""
    if api_key_id:
        return f"id:{api_key_id}"
    presented = presented_key(headers)
    if presented is None:
        return ""
    return "sha256:" + hashlib.sha256(presented.encode()).hexdigest()


def idempotency_payload(caller: str, key: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """What Powertools hashes: `key` names the record (with the route's prefix), `body` must match it."""
    return {"key": {"caller": caller, "key": key}, "body": dict(body)}


class InvocationBudget(LambdaContext):
    """The remaining-time half of a Lambda context, for invocations that have none (the local gateway)."""

    def __init__(self, remaining_ms: int) -> None:
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:  # type: ignore[override]
        return self._remaining_ms


class ValidatingCacheLayer(CachePersistenceLayer):
    """Powertools' Redis layer, keeping the payload hash when a record completes.

    Powertools 3.37's `_update_record` rewrites the whole value with status, expiry and response only,
    so the hash written with the in-progress record is lost and every replay of a completed request
    fails payload validation (the TypeScript port had the same bug: powertools-lambda-typescript#5705).
    """

    def _update_record(self, data_record: DataRecord) -> None:
        item: dict[str, Any] = {
            self.data_attr: data_record.response_data,
            self.status_attr: data_record.status,
            self.expiry_attr: data_record.expiry_timestamp,
        }
        if self.payload_validation_enabled:
            item[self.validation_key_attr] = data_record.payload_hash
        ttl = self._get_expiry_second(data_record.expiry_timestamp)
        self.client.set(name=data_record.idempotency_key, value=json.dumps(item), ex=ttl)


def _create_job(*, request: dict[str, Any], create: Callable[[], str]) -> dict[str, Any]:
    return {"jobId": create()}


def _mark_replayed(response: Any, idempotent_data: DataRecord) -> Any:
    return {**response, REPLAYED: True}


class IdempotencyGuard:
    """Runs a job's creation at most once per (route, caller, key); one guard per thread (see module)."""

    def __init__(self, client: SyncRedis, ttl_s: int) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._configs: dict[str, IdempotencyConfig] = {}
        self._runners: dict[str, Callable[..., dict[str, Any]]] = {}

    def _runner(self, route: str) -> tuple[IdempotencyConfig, Callable[..., dict[str, Any]]]:
        if route not in self._runners:
            config = IdempotencyConfig(
                event_key_jmespath="key",
                payload_validation_jmespath="body",
                raise_on_no_idempotency_key=True,
                expires_after_seconds=self._ttl_s,
                hash_function="sha256",
                response_hook=_mark_replayed,
            )
            layer = ValidatingCacheLayer(client=self._client)  # type: ignore[arg-type]
            self._configs[route] = config
            self._runners[route] = idempotent_function(
                _create_job,
                data_keyword_argument="request",
                persistence_store=layer,
                config=config,
                key_prefix=idempotency_prefix(route),
            )
        return self._configs[route], self._runners[route]

    def submit(
        self,
        *,
        route: str,
        key: str,
        caller: str,
        body: Mapping[str, Any],
        create: Callable[[], str],
        context: LambdaContext | None,
    ) -> Submitted:
        """The job id for this key: `create()`'s on first use, the recorded one on a replay.

        Raises Powertools' IdempotencyValidationError when the key was used with another body,
        IdempotencyAlreadyInProgressError while its first request is still creating the job, and
        IdempotencyPersistenceLayerError when Redis cannot be reached.
        """
        config, runner = self._runner(route)
        config.register_lambda_context(context or InvocationBudget(LOCAL_INVOCATION_BUDGET_MS))
        outcome = runner(request=idempotency_payload(caller, key, body), create=create)
        return Submitted(job_id=str(outcome["jobId"]), replayed=bool(outcome.get(REPLAYED)))
