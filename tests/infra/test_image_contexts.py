"""The images' build contexts as synth stages them: what `cdk deploy` hashes, uploads and builds from.

The manager image builds from the repository root, where .dockerignore must keep out what a developer's
checkout holds beside the code (virtual environments, caches, model folders' scratch); the worker image
builds in CodeBuild from a source folder synth stages (stacks/worker_build/construct.py). Either way a
deploy must ship everything its Dockerfile copies and nothing else, or the build fails, or every deploy
ships hundreds of MB and rebuilds whenever a local tool runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from stacks.manager_service import MANAGER_DOCKERFILE
from stacks.worker_build.construct import DOCKERFILE as WORKER_DOCKERFILE
from stacks.worker_build.construct import SOURCES as WORKER_SOURCES
from tests.infra.synthesis import REPO, Synth

pytestmark = pytest.mark.infra


def repository_contexts(synth: Synth) -> dict[Path, list[str]]:
    """Each staged image context built from the repository root, with the Dockerfiles built from it."""
    contexts: dict[Path, list[str]] = {}
    for manifest in synth.outdir.glob("*.assets.json"):
        for image in json.loads(manifest.read_text()).get("dockerImages", {}).values():
            source = image["source"]
            if "dockerFile" in source:
                contexts.setdefault(synth.outdir / source["directory"], []).append(source["dockerFile"])
    return contexts


def copied_sources(dockerfile: Path) -> set[str]:
    """The paths a Dockerfile's COPY lines take from the build context (not from another stage)."""
    sources: set[str] = set()
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from") for word in words):
            sources.update(word.rstrip("/") for word in words[1:-1] if not word.startswith("--"))
    return sources


def copied(path: str, sources: set[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(source) for source in sources)


def staged_files(context: Path) -> set[str]:
    return {path.relative_to(context).as_posix() for path in context.rglob("*") if path.is_file()}


def test_only_the_manager_image_is_built_on_the_deployers_machine(synth: Synth) -> None:
    dockerfiles = sorted(name for names in repository_contexts(synth).values() for name in names)
    assert dockerfiles == [MANAGER_DOCKERFILE]


def assert_ships_what_it_copies(context: Path, dockerfile: str, tracked: set[str]) -> None:
    """Every staged file is tracked and copied by the Dockerfile; every copied path is staged."""
    sources = copied_sources(REPO / dockerfile)
    staged = staged_files(context)
    assert staged - tracked == set(), f"{context.name} stages files git does not track"
    uncopied = {path for path in staged if not copied(path, {".dockerignore", dockerfile, *sources})}
    assert uncopied == set(), f"{context.name} stages files {dockerfile} does not copy"
    missing = {source for source in sources if not any(copied(path, {source}) for path in staged)}
    assert missing == set(), f"{dockerfile} copies what {context.name} lacks: the build would fail"


def tracked_files() -> set[str]:
    listing = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    return set(listing.stdout.splitlines())


def test_the_manager_context_holds_what_its_dockerfile_copies_and_nothing_else(synth: Synth) -> None:
    [context] = repository_contexts(synth)
    assert_ships_what_it_copies(context, MANAGER_DOCKERFILE, tracked_files())


def test_the_worker_build_source_holds_what_its_dockerfile_copies_and_nothing_else(synth: Synth) -> None:
    assert set(WORKER_SOURCES) == copied_sources(REPO / WORKER_DOCKERFILE) - {"worker_image/requirements.txt"}
    assert_ships_what_it_copies(synth.outdir / "worker-build-source", WORKER_DOCKERFILE, tracked_files())
