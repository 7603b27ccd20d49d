"""Where the Files API keeps file contents: one small interface, a folder for the local stack and S3 in AWS.

Keys are `<tenant>/<file id>`: a tenant's files share a prefix (S3 grants and lifecycle rules can name
it). The records that say whose a file is live in Redis (contract/batches.py); the store only holds bytes.
The front door writes uploads, the manager reads batch inputs and writes outputs: both build theirs with
`file_store_for`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from contract.settings import Settings


class FileStore(Protocol):
    def put(self, tenant: str, file_id: str, data: bytes) -> None: ...

    def get(self, tenant: str, file_id: str) -> bytes | None:
        """The file's bytes, or None when it is not there."""
        ...

    def delete(self, tenant: str, file_id: str) -> None:
        """Removes the file; removing one not there is no error."""
        ...


def object_key(tenant: str, file_id: str) -> str:
    """A tenant's name may hold any character a keys file allows: quoted, it is one path segment."""
    return f"{quote(tenant, safe='')}/{quote(file_id, safe='')}"


class LocalFileStore:
    """Files in a folder (the local stack's `<state_dir>/files`)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def _path(self, tenant: str, file_id: str) -> Path:
        return self._root / object_key(tenant, file_id)

    def put(self, tenant: str, file_id: str, data: bytes) -> None:
        """Written to a temporary file and renamed: a reader never sees half a file."""
        path = self._path(tenant, file_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)

    def get(self, tenant: str, file_id: str) -> bytes | None:
        try:
            return self._path(tenant, file_id).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, tenant: str, file_id: str) -> None:
        self._path(tenant, file_id).unlink(missing_ok=True)


class S3FileStore:
    """Files as objects of one bucket, under a prefix."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self._s3 = client
        self._bucket = bucket
        self._prefix = prefix

    def _key(self, tenant: str, file_id: str) -> str:
        return self._prefix + object_key(tenant, file_id)

    def put(self, tenant: str, file_id: str, data: bytes) -> None:
        self._s3.put_object(Bucket=self._bucket, Key=self._key(tenant, file_id), Body=data)

    def get(self, tenant: str, file_id: str) -> bytes | None:
        try:
            found = self._s3.get_object(Bucket=self._bucket, Key=self._key(tenant, file_id))
        except self._s3.exceptions.NoSuchKey:
            return None
        body: bytes = found["Body"].read()
        return body

    def delete(self, tenant: str, file_id: str) -> None:
        # DeleteObject of a key that is not there succeeds (S3 answers 204 either way).
        self._s3.delete_object(Bucket=self._bucket, Key=self._key(tenant, file_id))


def file_store_for(cfg: Settings) -> FileStore:
    if cfg.file_bucket:
        import boto3  # only where files are on S3: the local stack never loads it

        return S3FileStore(boto3.client("s3"), cfg.file_bucket, cfg.file_prefix)
    return LocalFileStore(cfg.state_dir / "files")
