"""Whose request it is: the tenant the gateway resolved from the API key, and that tenant's quota.

The gateway in front of the front door knows the key, so it names the tenant: in AWS the request
authorizer (`frontdoor/authorizer.py`) returns it in its context, which API Gateway hands to the
function as `requestContext.authorizer`; locally the gateway (`local_stack/gateway.py`) resolves the key
from the keys file and puts the same fields in the same place. The front door never sees a key's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contract.jobs import DEFAULT_TENANT

TENANT_FIELD = "tenant"
MAX_INFLIGHT_FIELD = "maxInflight"


@dataclass(frozen=True, slots=True)
class Caller:
    """A tenant and its quota of jobs in flight (0: none)."""

    tenant: str = DEFAULT_TENANT
    max_inflight: int = 0

    def authorizer_context(self) -> dict[str, str]:
        """The fields as an authorizer's context carries them: strings only (API Gateway's rule)."""
        return {TENANT_FIELD: self.tenant, MAX_INFLIGHT_FIELD: str(self.max_inflight)}


def caller_from_context(context: Mapping[str, Any] | None) -> Caller:
    """The caller an authorizer context names; with none (a bare handler call in a unit test), the
    default tenant, without a quota."""
    context = context or {}
    tenant = str(context.get(TENANT_FIELD) or DEFAULT_TENANT)
    try:
        max_inflight = max(0, int(context.get(MAX_INFLIGHT_FIELD) or 0))
    except (TypeError, ValueError):
        max_inflight = 0
    return Caller(tenant, max_inflight)


def caller_of(event: Any) -> Caller:
    """The caller of a proxy event (a Powertools event object or its raw dict)."""
    raw = event.raw_event if hasattr(event, "raw_event") else event
    request_context = raw.get("requestContext") or {}
    return caller_from_context(request_context.get("authorizer"))
