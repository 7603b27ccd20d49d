"""Webhook secrets: from the local keys file (re-read when it changes) and from Secrets Manager (moto)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from contract.settings import Settings
from contract.tenants import KeyBook, keys_file
from manager.webhook_secrets import (
    KeysFileSecrets,
    SecretsManagerSecrets,
    SecretsUnavailableError,
    secrets_for,
)
from tests.moto_aws import moto_aws


async def test_the_keys_file_gives_each_tenant_its_own_secret(tmp_path: Path):
    book = KeyBook()
    acme, globex = book.tenant("acme"), book.tenant("globex")
    book.save(keys_file(tmp_path))
    secrets = secrets_for(Settings(state_dir=tmp_path))

    assert isinstance(secrets, KeysFileSecrets)
    assert await secrets.secret("acme") == acme.webhook_secret
    assert await secrets.secret("globex") == globex.webhook_secret
    assert acme.webhook_secret != globex.webhook_secret
    assert await secrets.secret("initech") is None


async def test_a_tenant_added_to_the_keys_file_later_is_seen(tmp_path: Path):
    path = keys_file(tmp_path)
    secrets = KeysFileSecrets(path)
    assert await secrets.secret("acme") is None  # no file yet

    book = KeyBook()
    book.tenant("default")
    book.save(path)
    assert await secrets.secret("acme") is None

    book.tenant("acme")
    book.save(path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # a coarse clock
    assert await secrets.secret("acme") == book.tenants["acme"].webhook_secret


async def test_a_keys_file_that_is_not_json_is_unavailable_not_a_missing_secret(tmp_path: Path):
    path = keys_file(tmp_path)
    path.write_text("{ half written")
    with pytest.raises(SecretsUnavailableError):
        await KeysFileSecrets(path).secret("default")


@pytest.fixture
def secretsmanager(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_aws(monkeypatch):
        yield boto3.client("secretsmanager")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_secrets_manager_holds_a_map_of_tenants_re_read_once_a_minute(secretsmanager: Any):
    arn = secretsmanager.create_secret(Name="synapse/webhooks", SecretString=json.dumps({"acme": "whsec_1"}))[
        "ARN"
    ]
    clock = Clock()
    secrets = SecretsManagerSecrets(arn, secretsmanager, clock=clock)
    assert await secrets.secret("acme") == "whsec_1"
    assert await secrets.secret("globex") is None

    secretsmanager.put_secret_value(SecretId=arn, SecretString=json.dumps({"acme": "whsec_2", "globex": "g"}))
    clock.now = 59.0
    assert await secrets.secret("acme") == "whsec_1"  # cached
    clock.now = 60.0
    assert await secrets.secret("acme") == "whsec_2"
    assert await secrets.secret("globex") == "g"


async def test_secrets_manager_settings_choose_it(secretsmanager: Any, tmp_path: Path):
    arn = secretsmanager.create_secret(Name="synapse/webhooks", SecretString='{"acme": "whsec_1"}')["ARN"]
    secrets = secrets_for(Settings(webhook_secrets_arn=arn, state_dir=tmp_path))
    assert isinstance(secrets, SecretsManagerSecrets)
    assert await secrets.secret("acme") == "whsec_1"


async def test_an_unreadable_secret_is_unavailable_until_read_then_the_last_one_read_is_kept(
    secretsmanager: Any,
):
    clock = Clock()
    missing = SecretsManagerSecrets(
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope", secretsmanager
    )
    with pytest.raises(SecretsUnavailableError):
        await missing.secret("acme")

    arn = secretsmanager.create_secret(Name="synapse/webhooks", SecretString='{"acme": "whsec_1"}')["ARN"]
    secrets = SecretsManagerSecrets(arn, secretsmanager, clock=clock)
    assert await secrets.secret("acme") == "whsec_1"
    secretsmanager.put_secret_value(SecretId=arn, SecretString="not json")
    clock.now = 120.0
    assert await secrets.secret("acme") == "whsec_1"
