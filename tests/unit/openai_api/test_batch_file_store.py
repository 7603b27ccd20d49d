"""The Files API's store: the local folder and S3 (on moto) keep the same contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from contract.settings import Settings
from openai_api.file_store import (
    S3_PART_BYTES,
    FileStore,
    LocalFileStore,
    S3FileStore,
    chunks_of,
    file_store_for,
)
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


def test_a_file_written_in_chunks_reads_back_whole_and_by_range(store: FileStore):
    chunks = [bytes([65 + i % 26]) * 3_000_000 for i in range(4)]  # 12 MB: more than one S3 part
    assert store.write("acme", "big", iter(chunks)) == 12_000_000
    data = b"".join(chunks)
    assert store.size("acme", "big") == len(data)
    assert store.read_range("acme", "big", 2_999_998, 4) == data[2_999_998:3_000_002]
    assert store.read_range("acme", "big", len(data) - 3, 100) == data[-3:], "the end is short, not refused"
    assert store.read_range("acme", "big", len(data), 100) == b""
    assert b"".join(chunks_of(store, "acme", "big", size=5_000_000)) == data


def test_a_small_file_written_in_chunks_and_one_missing(store: FileStore):
    assert store.write("acme", "small", [b"ab", b"", b"c"]) == 3
    assert store.get("acme", "small") == b"abc"
    assert store.size("acme", "missing") is None
    assert store.read_range("acme", "missing", 0, 10) is None
    assert list(chunks_of(store, "acme", "missing")) == []


class BrokenStreamError(Exception):
    """The chunks' source failed midway."""

    pass


def failing_after(chunks: list[bytes]) -> Iterator[bytes]:
    yield from chunks
    raise BrokenStreamError


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_debris(store: FileStore):
    store.put("acme", "file-1", b"old")
    with pytest.raises(BrokenStreamError):
        store.write("acme", "file-1", failing_after([b"x" * 6_000_000, b"y" * 6_000_000]))
    assert store.get("acme", "file-1") == b"old"
    with pytest.raises(BrokenStreamError):
        store.write("acme", "file-2", failing_after([b"x" * 6_000_000, b"y" * 6_000_000]))
    assert store.size("acme", "file-2") is None


def test_s3_writes_a_large_file_as_parts_s3_accepts_and_aborts_a_failed_one(monkeypatch: pytest.MonkeyPatch):
    with moto_aws(monkeypatch):
        client: Any = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        sent: list[int] = []
        client.meta.events.register(
            "provide-client-params.s3.UploadPart", lambda params, **_: sent.append(len(params["Body"]))
        )
        store = S3FileStore(client, BUCKET, "files/")
        store.write("acme", "big", (b"z" * 4_000_000 for _ in range(5)))  # an upload's parts: 4,000,000 each
        big = list(sent)
        with pytest.raises(BrokenStreamError):
            store.write("acme", "lost", failing_after([b"x" * 9_000_000, b"y"]))
        left = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        assert store.get("acme", "big") == b"z" * 20_000_000
    assert len(big) > 1 and all(size >= 5 * 1024 * 1024 for size in big[:-1]), "S3's 5 MiB minimum part"
    assert sum(big) == 20_000_000
    assert max(big) <= S3_PART_BYTES + 4_000_000, "no part holds much more than a part's worth"
    assert left == [], "the failed write's multipart upload was aborted"
