import json
from pathlib import Path

import pytest

from worker_image.manifest import (
    MANIFEST_NAME,
    ChecksumMismatchError,
    Manifest,
    ManifestError,
    ModelNotFoundError,
    check_model_name,
    is_intact,
    verify,
)


def model_folder(root: Path, name: str = "demo", weights: bytes = b"w" * 100) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\n')
    (folder / "1" / "model.py").write_text("print('hi')\n")
    (folder / "1" / "weights.bin").write_bytes(weights)
    (folder / "1" / "__pycache__").mkdir()
    (folder / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"cache")
    (folder / MANIFEST_NAME).write_text("{}")
    return folder


def test_a_manifest_lists_every_model_file_but_caches_and_itself(tmp_path: Path) -> None:
    manifest = Manifest.of_directory("demo", model_folder(tmp_path))
    assert sorted(manifest.files) == ["1/model.py", "1/weights.bin", "config.pbtxt"]
    assert manifest.files["1/weights.bin"].size == 100
    assert manifest.total_bytes == sum(e.size for e in manifest.files.values())


def test_the_version_follows_the_content_not_the_upload(tmp_path: Path) -> None:
    first = Manifest.of_directory("demo", model_folder(tmp_path / "a"))
    same = Manifest.of_directory("demo", model_folder(tmp_path / "b"))
    other = Manifest.of_directory("demo", model_folder(tmp_path / "c", weights=b"x" * 100))
    assert first.version == same.version
    assert first.version != other.version


def test_a_manifest_round_trips_through_json(tmp_path: Path) -> None:
    manifest = Manifest.of_directory("demo", model_folder(tmp_path))
    assert Manifest.from_json(manifest.to_json(), "demo") == manifest


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "1/../../x", "./config.pbtxt", ""])
def test_a_manifest_naming_a_path_outside_the_model_is_refused(tmp_path: Path, path: str) -> None:
    body = json.loads(Manifest.of_directory("demo", model_folder(tmp_path)).to_json())
    body["files"][path] = {"sha256": "0" * 64, "size": 1}
    with pytest.raises(ManifestError, match="unsafe path"):
        Manifest.from_json(json.dumps(body), "demo")


def test_a_manifest_whose_version_does_not_match_its_files_is_refused(tmp_path: Path) -> None:
    body = json.loads(Manifest.of_directory("demo", model_folder(tmp_path)).to_json())
    body["files"]["1/weights.bin"]["size"] = 99
    with pytest.raises(ManifestError, match="does not match its file list"):
        Manifest.from_json(json.dumps(body), "demo")


def test_a_manifest_for_another_model_or_malformed_is_refused(tmp_path: Path) -> None:
    text = Manifest.of_directory("demo", model_folder(tmp_path)).to_json()
    with pytest.raises(ManifestError, match="for model 'demo'"):
        Manifest.from_json(text, "other")
    with pytest.raises(ManifestError, match="malformed"):
        Manifest.from_json("[1, 2]", "demo")


def test_verify_names_the_file_that_was_tampered_with(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    manifest = Manifest.of_directory("demo", folder)
    verify(manifest, folder)
    (folder / "1" / "weights.bin").write_bytes(b"e" * 100)
    with pytest.raises(ChecksumMismatchError, match=r"1/weights\.bin failed verification"):
        verify(manifest, folder)


def test_verify_refuses_a_short_or_missing_file(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    manifest = Manifest.of_directory("demo", folder)
    (folder / "1" / "weights.bin").write_bytes(b"w" * 10)
    assert not is_intact(manifest, folder)
    with pytest.raises(ChecksumMismatchError, match="size 10"):
        verify(manifest, folder)
    (folder / "1" / "model.py").unlink()
    with pytest.raises(ChecksumMismatchError, match=r"1/model\.py is missing"):
        verify(manifest, folder)


@pytest.mark.parametrize("name", ["../up", ".hidden", "a/b", "", "x..y", "a b"])
def test_model_names_cannot_become_paths(name: str) -> None:
    with pytest.raises(ModelNotFoundError, match="not a valid model name"):
        check_model_name(name)


def test_a_folder_without_a_config_is_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"no config\.pbtxt"):
        Manifest.of_directory("empty", tmp_path / "empty")
