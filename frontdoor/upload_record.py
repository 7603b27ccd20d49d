"""An Uploads API upload's record (`upload:{id}`): a file sent in parts, pending until completed or
cancelled. Read and written here only; its parts' sizes live beside it (`upload:{id}:parts`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

UploadStatus = Literal["pending", "completed", "cancelled"]
STATUSES: tuple[UploadStatus, ...] = ("pending", "completed", "cancelled")
# An upload takes parts for an hour after it is created (OpenAI's limit), then expires.
UPLOAD_LIFETIME_S = 3600


@dataclass(frozen=True, slots=True)
class UploadRecord:
    id: str
    tenant: str
    filename: str
    purpose: str
    size: int  # the bytes the upload declared: its parts must add up to this
    status: UploadStatus
    created_at: int

    @property
    def expires_at(self) -> int:
        return self.created_at + UPLOAD_LIFETIME_S

    def hash_fields(self) -> dict[str, str]:
        return {
            "id": self.id, "tenant": self.tenant, "filename": self.filename, "purpose": self.purpose,
            "bytes": str(self.size), "status": self.status, "created_at": str(self.created_at),
        }  # fmt: skip

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> UploadRecord:
        status = next((s for s in STATUSES if s == fields["status"]), None)
        if status is None:
            raise ValueError(f"upload {fields['id']} has no status of an upload: {fields['status']!r}")
        return cls(
            id=fields["id"], tenant=fields["tenant"], filename=fields["filename"], purpose=fields["purpose"],
            size=int(fields["bytes"]), status=status, created_at=int(fields["created_at"]),
        )  # fmt: skip

    def object(self, file: dict[str, Any] | None = None) -> dict[str, Any]:
        """OpenAI's Upload object; `file`: the File object a completed upload made."""
        return {
            "id": self.id,
            "object": "upload",
            "bytes": self.size,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": self.status,
            "file": file,
        }


def upload_record_of(fields: Mapping[str, str]) -> UploadRecord | None:
    """The record an `upload:{id}` hash holds; None when it is gone."""
    return UploadRecord.of(fields) if fields.get("id") else None
