"""The local provider starts workers at the pace the machine loads them: as many at once as its cores
allow, the next as one of them serves, so a burst from zero gets its first worker as fast as one alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contract.settings import Settings
from contract.workers import SERVING_MARKER, worker_folder
from manager.providers import local


@pytest.fixture
def sleepers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that start and never serve on their own: a test says when each one serves."""
    real_spawn = asyncio.create_subprocess_exec

    async def spawn(*argv: str, **options: object) -> asyncio.subprocess.Process:
        return await real_spawn("sleep", "60", **options)  # type: ignore[arg-type]

    monkeypatch.setattr(local.asyncio, "create_subprocess_exec", spawn)


def serves(state_dir: Path, worker_id: str) -> None:
    folder = worker_folder(state_dir, worker_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SERVING_MARKER).touch()


@pytest.mark.parametrize(("cores", "at_once"), [(1, 1), (2, 1), (4, 2)])
async def test_workers_start_as_many_at_once_as_the_cores_allow_and_the_next_as_one_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleepers: None, cores: int, at_once: int
) -> None:
    monkeypatch.setattr(local.os, "cpu_count", lambda: cores)
    provider = local.LocalProvider(Settings(state_dir=tmp_path, warm_pool_size=0))
    try:
        await provider.set_desired(4)
        started = [w.worker_id for w in provider._workers]
        assert len(started) == at_once
        assert (await provider.capacity()).desired == 4

        await provider.set_desired(4)  # the autoscaler's next tick: nobody serves yet
        assert [w.worker_id for w in provider._workers] == started

        serves(tmp_path, started[0])
        await provider.set_desired(4)
        assert len(provider._workers) == at_once + 1
    finally:
        await provider.aclose()


async def test_the_warm_standby_starts_once_the_serving_worker_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleepers: None
) -> None:
    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)
    provider = local.LocalProvider(Settings(state_dir=tmp_path, warm_pool_size=1))
    try:
        await provider.set_desired(1)
        assert (len(provider._workers), len(provider._warm)) == (1, 0)
        serves(tmp_path, provider._workers[0].worker_id)
        await provider.set_desired(1)
        assert (len(provider._workers), len(provider._warm)) == (1, 1)
    finally:
        await provider.aclose()
