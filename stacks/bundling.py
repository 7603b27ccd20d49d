"""Packages the front-door Lambda without Docker: pip puts Linux wheels next to the packages it runs.

The asset holds the shared contract, the transport-free OpenAI layer and the front door
(`LAMBDA_PACKAGES`), nothing of the manager, the worker or the local stack: they are copied into a
staging folder that is the asset's source, so its hash, and a redeploy, follow only those three.

Why local bundling: the handler is pure Python plus wheels that exist for Lambda's platform, so pip
with `--platform/--only-binary` builds the same zip a Lambda build image would, on any machine with
no Docker engine. The Docker command is only the fallback CDK requires when pip is missing.
Why `skipBundling` for tests: bundling downloads wheels; assertion tests only need the template.
"""

from __future__ import annotations

import atexit
import importlib.util
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

LAMBDA_PACKAGES = ("contract", "openai_api", "frontdoor")

# The front door's runtime needs only these (boto3 ships with the Lambda runtime). Kept in step with
# pyproject.toml's bounds; the rest of the manager's dependencies never load in the Lambda. aiohttp is
# for the streaming function's HTTP server (`frontdoor/run.sh`, behind the Lambda Web Adapter); jinja2
# renders a model's chat template (openai_api/chat_template.py).
LAMBDA_REQUIREMENTS = (
    "aws-lambda-powertools[parser,redis]>=3.20,<4",
    "redis>=5.0,<8",
    "pydantic>=2.6,<3",
    "aiohttp>=3.10,<4",
    "jinja2>=3.1,<4",
)

# Lambda's x86_64 images run glibc 2.34 (Amazon Linux 2023); both tags cover the wheels we need.
_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@jsii.implements(cdk.ILocalBundling)
class PipBundler:
    """Installs `requirements` for the Lambda's Python into the asset folder, then copies the source."""

    def __init__(self, *, source: Path, requirements: Sequence[str], python_version: str) -> None:
        self._source = source
        self._requirements = tuple(requirements)
        self._python_version = python_version

    def try_bundle(self, output_dir: str, *, image: cdk.DockerImage, **_options: Any) -> bool:
        """Returns False (so CDK falls back to Docker) only when this Python has no pip."""
        if importlib.util.find_spec("pip") is None:
            return False
        platforms = [arg for platform in _PLATFORMS for arg in ("--platform", platform)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",
                *platforms,
                "--implementation",
                "cp",
                "--python-version",
                self._python_version,
                "--only-binary=:all:",
                "--target",
                output_dir,
                *self._requirements,
            ],
            check=True,
        )
        shutil.copytree(self._source, output_dir, ignore=_IGNORED, dirs_exist_ok=True)
        return True


def stage_packages(root: Path, packages: Sequence[str]) -> Path:
    """A fresh folder holding only `packages` (copied from `root`), removed when the process exits."""
    staging = Path(tempfile.mkdtemp(prefix="synapse-lambda-"))
    atexit.register(shutil.rmtree, staging, ignore_errors=True)
    for package in packages:
        shutil.copytree(root / package, staging / package, ignore=_IGNORED)
    return staging


def python_lambda_code(*, root: Path, packages: Sequence[str], runtime: lambda_.Runtime) -> lambda_.Code:
    """The zip for a handler inside `packages`: the packages at the zip's root plus their wheels."""
    python_version = runtime.name.removeprefix("python")
    source = stage_packages(root, packages)
    docker_command = (
        f"pip install --no-compile -t /asset-output {shlex.join(LAMBDA_REQUIREMENTS)}"
        " && cp -r /asset-input/. /asset-output/"
    )
    return lambda_.Code.from_asset(
        str(source),
        bundling=cdk.BundlingOptions(
            image=runtime.bundling_image,
            command=["bash", "-c", docker_command],
            local=PipBundler(source=source, requirements=LAMBDA_REQUIREMENTS, python_version=python_version),
        ),
    )
