"""The models the worker image carries (worker_image/bake.py): served before the bucket, without it, and
verified against the manifest written at image build, as a download is. S3 is moto's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from contract.settings import Settings
from tests.processes import REPO
from tests.unit.model_bucket import BUCKET
from worker_image.bake import bake
from worker_image.bake import main as bake_main
from worker_image.manifest import (
    MANIFEST_NAME,
    ChecksumMismatchError,
    Manifest,
    ModelNotFoundError,
    SourceUnavailableError,
)
from worker_image.model_store import (
    BakedFirstSource,
    BakedSource,
    ModelStore,
    S3Source,
    store_from_settings,
)
from worker_image.publish import publish


@pytest.fixture(scope="module")
def image_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the image build bakes: both models of triton_models/, tiny-gpt2 with its seeded checkpoint."""
    dest = tmp_path_factory.mktemp("image") / "baked-models"
    for model in ("gpu-sim", "tiny-gpt2"):
        bake(REPO / "triton_models" / model, dest)
    return dest


@pytest.fixture
def baked(image_models: Path, tmp_path: Path) -> Path:
    """A copy per test, so a test may damage it."""
    return Path(shutil.copytree(image_models, tmp_path / "baked-models"))


def store(baked: Path, s3: Any, cache: Path) -> ModelStore:
    source = BakedFirstSource(BakedSource(baked), S3Source(BUCKET, "models/", s3))
    return ModelStore(source, cache, budget_bytes=10**9)


def test_the_image_carries_tiny_gpt2_with_its_checkpoint_and_a_manifest_of_every_file(
    image_models: Path,
) -> None:
    folder = image_models / "tiny-gpt2"
    manifest = Manifest.from_json((folder / MANIFEST_NAME).read_bytes(), "tiny-gpt2")
    assert "checkpoint/config.json" in manifest.files
    assert "config.pbtxt" in manifest.files and "1/README.md" in manifest.files
    assert manifest == Manifest.of_directory("tiny-gpt2", folder)


def test_a_worker_with_an_empty_bucket_serves_the_baked_models(baked: Path, s3: Any, tmp_path: Path) -> None:
    models = store(baked, s3, tmp_path / "cache")
    assert models.source.models() == ["gpu-sim", "tiny-gpt2"]
    entry = models.ensure("tiny-gpt2")
    weights = "checkpoint/model.safetensors"
    assert (entry / weights).read_bytes() == (baked / "tiny-gpt2" / weights).read_bytes()
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_a_model_in_the_bucket_but_not_baked_still_syncs(baked: Path, s3: Any, tmp_path: Path) -> None:
    extra = tmp_path / "src" / "extra"
    (extra / "1").mkdir(parents=True)
    (extra / "config.pbtxt").write_text('name: "extra"\n')
    (extra / "1" / "weights.bin").write_bytes(os.urandom(2000))
    published = publish(extra, s3, BUCKET)

    models = store(baked, s3, tmp_path / "cache")
    assert models.source.models() == ["extra", "gpu-sim", "tiny-gpt2"]
    entry = models.ensure("extra")
    assert (entry / "1" / "weights.bin").read_bytes() == (extra / "1" / "weights.bin").read_bytes()
    assert models.cached_manifest("extra") == published


def test_a_corrupted_baked_file_is_refused_like_a_corrupted_download(
    baked: Path, s3: Any, tmp_path: Path
) -> None:
    (baked / "gpu-sim" / "1" / "model.py").write_text("import os; os.system('evil')\n")
    models = store(baked, s3, tmp_path / "cache")
    with pytest.raises(ChecksumMismatchError, match=r"gpu-sim: 1/model\.py failed verification"):
        models.ensure("gpu-sim")
    assert not (tmp_path / "cache" / "gpu-sim").exists()
    assert list((tmp_path / "cache" / ".staging").iterdir()) == []


def test_a_model_both_baked_and_published_is_served_from_the_image(
    baked: Path, s3: Any, tmp_path: Path
) -> None:
    other = Path(shutil.copytree(REPO / "triton_models" / "gpu-sim", tmp_path / "src" / "gpu-sim"))
    (other / "config.pbtxt").write_text((other / "config.pbtxt").read_text() + "# another version\n")
    publish(other, s3, BUCKET)
    models = store(baked, s3, tmp_path / "cache")
    models.ensure("gpu-sim")
    assert models.cached_manifest("gpu-sim") == Manifest.of_directory("gpu-sim", baked / "gpu-sim")


def test_a_model_neither_baked_nor_published_is_not_found(baked: Path, s3: Any, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError):
        store(baked, s3, tmp_path / "cache").ensure("nowhere")


def test_without_a_bucket_the_baked_models_come_before_the_local_repository(
    baked: Path, tmp_path: Path
) -> None:
    settings = Settings.from_env(
        {
            "SYNAPSE_BAKED_MODEL_DIR": str(baked),
            "SYNAPSE_MODEL_REPOSITORY": str(tmp_path / "empty"),
            "SYNAPSE_MODEL_CACHE_DIR": str(tmp_path / "cache"),
        }
    )
    (tmp_path / "empty").mkdir()
    models = store_from_settings(settings)
    assert models.source.models() == ["gpu-sim", "tiny-gpt2"]
    assert (models.ensure("tiny-gpt2") / "checkpoint" / "config.json").is_file()


def test_a_baked_model_dir_that_is_missing_is_an_error_not_an_empty_image(tmp_path: Path) -> None:
    settings = Settings.from_env({"SYNAPSE_BAKED_MODEL_DIR": str(tmp_path / "missing")})
    with pytest.raises(SourceUnavailableError, match="SYNAPSE_BAKED_MODEL_DIR"):
        store_from_settings(settings)


def test_the_bake_command_bakes_each_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bake_main([str(tmp_path / "out"), str(REPO / "triton_models" / "gpu-sim")])
    assert "baked gpu-sim version" in capsys.readouterr().out
    assert BakedSource(tmp_path / "out").models() == ["gpu-sim"]
