"""The checksum manifest of a model folder: what a complete, untampered copy of the model contains.

A published model carries `manifest.json` beside its `config.pbtxt`: every file's relative path, its
sha256 and size, and a version that is the digest of that list. A worker verifies each download
against it before the model enters its disk cache, so a corrupt or partial copy never reaches Triton.

Errors (every one a `ModelStoreError`):
  ModelStoreError
   ├── ModelNotFoundError      the store has no such model (no manifest under its name)
   ├── SourceUnavailableError  the store could not be read (network, permissions, disk)
   ├── ManifestError           a manifest is malformed, or names a path outside the model folder
   └── ChecksumMismatchError   a downloaded file differs from its manifest entry
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST_NAME = "manifest.json"
SCHEMA = 1
CHUNK_BYTES = 1 << 20
# Names become directory names and Redis payloads: no separators, no leading dot, no "..".
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SKIPPED_DIRS = frozenset({"__pycache__"})


class ModelStoreError(Exception):
    """Base of every model store error."""


class ModelNotFoundError(ModelStoreError):
    """The store has no model of this name."""


class SourceUnavailableError(ModelStoreError):
    """The store could not be read; a cached copy may still serve."""


class ManifestError(ModelStoreError):
    """A manifest that cannot be trusted: malformed, inconsistent, or naming unsafe paths."""


class ChecksumMismatchError(ModelStoreError):
    """A file's content is not what the manifest promised; the download is discarded."""


def is_model_name(model: str) -> bool:
    return MODEL_NAME.fullmatch(model) is not None and ".." not in model


def check_model_name(model: str) -> str:
    if not is_model_name(model):
        raise ModelNotFoundError(f"{model!r} is not a valid model name")
    return model


def safe_relative_path(text: str) -> str:
    """A manifest path as a relative POSIX path that cannot leave the model folder."""
    path = PurePosixPath(text)
    if not text or path.is_absolute() or ".." in path.parts or "\\" in text or str(path) != text:
        raise ManifestError(f"unsafe path in manifest: {text!r}")
    return text


@dataclass(frozen=True, slots=True)
class FileEntry:
    sha256: str
    size: int


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Manifest:
    """A model's files by relative path; `version` identifies the content, whatever the upload time."""

    model: str
    files: Mapping[str, FileEntry]

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.files):
            entry = self.files[path]
            digest.update(f"{path}\0{entry.sha256}\0{entry.size}\n".encode())
        return digest.hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())

    def to_json(self) -> str:
        files = {p: {"sha256": e.sha256, "size": e.size} for p, e in sorted(self.files.items())}
        body = {"schema": SCHEMA, "model": self.model, "version": self.version, "files": files}
        return json.dumps(body, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, model: str) -> Manifest:
        """Parses and checks a manifest: schema, model name, safe paths, and a version that matches."""
        try:
            body: Any = json.loads(text)
            files = {
                safe_relative_path(path): FileEntry(str(entry["sha256"]), int(entry["size"]))
                for path, entry in body["files"].items()
            }
            schema, named, version = body["schema"], body["model"], body["version"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"{model}: malformed manifest ({type(exc).__name__}: {exc})") from exc
        if schema != SCHEMA or named != model:
            raise ManifestError(f"{model}: manifest has schema {schema!r} for model {named!r}")
        if MANIFEST_NAME in files or "config.pbtxt" not in files:
            raise ManifestError(f"{model}: a manifest must list config.pbtxt and not itself")
        manifest = cls(model, files)
        if manifest.version != version:
            raise ManifestError(f"{model}: manifest version {version} does not match its file list")
        return manifest

    @classmethod
    def of_directory(cls, model: str, root: Path) -> Manifest:
        """Hashes every file of a model folder (symlinks followed; caches and the manifest left out)."""
        files: dict[str, FileEntry] = {}
        for folder, dirs, names in os.walk(root, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for name in names:
                path = Path(folder) / name
                relative = path.relative_to(root).as_posix()
                if relative == MANIFEST_NAME or name.endswith(".pyc"):
                    continue
                files[relative] = FileEntry(file_sha256(path), path.stat().st_size)
        if "config.pbtxt" not in files:
            raise ModelNotFoundError(f"{model}: {root} has no config.pbtxt")
        return cls(check_model_name(model), files)


def verify(manifest: Manifest, root: Path) -> None:
    """Checks every file under root against the manifest; raises naming the first file that differs."""
    for relative, expected in sorted(manifest.files.items()):
        path = root / relative
        if not path.is_file():
            raise ChecksumMismatchError(f"{manifest.model}: {relative} is missing from the download")
        size = path.stat().st_size
        digest = file_sha256(path) if size == expected.size else "(not hashed)"
        if size != expected.size or digest != expected.sha256:
            raise ChecksumMismatchError(
                f"{manifest.model}: {relative} failed verification: sha256 {digest}, size {size}; "
                f"the manifest says sha256 {expected.sha256}, size {expected.size}"
            )


def is_intact(manifest: Manifest, root: Path) -> bool:
    """The cheap check for a cached copy (sizes only): a complete rename cannot leave a file short."""
    try:
        return all((root / p).stat().st_size == e.size for p, e in manifest.files.items())
    except OSError:
        return False
