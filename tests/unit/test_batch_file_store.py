"""The Files API's store: the local folder and S3 (on moto) keep the same contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from contract.settings import Settings
from frontdoor.file_store import FileStore, LocalFileStore, S3FileStore, file_store_for
from tests.moto_aws import moto_aws

BUCKET = "synapse-files"


@pytest.fixture(params=["local", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
        return
    with moto_aws(monkeypatch):
        client: Any = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield S3FileStore(client, BUCKET, "files/")


def test_a_file_reads_back_as_written_and_is_gone_once_deleted(store: FileStore):
    data = b'{"custom_id":"a"}\n' * 1000
    store.put("acme", "file-1", data)
    assert store.get("acme", "file-1") == data
    store.delete("acme", "file-1")
    assert store.get("acme", "file-1") is None
    store.delete("acme", "file-1")  # deleting twice is no error: a retried DELETE succeeds


def test_tenants_files_are_apart_even_with_the_same_id(store: FileStore):
    store.put("acme", "file-1", b"acme's")
    store.put("globex", "file-1", b"globex's")
    assert store.get("acme", "file-1") == b"acme's"
    assert store.get("globex", "file-1") == b"globex's"
    assert store.get("initech", "file-1") is None


def test_a_tenant_name_cannot_climb_out_of_its_prefix(store: FileStore):
    store.put("../acme", "file-1", b"x")
    assert store.get("acme", "file-1") is None
    assert store.get("../acme", "file-1") == b"x"


def test_a_rewrite_replaces_the_file_whole(store: FileStore):
    store.put("acme", "file-out", b"first version, longer")
    store.put("acme", "file-out", b"second")
    assert store.get("acme", "file-out") == b"second"


def test_s3_keys_carry_the_prefix_and_the_tenant(monkeypatch: pytest.MonkeyPatch):
    with moto_aws(monkeypatch):
        client: Any = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        S3FileStore(client, BUCKET, "files/").put("acme", "file-1", b"x")
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["files/acme/file-1"]


def test_the_local_stack_keeps_files_under_its_state_folder(tmp_path: Path):
    store = file_store_for(Settings(state_dir=tmp_path))
    store.put("acme", "file-1", b"x")
    assert (tmp_path / "files" / "acme" / "file-1").read_bytes() == b"x"
