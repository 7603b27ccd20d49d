"""A file's record (contract/batches.py) beside its bytes in the file store: written in the one order that
never lists a file whose bytes are missing, and indexed per tenant for `GET /v1/files`. The Files and
Uploads routes and the Batch API's runner (its output files) all save files through here."""

from __future__ import annotations

import time
from dataclasses import replace

from contract.batches import FileRecord
from contract.keys import file_key, tenant_files_key
from contract.redis_client import SyncRedis
from openai_api.file_store import FileStore


def save_file(
    client: SyncRedis, store: FileStore, record: FileRecord, data: bytes, retention_days: int
) -> FileRecord:
    """The bytes first, then the record: a record never points at a file not written. The record as
    saved (with its `expires_at`)."""
    store.put(record.tenant, record.id, data)
    return save_record(client, record, retention_days)


def save_record(client: SyncRedis, record: FileRecord, retention_days: int) -> FileRecord:
    """Lists a file whose bytes are already in the store. The record lives `retention_days` (its
    `expires_at`), as the bytes do under the bucket's lifecycle rule, which S3 rounds up to the next
    midnight: the record always goes first. The tenant's index drops what is older at the same time,
    so it never outgrows the files a tenant has. The record as saved."""
    kept_s = retention_days * SECONDS_PER_DAY
    saved = replace(record, expires_at=record.created_at + kept_s)
    index = tenant_files_key(record.tenant)
    score = listing_score()
    pipe = client.pipeline(transaction=True)
    pipe.hset(file_key(record.id), mapping=saved.hash_fields())
    pipe.expireat(file_key(record.id), kept_s + record.created_at)
    pipe.zadd(index, {record.id: score})
    pipe.zremrangebyscore(index, "-inf", score - kept_s * 1_000_000)
    pipe.expire(index, kept_s)
    pipe.execute()
    return saved


SECONDS_PER_DAY = 86_400


def listing_score() -> int:
    """An index's score: the time in microseconds, so that records made within a second list in order."""
    return time.time_ns() // 1000
