"""The worker's model store: models come from a source (S3, or a local folder) into a disk cache.

The models baked into the worker image come first (`BakedFirstSource`); the source adds to them.

Tiers: the source -> `<cache>/<model>/` on local disk -> loaded in Triton. A fetch downloads into a
staging folder beside the cache, verifies every file against the model's manifest, and renames the
folder into place, so a cache entry is always complete and verified. Past the byte budget, entries
are evicted least recently used first (last use = the mtime of the entry's manifest, so the order
survives restarts); an entry that a worker has pinned (its model is loaded in Triton) is never evicted.
Pins are shared `flock`s, so several workers on one machine can share the cache, and a pin dies with
its process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from contract.settings import Settings
from worker_image.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ModelNotFoundError,
    SourceUnavailableError,
    check_model_name,
    is_intact,
    is_model_name,
    verify,
)

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

log = logging.getLogger(__name__)

Prepare = Callable[[str, Path], None]


class ModelSource(Protocol):
    """Where published models live; the store only lists, reads manifests and downloads."""

    def models(self) -> list[str]: ...

    def manifest(self, model: str) -> Manifest: ...

    def download(self, manifest: Manifest, dest: Path) -> None: ...


class DirectorySource:
    """A local Triton repository (`triton_models/`): the local stack's and the tests' default store.

    Its models carry no manifest; one is computed from the folder, so the cache works the same way.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def models(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / "config.pbtxt").is_file())

    def manifest(self, model: str) -> Manifest:
        folder = self.root / check_model_name(model)
        if not (folder / "config.pbtxt").is_file():
            raise ModelNotFoundError(f"{model}: no such model in {self.root}")
        try:
            return Manifest.of_directory(model, folder)
        except OSError as exc:
            raise SourceUnavailableError(f"{model}: cannot read {folder}: {exc}") from exc

    def download(self, manifest: Manifest, dest: Path) -> None:
        for relative in manifest.files:
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.root / manifest.model / relative, target)


class BakedSource(DirectorySource):
    """The models the worker image carries (worker_image/bake.py), each with the manifest written when the
    image was built: a file changed since is refused as a corrupt download is."""

    def models(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / MANIFEST_NAME).is_file())

    def manifest(self, model: str) -> Manifest:
        path = self.root / check_model_name(model) / MANIFEST_NAME
        try:
            body = path.read_bytes()
        except FileNotFoundError as exc:
            raise ModelNotFoundError(f"{model}: not baked into this image ({self.root})") from exc
        except OSError as exc:
            raise SourceUnavailableError(f"{model}: cannot read {path}: {exc}") from exc
        return Manifest.from_json(body, model)


class BakedFirstSource:
    """The image's models first, then the store's: a worker serves what it carries without the bucket,
    and the bucket adds models. A model in both is served from the image (publish a new one under a
    new name, or rebuild the image)."""

    def __init__(self, baked: BakedSource, store: ModelSource) -> None:
        self.baked = baked
        self.store = store
        self._carried = frozenset(baked.models())  # the image's files never change

    def models(self) -> list[str]:
        return sorted(self._carried | set(self.store.models()))

    def manifest(self, model: str) -> Manifest:
        return (self.baked if model in self._carried else self.store).manifest(model)

    def download(self, manifest: Manifest, dest: Path) -> None:
        (self.baked if manifest.model in self._carried else self.store).download(manifest, dest)


def normalize_prefix(prefix: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


class S3Source:
    """Models published under `s3://<bucket>/<prefix><model>/`, each with its manifest.json."""

    def __init__(self, bucket: str, prefix: str = "models/", client: S3Client | None = None) -> None:
        import boto3

        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        # boto3 honours AWS_ENDPOINT_URL_S3, which is how tests point it at moto_server.
        self.client: S3Client = client or boto3.client("s3")

    def key(self, model: str, relative: str) -> str:
        return f"{self.prefix}{model}/{relative}"

    def models(self) -> list[str]:
        found: set[str] = set()
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    model, _, rest = obj["Key"][len(self.prefix) :].partition("/")
                    if rest == MANIFEST_NAME:
                        found.add(model)
        except (BotoCoreError, ClientError) as exc:
            raise SourceUnavailableError(f"cannot list s3://{self.bucket}/{self.prefix}: {exc}") from exc
        return sorted(found)

    def manifest(self, model: str) -> Manifest:
        key = self.key(check_model_name(model), MANIFEST_NAME)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                raise ModelNotFoundError(f"{model}: s3://{self.bucket}/{key} does not exist") from exc
            raise SourceUnavailableError(f"{model}: cannot read s3://{self.bucket}/{key}: {exc}") from exc
        except BotoCoreError as exc:
            raise SourceUnavailableError(f"{model}: cannot read s3://{self.bucket}/{key}: {exc}") from exc
        return Manifest.from_json(body, model)

    def download(self, manifest: Manifest, dest: Path) -> None:
        """Managed transfers: large weights come down in parallel ranged GETs."""
        for relative in manifest.files:
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.client.download_file(self.bucket, self.key(manifest.model, relative), str(target))
            except (BotoCoreError, ClientError) as exc:
                raise SourceUnavailableError(f"{manifest.model}: cannot download {relative}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class CacheEntry:
    name: str
    size: int
    last_used: float


def plan_evictions(
    entries: Iterable[CacheEntry], budget_bytes: int, room_for: int, pinned: Collection[str]
) -> list[str]:
    """The least recently used unpinned entries to drop so the cache plus `room_for` fits the budget."""
    ordered = sorted(entries, key=lambda e: (e.last_used, e.name))
    total = sum(e.size for e in ordered) + room_for
    victims: list[str] = []
    for entry in ordered:
        if total <= budget_bytes:
            break
        if entry.name not in pinned:
            victims.append(entry.name)
            total -= entry.size
    return victims


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ModelStore:
    """The disk cache in front of a source. Blocking (file and S3 I/O): async callers use a thread."""

    def __init__(
        self, source: ModelSource, cache_dir: Path, budget_bytes: int, prepare: Prepare | None = None
    ) -> None:
        self.source = source
        self.cache_dir = cache_dir
        self.budget_bytes = budget_bytes
        self._prepare = prepare
        self._staging = cache_dir / ".staging"
        self._locks = cache_dir / ".locks"
        self._pins: dict[str, int] = {}
        self._staging.mkdir(parents=True, exist_ok=True)
        self._locks.mkdir(parents=True, exist_ok=True)
        self._remove_abandoned_staging()

    def path(self, model: str) -> Path:
        return self.cache_dir / check_model_name(model)

    def ensure(self, model: str) -> Path:
        """The model's verified cache entry, fetched (or refreshed to the source's version) if needed."""
        entry = self.path(model)
        cached = self.cached_manifest(model)
        try:
            manifest = self.source.manifest(model)
        except SourceUnavailableError as exc:
            if cached is None or not is_intact(cached, entry):
                raise
            log.warning("model store unreachable, serving the cached %s: %s", model, exc)
            self.touch(model)
            return entry
        if cached is not None and cached.version == manifest.version and is_intact(cached, entry):
            self.touch(model)
            return entry
        self.evict(room_for=manifest.total_bytes, keep={model})
        self._fetch(manifest)
        return entry

    def _fetch(self, manifest: Manifest) -> None:
        """Download, verify, prepare, rename: an entry is never half-written, a bad download never kept."""
        model = manifest.model
        staging = self._staging_name(model, "new")
        log.info("fetching %s (%d files, %d bytes) from the model store", model, len(manifest.files),
                 manifest.total_bytes)  # fmt: skip
        try:
            staging.mkdir()
            self.source.download(manifest, staging)
            verify(manifest, staging)
            (staging / MANIFEST_NAME).write_text(manifest.to_json())
            if self._prepare is not None:
                self._prepare(model, staging)
            self._install(manifest, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _install(self, manifest: Manifest, staging: Path) -> None:
        entry = self.path(manifest.model)
        with contextlib.suppress(OSError):
            staging.rename(entry)
            return
        # An entry is already there: a neighbour fetched the same version first, or it is outdated.
        current = self.cached_manifest(manifest.model)
        if current is not None and current.version == manifest.version:
            return
        trash = self._staging_name(manifest.model, "old")
        with contextlib.suppress(FileNotFoundError):
            entry.rename(trash)
        try:
            staging.rename(entry)
        except OSError:  # a neighbour installed the new version between our two renames
            log.info("%s was refreshed by another worker", manifest.model)
        shutil.rmtree(trash, ignore_errors=True)
        log.info("%s refreshed to version %s", manifest.model, manifest.version[:12])

    def cached_manifest(self, model: str) -> Manifest | None:
        try:
            return Manifest.from_json((self.path(model) / MANIFEST_NAME).read_bytes(), model)
        except (OSError, ManifestError):
            return None

    def entries(self) -> list[CacheEntry]:
        found: list[CacheEntry] = []
        for folder in self.cache_dir.iterdir():
            if not is_model_name(folder.name) or not folder.is_dir():
                continue
            manifest = self.cached_manifest(folder.name)
            marker = folder / MANIFEST_NAME if manifest is not None else folder
            with contextlib.suppress(FileNotFoundError):
                size = manifest.total_bytes if manifest is not None else 0
                found.append(CacheEntry(folder.name, size, marker.stat().st_mtime))
        return found

    def size(self) -> int:
        return sum(e.size for e in self.entries())

    def touch(self, model: str) -> None:
        """Marks a model used now: its manifest's mtime is its place in the LRU order."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.path(model) / MANIFEST_NAME)

    def evict(self, room_for: int = 0, keep: Collection[str] = ()) -> list[str]:
        """Drops least recently used entries until the cache (plus room_for) fits; pinned ones stay."""
        entries = self.entries()
        pinned = {e.name for e in entries if e.name in keep or self.is_pinned(e.name)}
        evicted: list[str] = []
        for name in plan_evictions(entries, self.budget_bytes, room_for, pinned):
            with self._exclusive(name) as locked:
                if not locked:  # pinned since we looked
                    continue
                trash = self._staging_name(name, "evicted")
                with contextlib.suppress(FileNotFoundError):
                    self.path(name).rename(trash)
                    evicted.append(name)
                shutil.rmtree(trash, ignore_errors=True)
        if evicted:
            log.info("evicted %s from the model cache (budget %d bytes)", ", ".join(evicted),
                     self.budget_bytes)  # fmt: skip
        if self.size() + room_for > self.budget_bytes:
            log.warning("model cache over budget: %d bytes pinned or in use", self.size())
        return evicted

    def pin(self, model: str) -> None:
        """Protects a model's entry from eviction (by any process) until `unpin` or process exit."""
        if model in self._pins:
            return
        fd = os.open(self._locks / f"{check_model_name(model)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._pins[model] = fd

    def unpin(self, model: str) -> None:
        fd = self._pins.pop(model, None)
        if fd is not None:
            os.close(fd)
            self.touch(model)

    def is_pinned(self, model: str) -> bool:
        with self._exclusive(model) as locked:
            return not locked

    @contextlib.contextmanager
    def _exclusive(self, model: str) -> Iterator[bool]:
        # flock locks belong to open file descriptions, so this conflicts with our own pins too.
        fd = os.open(self._locks / f"{model}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def close(self) -> None:
        for model in list(self._pins):
            self.unpin(model)

    def _staging_name(self, model: str, what: str) -> Path:
        return self._staging / f"{os.getpid()}.{secrets.token_hex(4)}.{what}.{model}"

    def _remove_abandoned_staging(self) -> None:
        """Staging folders start with their owner's pid; those of dead processes are garbage."""
        for folder in self._staging.iterdir():
            pid = folder.name.split(".", 1)[0]
            if not pid.isdigit() or not _pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def store_from_settings(settings: Settings, prepare: Prepare | None = None) -> ModelStore:
    """S3 when SYNAPSE_MODEL_BUCKET is set, else the local model repository folder; behind the image's
    baked models when SYNAPSE_BAKED_MODEL_DIR is set."""
    source: ModelSource
    if settings.model_bucket:
        source = S3Source(settings.model_bucket, settings.model_prefix)
    else:
        source = DirectorySource(settings.model_repository)
    baked = settings.baked_model_dir
    if baked is not None:
        if not baked.is_dir():
            raise SourceUnavailableError(f"SYNAPSE_BAKED_MODEL_DIR={baked} is not a folder")
        source = BakedFirstSource(BakedSource(baked), source)
    cache_dir = settings.model_cache_dir or settings.state_dir / "model-cache"
    return ModelStore(source, cache_dir, settings.model_cache_bytes, prepare)
