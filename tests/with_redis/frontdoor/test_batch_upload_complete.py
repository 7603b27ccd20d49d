"""Completing an upload streams its parts into the file and checks them on the way: parts that are not
UTF-8 or not the md5 given are refused with 400 naming the field, and no file is left behind."""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from contract.keys import upload_key
from contract.redis_client import SyncRedis
from frontdoor import uploads_routes
from frontdoor.uploads_routes import UPLOAD_PART_BYTES, CompleteRequest, add_part, complete
from openai_api.file_store import FileStore, S3FileStore
from tests.moto_aws import moto_aws
from tests.with_redis.manager.test_batch_memory import TENANT, client, files, part_event

__all__ = ["client", "files"]  # the fixtures this module shares


def upload_of(client: SyncRedis, parts: list[bytes]) -> tuple[str, list[str]]:
    upload_id = f"upload_{uuid.uuid4().hex}"
    client.hset(upload_key(upload_id), mapping={
        "id": upload_id, "tenant": TENANT, "filename": "in.jsonl", "purpose": "batch",
        "bytes": str(sum(map(len, parts))), "status": "pending", "created_at": str(int(time.time())),
    })  # fmt: skip
    ids = []
    for part in parts:
        added = add_part(upload_id, TENANT, part_event(part))
        assert isinstance(added, dict), added
        ids.append(added["id"])
    return upload_id, ids


@pytest.fixture(autouse=True)
def front_door(client: SyncRedis, files: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads_routes, "files", lambda: files)
    monkeypatch.setattr(uploads_routes, "redis_client", lambda: client)


def test_parts_join_in_the_order_the_client_gives(client: SyncRedis, files: FileStore):
    upload_id, (first, second) = upload_of(client, [b'{"a": "\xc3', b'\xa9"}\n'])  # a character split in two
    md5 = hashlib.md5(b'{"a": "\xc3\xa9"}\n', usedforsecurity=False).hexdigest()
    done = complete(upload_id, TENANT, CompleteRequest(part_ids=[first, second], md5=md5))
    assert isinstance(done, dict), done
    assert files.get(TENANT, done["file"]["id"]) == b'{"a": "\xc3\xa9"}\n'


@pytest.mark.parametrize(
    ("parts", "md5", "code"),
    [
        ([b'{"a": 1}\n', b"\xff\n"], None, "invalid_file"),
        ([b'{"a": "\xc3'], None, "invalid_file"),  # ends inside a character
        ([b'{"a": 1}\n'], "0" * 32, "md5_mismatch"),
    ],
)
def test_parts_that_fail_a_check_are_refused_and_leave_no_file(
    client: SyncRedis, tmp_path: Path, parts: list[bytes], md5: str | None, code: str
):
    upload_id, ids = upload_of(client, parts)
    refused = complete(upload_id, TENANT, CompleteRequest(part_ids=ids, md5=md5))
    assert not isinstance(refused, dict)
    assert (refused.status, refused.code) == (400, code)
    assert client.hget(upload_key(upload_id), "status") == "pending", "the client may complete it again"
    left = {p.name for p in (tmp_path / "files" / TENANT).iterdir()}  # the `files` fixture's folder
    assert left == {f"{upload_id}.{part_id}" for part_id in ids}, "only the parts, no file and no temporary"


def test_on_s3_the_parts_become_one_object_in_the_order_given(
    client: SyncRedis, monkeypatch: pytest.MonkeyPatch
):
    with moto_aws(monkeypatch):
        s3: Any = boto3.client("s3")
        s3.create_bucket(Bucket="synapse-files")
        store = S3FileStore(s3, "synapse-files", "files/")
        monkeypatch.setattr(uploads_routes, "files", lambda: store)
        parts = [
            bytes([48 + i]) * UPLOAD_PART_BYTES for i in range(3)
        ]  # 12 MB: two S3 parts of 5 MiB or more
        upload_id, ids = upload_of(client, parts)
        done = complete(upload_id, TENANT, CompleteRequest(part_ids=ids[::-1]))
        assert isinstance(done, dict), done
        assert store.get(TENANT, done["file"]["id"]) == b"".join(parts[::-1])
        assert s3.list_multipart_uploads(Bucket="synapse-files").get("Uploads", []) == []
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="synapse-files")["Contents"]}
    assert keys == {f"files/{TENANT}/{done['file']['id']}"}, "the parts are discarded once the file is whole"
