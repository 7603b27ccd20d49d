"""One signed POST of an ended job's view to its callback URL, to an address the policy permits.

A callback connects only to an address manager/callback_address.py permits (public unicast, or the
operator's allowlist), resolved once and connected to as an IP literal. What a failed try records for the
tenant to read says no more than the tenant needs (`connection refused by policy`, `timeout`, `connection
failed`, `HTTP <status>`): nothing of how an address it may not reach behaved. At most `max_per_address`
POSTs go to one receiving address at a time (as resolved, so that many names or aliases of one host count
together). Nothing is ever sent unsigned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from yarl import URL

from contract.job_record import JobRecord, public_view
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, sign
from manager.callback_address import (
    AddressPolicy,
    AddressRefusedError,
    IPAddress,
    Resolver,
    SystemResolver,
    effective,
    vetted_address,
)
from manager.callback_policy import Attempt
from manager.webhook_secrets import SecretsUnavailableError, WebhookSecrets

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0  # resolving the host, and then connecting, may each take this: a dead host fails fast
USER_AGENT = "Synapse-Webhooks/1"
# How long a host is known to resolve to the address its last try found: while that address is at its
# bound, the host's next jobs are put back without a try (and without holding a tenant's slot). Short,
# so a host that moves to another address is tried again soon.
HOST_MEMORY_S = 5.0
MAX_HOSTS_REMEMBERED = 10_000

# What a failed try records (`lastError`), besides `HTTP <status>` from a receiver it may reach.
REFUSED = "connection refused by policy"
TIMED_OUT = "timeout"
CONNECTION_FAILED = "connection failed"
INVALID_URL = "invalid callback URL"


@dataclass(frozen=True, slots=True)
class Target:
    """Where one POST goes: the URL with its host replaced by the vetted address, and what keeps the
    request the host's: its Host header and, over TLS, the name the certificate must be valid for."""

    url: URL
    host_header: str
    server_hostname: str | None

    @classmethod
    def pinned(cls, url: URL, address: IPAddress) -> Target:
        literal = url.raw_host == str(address)
        name = None if literal or url.scheme != "https" else url.raw_host
        return cls(url.with_host(str(address)), url.host_port_subcomponent or "", name)


def release(counts: Counter[Any], key: object) -> None:
    """One fewer in flight under `key`; a key at zero leaves the counter."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


def body_of(record: JobRecord, *, with_result: bool = True) -> bytes:
    view = public_view(record, with_result=with_result)
    return json.dumps(view, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookPoster:
    """`start()` opens its HTTP session; `post` makes one try; `aclose()` closes both session and resolver."""

    def __init__(
        self, secrets: WebhookSecrets, *, timeout_s: float, https_only: bool, max_in_flight: int,
        max_per_address: int, policy: AddressPolicy, resolver: Resolver | None = None,
    ) -> None:  # fmt: skip
        self._secrets = secrets
        self._timeout_s = timeout_s
        self._https_only = https_only
        self._max_in_flight = max_in_flight
        self._max_per_address = max_per_address
        self._policy = policy
        self._own_resolver: SystemResolver | None = None
        if resolver is None:  # one thread per delivery slot: a delivery resolves one name at a time
            resolver = self._own_resolver = SystemResolver(max_in_flight)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._addresses: Counter[tuple[str, int]] = Counter()  # callbacks in flight by address and port
        # A URL's host and port -> the address slot its last try resolved to, and when.
        self._hosts: dict[tuple[str, int], tuple[tuple[str, int], float]] = {}

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(
            total=self._timeout_s, sock_connect=min(CONNECT_TIMEOUT_S, self._timeout_s)
        )
        self._session = aiohttp.ClientSession(
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=self._max_in_flight),
            headers={"User-Agent": USER_AGENT},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._own_resolver is not None:
            self._own_resolver.close()

    def at_bound(self, url: str) -> bool:
        """Whether a try at this URL now would be refused at once: its host resolved, a moment ago, to an
        address that has max_per_address POSTs in flight. The sender puts such a job back without taking
        a slot of its tenant's, so a hung host's queue of callbacks does not crowd out the tenant's others."""
        try:
            target = URL(url)
        except ValueError:
            return False
        known = self._hosts.get((target.raw_host or "", target.port or 0))
        if known is None or time.monotonic() - known[1] > HOST_MEMORY_S:
            return False
        return self._addresses[known[0]] >= self._max_per_address

    def _remember(self, target: URL, slot: tuple[str, int]) -> None:
        if len(self._hosts) >= MAX_HOSTS_REMEMBERED:
            self._hosts.clear()
        self._hosts[(target.raw_host or "", target.port or 0)] = (slot, time.monotonic())

    async def post(self, record: JobRecord, attempts: int) -> Attempt | None:
        """One try, signed; None when it was not made: the address is at its bound."""
        assert record.callback is not None, "a job that owes a callback names its URL"
        job_id, tenant, url = record.id, record.tenant, record.callback.url
        if self._https_only and not url.lower().startswith("https://"):
            return Attempt(False, "refused: callback URLs must be https (callback_https_only)", final=True)
        try:
            secret = await self._secrets.secret(tenant)
        except SecretsUnavailableError as exc:
            return Attempt(False, str(exc))
        if secret is None:
            return Attempt(False, f"no webhook secret for tenant {tenant}", final=True)
        vetted = await self._vet(job_id, url)
        if isinstance(vetted, Attempt):
            return vetted
        target, address = vetted
        slot = (str(effective(address)), target.port or 0)
        self._remember(target, slot)
        if self._addresses[slot] >= self._max_per_address:
            return None
        self._addresses[slot] += 1
        try:
            body = body_of(replace(record, callback=replace(record.callback, attempts=attempts)))
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(secret, int(time.time()), body),
                JOB_ID_HEADER: job_id,
                ATTEMPT_HEADER: str(attempts),
            }
            return await self._send(Target.pinned(target, address), body, headers)
        finally:
            release(self._addresses, slot)

    async def _vet(self, job_id: str, url: str) -> tuple[URL, IPAddress] | Attempt:
        """The URL and the address its POST may go to; or the failed try, when there is none."""
        try:
            target = URL(url)
        except ValueError:
            return Attempt(False, INVALID_URL, final=True)
        if target.scheme not in ("http", "https") or not target.raw_host or target.port is None:
            return Attempt(False, INVALID_URL, final=True)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                address = await vetted_address(target.raw_host, target.port, self._policy, self._resolver)
        except AddressRefusedError:
            # The operator's log may say where; the tenant's record says only that it was refused.
            log.info("job %s: callback host %s has no address callbacks may reach", job_id, target.host)
            return Attempt(False, REFUSED, final=True)
        except TimeoutError:
            return Attempt(False, TIMED_OUT)
        except OSError:  # the name does not resolve
            return Attempt(False, CONNECTION_FAILED)
        return target, address

    async def _send(self, target: Target, body: bytes, headers: Mapping[str, str]) -> Attempt:
        assert self._session is not None, "start() the sender first"
        headers = {**headers, "Host": target.host_header}
        try:
            async with self._session.post(
                target.url, data=body, headers=headers, allow_redirects=False,
                server_hostname=target.server_hostname,
            ) as reply:  # fmt: skip
                if 200 <= reply.status < 300:
                    return Attempt(True)
                redirect = " (redirects are not followed)" if 300 <= reply.status < 400 else ""
                return Attempt(False, f"HTTP {reply.status}{redirect}")
        except TimeoutError:  # connecting or answering (aiohttp's timeouts are TimeoutErrors too)
            return Attempt(False, TIMED_OUT)
        except (aiohttp.ClientError, OSError, ValueError):
            return Attempt(False, CONNECTION_FAILED)
