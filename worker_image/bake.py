"""`python3 -m worker_image.bake DEST FOLDER...`: the models the worker image carries, built at image build.

Each Triton model folder is copied to `DEST/<model>/` with the checkpoint the project provides for it
(`checkpoint.PROJECT_CHECKPOINTS`: tiny-gpt2's built from a seed, minilm's copied from its package; no
download) and a `manifest.json` of every file, written last.
A worker with `SYNAPSE_BAKED_MODEL_DIR=DEST` serves these before its model store's, verifying each file
against that manifest as it copies the model into its cache, exactly as it verifies a download.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

from contract.catalog_build import CHECKPOINT_DIR
from worker_image.checkpoint import PROJECT_CHECKPOINTS
from worker_image.manifest import MANIFEST_NAME, SKIPPED_DIRS, Manifest, check_model_name


def bake(folder: Path, dest: Path) -> Manifest:
    """Copies one model folder under dest, completes its checkpoint, and writes its manifest."""
    model = check_model_name(folder.name)
    target = dest / model
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(*SKIPPED_DIRS, "*.pyc", MANIFEST_NAME))
    build = PROJECT_CHECKPOINTS.get(model)
    if build is not None and not (target / CHECKPOINT_DIR).exists():
        build(target / CHECKPOINT_DIR)
    manifest = Manifest.of_directory(model, target)
    (target / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m worker_image.bake", description=__doc__)
    parser.add_argument("dest", type=Path, help="the folder the image serves from (SYNAPSE_BAKED_MODEL_DIR)")
    parser.add_argument("folders", nargs="+", type=Path, help="Triton model folders, e.g. triton_models/*/")
    args = parser.parse_args(argv)
    for folder in args.folders:
        manifest = bake(folder, args.dest)
        print(f"baked {manifest.model} version {manifest.version[:12]} ({manifest.total_bytes} bytes)")


if __name__ == "__main__":
    main()
