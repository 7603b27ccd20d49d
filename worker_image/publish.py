"""Publishes model folders to the S3 model store: `synapse models publish --bucket B [--prefix P] DIR...`;
and `synapse models catalog [MODEL...]` prints the model catalog these settings give.

Each folder is uploaded under `<prefix><model>/` and its manifest is written last, so a worker that
can read a manifest finds every file it names. Include a `checkpoint/` folder to ship real weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from contract.catalog import CatalogError
from contract.catalog_build import catalog_of
from contract.settings import Settings
from worker_image.manifest import MANIFEST_NAME, Manifest, ModelStoreError
from worker_image.model_store import normalize_prefix

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client


def publish(folder: Path, client: S3Client, bucket: str, prefix: str = "models/") -> Manifest:
    """Uploads one Triton model folder (named after the folder) and then its manifest."""
    manifest = Manifest.of_directory(folder.name, folder)
    base = f"{normalize_prefix(prefix)}{manifest.model}/"
    for relative in sorted(manifest.files):
        client.upload_file(str(folder / relative), bucket, base + relative)
    client.put_object(
        Bucket=bucket,
        Key=base + MANIFEST_NAME,
        Body=manifest.to_json().encode(),
        ContentType="application/json",
    )
    return manifest


def main(argv: Sequence[str] | None = None) -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(prog="synapse models", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    push = sub.add_parser("publish", help="upload model folders and their checksum manifests")
    push.add_argument("--bucket", default=settings.model_bucket, required=settings.model_bucket is None,
                      help="S3 bucket (default: SYNAPSE_MODEL_BUCKET)")  # fmt: skip
    push.add_argument("--prefix", default=settings.model_prefix, help="key prefix (default: %(default)s)")
    push.add_argument(
        "folders", nargs="+", type=Path, help="Triton model folders, e.g. triton_models/gpu-sim"
    )
    show = sub.add_parser(
        "catalog",
        help="print the served models' catalog as this machine builds it (a deploy leaves out tokenizers)",
    )
    show.add_argument("models", nargs="*", help="models to describe (default: SYNAPSE_MODELS)")
    args = parser.parse_args(argv)
    if args.action == "catalog":
        served = settings.model_copy(update={"models": tuple(args.models) or settings.models})
        try:
            print(json.dumps(json.loads(catalog_of(served).to_json()), indent=2))
        except CatalogError as exc:
            sys.exit(f"synapse models catalog: {exc}")
        return

    import boto3

    client = boto3.client("s3")
    for folder in args.folders:
        try:
            manifest = publish(folder, client, args.bucket, args.prefix)
        except ModelStoreError as exc:
            sys.exit(f"synapse models publish: {exc}")
        print(
            f"published {manifest.model} version {manifest.version[:12]} "
            f"({len(manifest.files)} files, {manifest.total_bytes} bytes) "
            f"to s3://{args.bucket}/{normalize_prefix(args.prefix)}{manifest.model}/"
        )


if __name__ == "__main__":
    main()
