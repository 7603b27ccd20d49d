"""The images' build contexts as synth stages them: what `cdk deploy` hashes, uploads and builds from.

The manager and worker images build from the repository root; .dockerignore must keep out what a
developer's checkout holds beside the code (virtual environments, caches, model folders' scratch),
or every deploy ships hundreds of MB and rebuilds whenever a local tool runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from stacks.manager_service import MANAGER_DOCKERFILE
from stacks.workers import WORKER_DOCKERFILE
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


def test_the_repository_images_are_built_by_both_dockerfiles(synth: Synth) -> None:
    dockerfiles = sorted(name for names in repository_contexts(synth).values() for name in names)
    assert dockerfiles == [MANAGER_DOCKERFILE, WORKER_DOCKERFILE]


def test_an_image_context_holds_only_tracked_files_that_a_dockerfile_copies(synth: Synth) -> None:
    listing = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    tracked = set(listing.stdout.splitlines())
    contexts = repository_contexts(synth)
    dockerfiles = {name for names in contexts.values() for name in names}
    # One .dockerignore serves both images, so a context may hold what either Dockerfile copies.
    allowed = {".dockerignore", *dockerfiles}.union(*(copied_sources(REPO / name) for name in dockerfiles))
    for context in contexts:
        staged = staged_files(context)
        assert staged - tracked == set(), f"{context.name} stages files git does not track"
        uncopied = {path for path in staged if not copied(path, allowed)}
        assert uncopied == set(), f"{context.name} stages files no Dockerfile copies"
        needed = {"manager/__main__.py", WORKER_DOCKERFILE, "triton_models/minilm/config.pbtxt"}
        assert needed <= staged
