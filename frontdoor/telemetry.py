"""The front door's telemetry: logs keyed by job id, CloudWatch EMF counts, rejections and usage in Redis.

It looks at each invocation from outside (the event before, the response after), so the routes stay
free of it. Correlation id: the job id, from the path of a result read or the body of a 202.

EMF: Powertools Metrics prints one JSON document per flush to stdout, which only Lambda ships to
CloudWatch; anywhere else (the local gateway) it would be a line of noise per request. So EMF is on
when AWS_LAMBDA_FUNCTION_NAME is set, and POWERTOOLS_METRICS_DISABLED, when set, decides either way
(`false` shows the documents locally). Prometheus cannot scrape a Lambda, so rejections are also
counted into a Redis hash that the manager exposes as `synapse_jobs_rejected_total`; submissions
need no counter of their own (the manager reads the streams' entries-added). Every invocation is
also counted, with its billed duration, by route (`frontdoor/usage.py`): what API Gateway and Lambda
bill for it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Mapping
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from contract.keys import COUNTS_KEY, REJECTIONS_KEY, REQUESTS_KEY
from contract.redis_client import STORE_ERRORS, SyncRedis, sync_client
from contract.settings import Settings
from frontdoor.tenancy import caller_of
from frontdoor.usage import RequestTally, route_of

NAMESPACE = "Synapse"
SERVICE = "synapse-frontdoor"
COUNTER_TIMEOUT_S = 0.25  # best effort: a rejection is never held up long by its own bookkeeping
RESULT_PATH = re.compile(r"^/results/([^/]+)$")
# Requests that create a job: what counts as a submission or a rejection (a refused cancel does not).
SUBMISSION_PATH = re.compile(r"^(/async-infer|/v1/.*|/jobs/[^/]+/retry)$")
FALSY = frozenset({"0", "false", "no", "off", ""})

logger = Logger(service=SERVICE, child=True)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
# Powertools keeps one metric set per process; the local gateway runs invocations in threads.
_emf_lock = threading.Lock()
_invocation = threading.local()  # when this thread's current invocation began


def emf_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """In Lambda, unless Powertools is told otherwise (the same variables, read the same way)."""
    explicit = environ.get("POWERTOOLS_METRICS_DISABLED")
    if explicit is not None:
        return explicit.strip().lower() in FALSY
    dev_mode = environ.get("POWERTOOLS_DEV", "").strip().lower() not in FALSY
    return bool(environ.get("AWS_LAMBDA_FUNCTION_NAME")) and not dev_mode


def begin_invocation(event: Mapping[str, Any]) -> None:
    """Starts each invocation's log keys afresh (threads and Lambda environments are reused)."""
    _invocation.started = time.monotonic()
    logger.thread_safe_clear_keys()
    match = RESULT_PATH.match(str(event.get("path") or ""))
    if match:
        logger.thread_safe_append_keys(correlation_id=match.group(1))


def end_invocation(event: Mapping[str, Any], response: Mapping[str, Any]) -> None:
    """Counts the request and its duration; a POST also as a submission (2xx with a job id) or a
    rejection (4xx/5xx, by error code)."""
    started = getattr(_invocation, "started", None)
    if started is not None:
        _usage.add(route_of(str(event.get("path") or "")), requests=1, seconds=time.monotonic() - started)
    if str(event.get("httpMethod") or "").upper() != "POST" or not SUBMISSION_PATH.match(
        str(event.get("path") or "")
    ):
        return
    status = int(response.get("statusCode") or 0)
    body = _json(response.get("body"))
    if status < 300 and isinstance(body.get("jobId"), str):
        logger.thread_safe_append_keys(correlation_id=body["jobId"])
        logger.debug("job accepted")
        if emf_enabled():
            emit("JobsSubmitted", {"model": _model(event)}, job_id=body["jobId"])
    elif status >= 400:
        reason = _error_code(body) or f"http_{status}"
        logger.debug("submission rejected", reason=reason, status=status)
        if emf_enabled():
            emit("JobsRejected", {"reason": reason})
        if status != 503:  # a 503 means Redis is unreachable: no point waiting on it again
            count_rejection(reason, caller_of(event).tenant)


def emit(name: str, dimensions: Mapping[str, str], **metadata: str) -> None:
    """One EMF document holding one count, flushed at once."""
    with _emf_lock:
        for key, value in dimensions.items():
            metrics.add_dimension(name=key, value=value)
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
        for key, value in metadata.items():
            metrics.add_metadata(key=key, value=value)
        metrics.flush_metrics()


@cache
def _counter_client() -> SyncRedis:
    return sync_client(Settings.from_env(), max_connections=8, retries=0, timeout_s=COUNTER_TIMEOUT_S)


def count_rejection(reason: str, tenant: str) -> None:
    """By reason fleet-wide, and by tenant and reason (`<tenant>|rejected:<reason>`)."""
    try:
        pipe = _counter_client().pipeline(transaction=False)
        pipe.hincrby(REJECTIONS_KEY, reason, 1)
        pipe.hincrby(COUNTS_KEY, f"{tenant}|rejected:{reason}", 1)
        pipe.execute()
    except STORE_ERRORS as exc:
        logger.debug("could not count a rejection", reason=reason, error=str(exc))


def _write_usage(increments: Mapping[str, int]) -> bool:
    try:
        pipe = _counter_client().pipeline(transaction=False)
        for field, amount in increments.items():
            pipe.hincrby(REQUESTS_KEY, field, amount)
        pipe.execute()
    except STORE_ERRORS as exc:
        logger.debug("could not count requests", error=str(exc))
        return False
    return True


_usage = RequestTally(_write_usage)


def streamed(event: Mapping[str, Any], seconds: float) -> None:
    """A streamed answer keeps its invocation (and its bill) running after the handler returned.

    It may write to Redis with the blocking client: the streaming server calls it off its event loop.
    """
    _usage.add(route_of(str(event.get("path") or "")), requests=0, seconds=seconds)


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str | bytes) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error_code(body: Mapping[str, Any]) -> str | None:
    error = body.get("error")
    if isinstance(error, Mapping):
        code = error.get("code") or error.get("type")
        return str(code) if code else None
    return None


def _model(event: Mapping[str, Any]) -> str:
    model = _json(event.get("body")).get("model")
    return model if isinstance(model, str) and model else "unknown"
