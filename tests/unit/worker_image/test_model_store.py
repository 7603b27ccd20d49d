import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.catalog import CHAT_MODEL
from contract.settings import Settings
from contract.workers import startup_models
from tests.processes import REPO
from worker_image.manifest import MANIFEST_NAME, Manifest, ModelNotFoundError, SourceUnavailableError
from worker_image.model_store import CacheEntry, DirectorySource, ModelStore, plan_evictions


def entry(name: str, size: int, last_used: float) -> CacheEntry:
    return CacheEntry(name, size, last_used)


def test_eviction_drops_the_least_recently_used_first() -> None:
    entries = [entry("new", 10, 3.0), entry("old", 10, 1.0), entry("mid", 10, 2.0)]
    assert plan_evictions(entries, budget_bytes=20, room_for=0, pinned=()) == ["old"]
    assert plan_evictions(entries, budget_bytes=20, room_for=10, pinned=()) == ["old", "mid"]
    assert plan_evictions(entries, budget_bytes=30, room_for=0, pinned=()) == []


def test_eviction_never_drops_a_pinned_entry() -> None:
    entries = [entry("loaded", 10, 1.0), entry("idle", 10, 2.0), entry("fresh", 10, 3.0)]
    assert plan_evictions(entries, budget_bytes=10, room_for=0, pinned={"loaded"}) == ["idle", "fresh"]
    assert plan_evictions(entries, budget_bytes=0, room_for=0, pinned={"loaded", "idle", "fresh"}) == []


class CountingSource(DirectorySource):
    """The real directory source, counting downloads so a test can tell a cache hit from a fetch."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.downloads: list[str] = []
        self.reachable = True

    def manifest(self, model: str) -> Manifest:
        if not self.reachable:
            raise SourceUnavailableError("the store is down")
        return super().manifest(model)

    def download(self, manifest: Manifest, dest: Path) -> None:
        self.downloads.append(manifest.model)
        super().download(manifest, dest)


def write_model(root: Path, name: str, size: int) -> None:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    (root / name / "1" / "weights.bin").write_bytes(os.urandom(size))


@pytest.fixture
def source(tmp_path: Path) -> CountingSource:
    for name in ("a", "b", "c"):
        write_model(tmp_path / "source", name, 1000)
    return CountingSource(tmp_path / "source")


def test_a_fetched_model_lands_verified_in_the_cache_and_is_reused(
    tmp_path: Path, source: CountingSource
) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    path = store.ensure("a")
    assert path == tmp_path / "cache" / "a"
    assert (path / "1" / "weights.bin").read_bytes() == (source.root / "a" / "1" / "weights.bin").read_bytes()
    assert Manifest.from_json((path / MANIFEST_NAME).read_text(), "a") == source.manifest("a")
    assert store.ensure("a") == path
    assert source.downloads == ["a"]
    assert list((tmp_path / "cache" / ".staging").iterdir()) == []


def test_a_changed_model_in_the_source_replaces_the_cached_copy(
    tmp_path: Path, source: CountingSource
) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    store.ensure("a")
    write_model(source.root, "a", 500)
    assert (store.ensure("a") / "1" / "weights.bin").stat().st_size == 500
    assert source.downloads == ["a", "a"]


def test_a_damaged_cache_entry_is_fetched_again(tmp_path: Path, source: CountingSource) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    (store.ensure("a") / "1" / "weights.bin").write_bytes(b"short")
    store.ensure("a")
    assert source.downloads == ["a", "a"]


def test_an_unreachable_store_serves_the_cached_copy(tmp_path: Path, source: CountingSource) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    store.ensure("a")
    source.reachable = False
    assert store.ensure("a").is_dir()
    with pytest.raises(SourceUnavailableError):
        store.ensure("b")


def test_an_unknown_model_is_reported_as_such(tmp_path: Path, source: CountingSource) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    with pytest.raises(ModelNotFoundError, match="no such model"):
        store.ensure("zzz")
    with pytest.raises(ModelNotFoundError, match="not a valid model name"):
        store.ensure("../a")


def test_prepare_completes_a_model_before_it_enters_the_cache(tmp_path: Path, source: CountingSource) -> None:
    seen: list[tuple[str, bool]] = []

    def prepare(model: str, folder: Path) -> None:
        seen.append((model, folder.parent.name == ".staging"))
        (folder / "checkpoint").mkdir()

    store = ModelStore(source, tmp_path / "cache", budget_bytes=10**6, prepare=prepare)
    assert (store.ensure("a") / "checkpoint").is_dir()
    assert seen == [("a", True)]


def age(store: ModelStore, model: str, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(store.path(model) / MANIFEST_NAME, (stamp, stamp))


def test_past_its_budget_the_cache_evicts_the_least_recently_used_unpinned_model(
    tmp_path: Path, source: CountingSource
) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=2500)
    store.ensure("a")
    store.pin("a")  # loaded in Triton
    store.ensure("b")
    age(store, "a", 300)
    age(store, "b", 200)
    store.ensure("c")
    assert sorted(e.name for e in store.entries()) == ["a", "c"]
    store.unpin("a")  # unloaded: it counts as used now
    assert {e.name: e.last_used for e in store.entries()}["a"] > time.time() - 60
    age(store, "c", 100)  # file times are coarse: make "c" visibly older than the unpin
    store.ensure("b")
    assert sorted(e.name for e in store.entries()) == ["a", "b"]


def test_a_pin_held_by_another_process_protects_the_model_until_that_process_exits(
    tmp_path: Path, source: CountingSource
) -> None:
    store = ModelStore(source, tmp_path / "cache", budget_bytes=1500)
    store.ensure("a")
    holder = subprocess.Popen(
        [sys.executable, "-c", PIN_AND_WAIT, str(source.root), str(tmp_path / "cache")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"pinned\n"
        age(store, "a", 100)
        store.ensure("b")
        assert sorted(e.name for e in store.entries()) == ["a", "b"]
    finally:
        holder.communicate(b"bye\n", timeout=30)
    assert store.evict() == ["a"]


PIN_AND_WAIT = """
import sys
from pathlib import Path
from worker_image.model_store import DirectorySource, ModelStore
store = ModelStore(DirectorySource(Path(sys.argv[1])), Path(sys.argv[2]), 1500)
store.pin("a")
print("pinned", flush=True)
sys.stdin.readline()
"""


def test_staging_left_by_a_dead_process_is_cleaned_up(tmp_path: Path, source: CountingSource) -> None:
    staging = tmp_path / "cache" / ".staging"
    dead = staging / "999999999.0f0f.new.a"
    mine = staging / f"{os.getpid()}.0f0f.new.a"
    for folder in (dead, mine):
        folder.mkdir(parents=True)
    ModelStore(source, tmp_path / "cache", budget_bytes=10**6)
    assert not dead.exists()
    assert mine.exists()


def test_a_worker_starts_with_every_model_its_settings_name_or_none_within_its_budget(tmp_path: Path) -> None:
    store = ModelStore(DirectorySource(REPO / "triton_models"), tmp_path / "cache", budget_bytes=10**6)
    available = store.source.models
    everything = Settings.from_env({})
    assert startup_models(everything, available) == ["gpu-sim", "minilm", CHAT_MODEL, "tiny-gpt2"]

    def unasked() -> list[str]:
        raise AssertionError("a worker told its models does not list the store")

    assert startup_models(Settings.from_env({"SYNAPSE_WORKER_MODELS": "gpu-sim"}), unasked) == ["gpu-sim"]
    assert startup_models(Settings.from_env({"SYNAPSE_WORKER_MODELS": "none"}), unasked) == []
    two = Settings.from_env({"SYNAPSE_WORKER_MODEL_BUDGET": "2"})
    assert startup_models(two, available) == ["gpu-sim", "minilm"]  # a third would unload the first


def test_model_store_settings_are_read_from_the_environment() -> None:
    tuned = Settings.from_env({"SYNAPSE_MODEL_CACHE_BYTES": "1000", "SYNAPSE_WORKER_MODEL_BUDGET": "1"})
    assert (tuned.model_cache_bytes, tuned.worker_model_budget) == (1000, 1)
    assert Settings.from_env(tuned.to_env()) == tuned
