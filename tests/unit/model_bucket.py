"""The model store's bucket under moto, for the tests of what workers sync from S3."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.moto_aws import moto_aws

BUCKET = "synapse-models"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An S3 client on moto with the empty model bucket; no real endpoint or credentials reach it."""
    with moto_aws(monkeypatch):
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client
