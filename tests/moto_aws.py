"""AWS on moto for tests: fake credentials and region, no endpoint override, nothing reaches AWS."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from moto import mock_aws


@contextmanager
def moto_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        yield
