"""Tenants for the integration tests: a key of a tenant of their own, made the way a user makes one."""

from __future__ import annotations

import os
import subprocess
import time

from local_stack.gateway import KEYS_RELOAD_S
from tests.integration.conftest import Stack
from tests.processes import REPO, synapse


def new_tenant_key(stack: Stack, tenant: str, **limits: float) -> str:
    """A new key of the tenant, with these limits (`max_inflight`, `rate`, `burst`), from `synapse keys
    create` on the stack's state directory; returned once every gateway of the stack takes it.

    A gateway looks at the keys file at most once every KEYS_RELOAD_S, so any request that much after
    the file changed sees the change: waiting it out spends none of the tenant's rate on a probe.
    """
    flags = [part for name, value in limits.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    created = subprocess.run(
        synapse("keys", "create", "--tenant", tenant, *flags),
        env={**os.environ, **stack.env}, cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    time.sleep(KEYS_RELOAD_S + 0.2)
    return created.stdout.strip()
