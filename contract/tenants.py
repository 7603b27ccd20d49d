"""Tenants and their API keys on the local stack: the keys file that `synapse keys` manages.

One JSON file under the state directory (`.synapse/keys.json`, mode 0600) lists each tenant (its
webhook secret and quotas) and each API key (its tenant and a SHA-256 of its value: the value itself is
printed once, when the key is created, and never stored). The local gateway resolves keys from it as
API Gateway does from its API keys in AWS; the manager reads the webhook secrets from it to sign
callbacks. In AWS, tenants are API Gateway keys and usage plans (docs/api.md: Tenants and keys).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KEYS_FILE = "keys.json"
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
KEY_PREFIX = "sk-"
WEBHOOK_SECRET_PREFIX = "whsec_"
LIMITS = ("max_inflight", "rate_per_s", "burst")


def keys_file(state_dir: Path) -> Path:
    return state_dir / KEYS_FILE


def key_digest(key: str) -> str:
    # Header bytes that are not UTF-8 reach the gateway surrogate-escaped; they hash, and match nothing.
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant: who signs its callbacks, and its quotas (0: no limit)."""

    name: str
    webhook_secret: str
    max_inflight: int = 0
    rate_per_s: float = 0.0
    burst: int = 0


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    tenant: str
    sha256: str
    created_ms: int
    revoked: bool = False


@dataclass
class KeyBook:
    tenants: dict[str, Tenant] = field(default_factory=dict)
    keys: list[KeyRecord] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> KeyBook:
        """The book in `path`; an empty one when the file does not exist yet."""
        if not path.exists():
            return cls()
        document: dict[str, Any] = json.loads(path.read_text())
        return cls(
            tenants={
                name: Tenant(name=name, **fields) for name, fields in document.get("tenants", {}).items()
            },
            keys=[KeyRecord(**record) for record in document.get("keys", [])],
        )

    @classmethod
    @contextmanager
    def editing(cls, path: Path) -> Iterator[KeyBook]:
        """The book in `path`, saved when the block ends without an error. An exclusive lock on a file
        beside it spans the load and the save: two `synapse keys` commands, or one and a gateway
        starting, never lose each other's changes."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            book = cls.load(path)
            yield book
            book.save(path)
        finally:
            os.close(lock)  # closing releases the lock

    def save(self, path: Path) -> None:
        """Written whole to a temporary file and renamed: a reader never sees half a book."""
        document = {
            "tenants": {name: _without_name(asdict(t)) for name, t in self.tenants.items()},
            "keys": [asdict(k) for k in self.keys],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(path)

    def tenant(self, name: str, **limits: Any) -> Tenant:
        """The named tenant, created (with a fresh webhook secret) if new; limits given replace its own."""
        if not TENANT_NAME.fullmatch(name):  # `$` alone would let a newline end it
            raise ValueError(f"tenant {name!r}: use 1 to 63 lowercase letters, digits and dashes")
        given = {k: v for k, v in limits.items() if v is not None}
        if unknown := set(given) - set(LIMITS):
            raise ValueError(f"unknown limits {sorted(unknown)}; a tenant has {', '.join(LIMITS)}")
        if negative := [k for k, v in given.items() if v < 0]:
            raise ValueError(f"limits must be 0 (no limit) or more: {', '.join(negative)}")
        current = self.tenants.get(name) or Tenant(name, WEBHOOK_SECRET_PREFIX + secrets.token_urlsafe(24))
        updated = replace(current, **given)
        self.tenants[name] = updated
        return updated

    def add_key(self, tenant: str, key: str | None = None) -> tuple[str, KeyRecord]:
        """Adds a key for the tenant (a fresh one unless given); returns its value and its record."""
        self.tenant(tenant)
        value = key or KEY_PREFIX + secrets.token_urlsafe(24)
        record = KeyRecord(
            id="key_" + secrets.token_hex(4),
            tenant=tenant,
            sha256=key_digest(value),
            created_ms=int(time.time() * 1000),
        )
        self.keys.append(record)
        return value, record

    def ensure_key(self, key: str, tenant: str) -> None:
        """The key belongs to the tenant (the local stack's banner key to the first tenant's), unless the
        book knows it already: a revoked key is never brought back, nor moved to another tenant."""
        if not any(record.sha256 == key_digest(key) for record in self.keys):
            self.add_key(tenant, key)

    def revoke(self, key_id: str) -> KeyRecord:
        for i, record in enumerate(self.keys):
            if record.id == key_id:
                self.keys[i] = replace(record, revoked=True)
                return self.keys[i]
        raise KeyError(f"no key {key_id!r}; `synapse keys list` shows them")

    def active_keys(self) -> list[KeyRecord]:
        return [record for record in self.keys if not record.revoked]

    def is_revoked(self, key: str) -> bool:
        """The key was in the book and every record of it is revoked (an unknown key is not revoked)."""
        records = [record for record in self.keys if record.sha256 == key_digest(key)]
        return bool(records) and all(record.revoked for record in records)

    def resolve(self, key: str) -> Tenant | None:
        """The tenant of a presented key, or None for an unknown or revoked one. Every record is
        compared, in constant time each, so the time taken says nothing about which one matched."""
        digest = key_digest(key)
        found: Tenant | None = None
        for record in self.keys:
            if hmac.compare_digest(record.sha256, digest) and not record.revoked:
                found = self.tenants.get(record.tenant)
        return found


class WatchedKeyBook:
    """The book in a file, read again when the file changes, so that `synapse keys` takes effect without
    a restart. The file is looked at (one stat) at most once per `interval_s`; time comes in as an
    argument. A file that cannot be read (edited by hand into broken JSON) leaves the last good book."""

    def __init__(self, path: Path, interval_s: float = 1.0) -> None:
        self.path = path
        self.interval_s = interval_s
        self._book = KeyBook()
        self._seen: tuple[int, int, int] | None = None
        self._checked: float | None = None

    def book(self, now: float) -> KeyBook:
        if self._checked is not None and now - self._checked < self.interval_s:
            return self._book
        self._checked = now
        try:
            stat = self.path.stat()
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = None
        if seen != self._seen:
            self._seen = seen
            try:
                self._book = KeyBook.load(self.path)
            except (OSError, ValueError, TypeError) as exc:
                log.error("%s: cannot read it, keeping the keys read before: %s", self.path, exc)
        return self._book


def _without_name(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k != "name"}
