"""Where the Files API keeps file contents: one small interface, a folder for the local stack and S3 in AWS.

Keys are `<tenant>/<file id>`: a tenant's files share a prefix (S3 grants and lifecycle rules can name
it). The records that say whose a file is live in Redis (contract/batches.py); the store only holds bytes.
The front door writes uploads, the manager reads batch inputs and writes outputs: both build theirs with
`file_store_for`.

A batch input may be 200 MB while the front door has 512 MB and the manager 1 GB, so a large file is never
held whole: `write` takes it as chunks and `read_range` hands back a window of it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from contract.settings import Settings

log = logging.getLogger(__name__)

# S3 multipart parts, but the last, are at least 5 MiB
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html); an upload's parts are 4,000,000
# bytes (frontdoor/uploads_routes.py), so `write` gathers chunks into S3 parts of this size.
S3_PART_BYTES = 8 * 1024 * 1024
READ_CHUNK_BYTES = 4 * 1024 * 1024  # what `chunks_of` reads at a time: 50 ranged GETs for 200 MB


class FileStore(Protocol):
    def put(self, tenant: str, file_id: str, data: bytes) -> None: ...

    def write(self, tenant: str, file_id: str, chunks: Iterable[bytes]) -> int:
        """Writes the file from its chunks in order, holding about one S3 part at a time; its size. A
        reader sees the old file or the whole new one, never part of it."""
        ...

    def size(self, tenant: str, file_id: str) -> int | None:
        """The file's size in bytes, or None when it is not there."""
        ...

    def read_range(self, tenant: str, file_id: str, start: int, length: int) -> bytes | None:
        """Up to `length` bytes from `start` (fewer at the end, none past it); None when not there."""
        ...

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
        self.write(tenant, file_id, [data])

    def write(self, tenant: str, file_id: str, chunks: Iterable[bytes]) -> int:
        """Written to a temporary file and renamed: a reader never sees half a file."""
        path = self._path(tenant, file_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        written = 0
        try:
            with os.fdopen(handle, "wb") as out:
                for chunk in chunks:
                    written += out.write(chunk)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return written

    def get(self, tenant: str, file_id: str) -> bytes | None:
        try:
            return self._path(tenant, file_id).read_bytes()
        except FileNotFoundError:
            return None

    def size(self, tenant: str, file_id: str) -> int | None:
        try:
            return self._path(tenant, file_id).stat().st_size
        except FileNotFoundError:
            return None

    def read_range(self, tenant: str, file_id: str, start: int, length: int) -> bytes | None:
        try:
            with self._path(tenant, file_id).open("rb") as found:
                found.seek(start)
                return found.read(length)
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

    def write(self, tenant: str, file_id: str, chunks: Iterable[bytes]) -> int:
        """One PutObject for a file under S3_PART_BYTES; a larger one is a multipart upload of parts of
        S3_PART_BYTES, in order, aborted if anything fails (the object appears only once completed)."""
        key = self._key(tenant, file_id)
        pending: list[bytes] = []
        held = written = 0
        upload_id: str | None = None
        parts: list[dict[str, Any]] = []
        try:
            for chunk in chunks:
                pending.append(chunk)
                held += len(chunk)
                written += len(chunk)
                if held < S3_PART_BYTES:
                    continue
                if upload_id is None:
                    upload_id = self._s3.create_multipart_upload(Bucket=self._bucket, Key=key)["UploadId"]
                parts.append(self._upload_part(key, upload_id, len(parts) + 1, pending))
                pending, held = [], 0
            if upload_id is None:
                self.put(tenant, file_id, b"".join(pending))
                return written
            if pending:
                parts.append(self._upload_part(key, upload_id, len(parts) + 1, pending))
            self._s3.complete_multipart_upload(
                Bucket=self._bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            if upload_id is not None:
                self._abort(key, upload_id)
            raise
        return written

    def _abort(self, key: str, upload_id: str) -> None:
        """Best effort: the write's own failure is what the caller must see. Aborting needs its own grant,
        s3:AbortMultipartUpload (https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html,
        "Multipart upload and permissions"); the bucket's lifecycle rule aborts what is left after a day."""
        try:
            self._s3.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
        except Exception:
            log.warning(
                "could not abort the multipart upload of %s; the lifecycle rule will", key, exc_info=True
            )

    def _upload_part(self, key: str, upload_id: str, number: int, pending: list[bytes]) -> dict[str, Any]:
        answer = self._s3.upload_part(
            Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=b"".join(pending)
        )
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def get(self, tenant: str, file_id: str) -> bytes | None:
        try:
            found = self._s3.get_object(Bucket=self._bucket, Key=self._key(tenant, file_id))
        except self._s3.exceptions.NoSuchKey:
            return None
        body: bytes = found["Body"].read()
        return body

    def size(self, tenant: str, file_id: str) -> int | None:
        try:
            found = self._s3.head_object(Bucket=self._bucket, Key=self._key(tenant, file_id))
        except self._s3.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return int(found["ContentLength"])

    def read_range(self, tenant: str, file_id: str, start: int, length: int) -> bytes | None:
        """A ranged GET; a range past the end is refused by S3 (416 InvalidRange), which is no bytes."""
        if length <= 0:
            return b"" if self.size(tenant, file_id) is not None else None
        try:
            found = self._s3.get_object(
                Bucket=self._bucket,
                Key=self._key(tenant, file_id),
                Range=f"bytes={start}-{start + length - 1}",
            )
        except self._s3.exceptions.NoSuchKey:
            return None
        except self._s3.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] == "InvalidRange":
                return b""
            raise
        body: bytes = found["Body"].read()
        return body

    def delete(self, tenant: str, file_id: str) -> None:
        # DeleteObject of a key that is not there succeeds (S3 answers 204 either way).
        self._s3.delete_object(Bucket=self._bucket, Key=self._key(tenant, file_id))


def chunks_of(store: FileStore, tenant: str, file_id: str, size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
    """The file's bytes in order, `size` at a time (none when it is not there)."""
    start = 0
    while True:
        chunk = store.read_range(tenant, file_id, start, size)
        if not chunk:
            return
        yield chunk
        start += len(chunk)


def file_store_for(cfg: Settings) -> FileStore:
    if cfg.file_bucket:
        import boto3  # only where files are on S3: the local stack never loads it

        return S3FileStore(boto3.client("s3"), cfg.file_bucket, cfg.file_prefix)
    return LocalFileStore(cfg.state_dir / "files")
