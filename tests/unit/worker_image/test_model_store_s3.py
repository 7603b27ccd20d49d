"""The S3 side of the model store against moto: publish, fetch, verify, reject tampering, evict."""

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from local_stack.cli import main as synapse
from tests.processes import REPO
from tests.unit.model_bucket import BUCKET
from worker_image.manifest import (
    MANIFEST_NAME,
    ChecksumMismatchError,
    ManifestError,
    ModelNotFoundError,
)
from worker_image.model_store import ModelStore, S3Source
from worker_image.publish import publish


def gpu_sim(tmp_path: Path) -> Path:
    return Path(shutil.copytree(REPO / "triton_models" / "gpu-sim", tmp_path / "gpu-sim"))


def blob_model(root: Path, name: str, size: int) -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    (root / name / "1" / "weights.bin").write_bytes(os.urandom(size))
    return root / name


def test_a_published_model_is_fetched_and_verified(s3: Any, tmp_path: Path) -> None:
    manifest = publish(gpu_sim(tmp_path), s3, BUCKET, prefix="store")
    source = S3Source(BUCKET, "store", s3)
    assert source.models() == ["gpu-sim"]
    assert source.manifest("gpu-sim") == manifest

    cached = ModelStore(source, tmp_path / "cache", budget_bytes=10**6).ensure("gpu-sim")
    for relative in manifest.files:
        assert (cached / relative).read_bytes() == (tmp_path / "gpu-sim" / relative).read_bytes()
    assert json.loads((cached / MANIFEST_NAME).read_text())["version"] == manifest.version


def test_a_tampered_object_is_rejected_and_nothing_is_left_behind(s3: Any, tmp_path: Path) -> None:
    publish(gpu_sim(tmp_path), s3, BUCKET)
    s3.put_object(Bucket=BUCKET, Key="models/gpu-sim/1/model.py", Body=b"import os; os.system('evil')\n")
    store = ModelStore(S3Source(BUCKET, "models/", s3), tmp_path / "cache", budget_bytes=10**6)

    with pytest.raises(ChecksumMismatchError, match=r"gpu-sim: 1/model\.py failed verification"):
        store.ensure("gpu-sim")
    assert not (tmp_path / "cache" / "gpu-sim").exists()
    assert list((tmp_path / "cache" / ".staging").iterdir()) == []


def test_a_tampered_manifest_is_rejected(s3: Any, tmp_path: Path) -> None:
    publish(gpu_sim(tmp_path), s3, BUCKET)
    key = "models/gpu-sim/manifest.json"
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body["files"]["1/model.py"]["sha256"] = "0" * 64
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body).encode())

    with pytest.raises(ManifestError, match="does not match its file list"):
        ModelStore(S3Source(BUCKET, "models/", s3), tmp_path / "cache", budget_bytes=10**6).ensure("gpu-sim")


def test_a_model_that_was_never_published_is_not_found(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="models/half/config.pbtxt", Body=b"")  # no manifest: not published
    source = S3Source(BUCKET, "models/", s3)
    assert source.models() == []
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        ModelStore(source, tmp_path / "cache", budget_bytes=10**6).ensure("half")


def test_past_the_cache_budget_the_lru_model_goes_but_a_loaded_one_stays(s3: Any, tmp_path: Path) -> None:
    for name in ("loaded", "idle", "fresh"):
        publish(blob_model(tmp_path / "src", name, 4000), s3, BUCKET)
    store = ModelStore(S3Source(BUCKET, "models/", s3), tmp_path / "cache", budget_bytes=9000)
    store.pin("loaded")
    store.ensure("loaded")
    store.ensure("idle")
    os.utime(store.path("loaded") / MANIFEST_NAME, (1, 1))  # the oldest use of all, but loaded

    store.ensure("fresh")

    assert sorted(e.name for e in store.entries()) == ["fresh", "loaded"]
    assert store.size() <= 9000


def test_the_command_line_publishes_folders(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = blob_model(tmp_path, "tiny", 10)
    synapse(["models", "publish", "--bucket", BUCKET, "--prefix", "m/", str(folder)])
    assert "published tiny version" in capsys.readouterr().out
    assert S3Source(BUCKET, "m/", s3).models() == ["tiny"]
