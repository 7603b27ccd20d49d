"""Where a tenant's webhook secret comes from: the local keys file, or a Secrets Manager secret in AWS.

The callback sender asks for a tenant's secret before every delivery, so both sources cache: the keys file
is read again only when its mtime changes (`synapse keys` rewrote it), the secret at most once a minute.
A source that cannot be read raises `SecretsUnavailableError`: the delivery is retried later, never
sent unsigned and never given up for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from contract.settings import Settings
from contract.tenants import KeyBook, keys_file

log = logging.getLogger(__name__)

SECRETS_REFRESH_S = 60.0


class SecretsUnavailableError(Exception):
    """The secrets could not be read just now (a Secrets Manager error, a keys file that is not JSON)."""


class WebhookSecrets(Protocol):
    async def secret(self, tenant: str) -> str | None:
        """The tenant's webhook secret; None when it has none."""


class KeysFileSecrets:
    """The local stack's secrets: each tenant's `webhook_secret` in the keys file (contract/tenants.py)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mtime_ns: int | None = None
        self._secrets: dict[str, str] = {}

    async def secret(self, tenant: str) -> str | None:
        try:
            mtime_ns = self._path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if mtime_ns != self._mtime_ns:
            try:
                book = KeyBook.load(self._path)
            except (OSError, ValueError, TypeError) as exc:  # a file edited by hand, say
                raise SecretsUnavailableError(f"cannot read {self._path}: {exc}") from exc
            self._secrets = {name: t.webhook_secret for name, t in book.tenants.items()}
            self._mtime_ns = mtime_ns
        return self._secrets.get(tenant)


class SecretsManagerSecrets:
    """AWS: one secret whose value is a JSON map {tenant: webhook secret}, re-read every refresh_s."""

    def __init__(
        self, arn: str, client: Any, *, refresh_s: float = SECRETS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._arn = arn
        self._client = client  # a boto3 secretsmanager client
        self._refresh_s = refresh_s
        self._clock = clock
        self._secrets: dict[str, str] | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()  # deliveries that find the cache stale together read it once

    async def secret(self, tenant: str) -> str | None:
        async with self._lock:
            secrets = self._secrets
            if secrets is None or self._clock() - self._read_at >= self._refresh_s:
                secrets = await self._read()
        return secrets.get(tenant)

    async def _read(self) -> dict[str, str]:
        try:
            reply = await asyncio.to_thread(self._client.get_secret_value, SecretId=self._arn)
            document = json.loads(reply["SecretString"])
            if not isinstance(document, dict):
                raise ValueError("the secret is not a JSON object")
        except (BotoCoreError, ClientError, KeyError, ValueError) as exc:
            if self._secrets is None:
                raise SecretsUnavailableError(f"cannot read {self._arn}: {exc}") from exc
            log.warning("cannot read %s again (%s); signing with the secrets read before", self._arn, exc)
        else:
            self._secrets = {str(name): str(value) for name, value in document.items()}
        self._read_at = self._clock()
        return self._secrets


def secrets_for(settings: Settings) -> WebhookSecrets:
    """Secrets Manager where `webhook_secrets_arn` names a secret, else the state directory's keys file."""
    if settings.webhook_secrets_arn:
        timeouts = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})
        client = boto3.client("secretsmanager", config=timeouts)
        return SecretsManagerSecrets(settings.webhook_secrets_arn, client)
    return KeysFileSecrets(keys_file(settings.state_dir))
