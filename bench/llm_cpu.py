"""Where the machine's cores go while an LLM run is under load: CPU time of each process of the stack
(with its descendants: a worker's Triton and model stub are its children) and of the load generator,
sampled from /proc and read over the run's own window."""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from pathlib import Path
from types import TracebackType

LOAD_GENERATOR = "aiperf"


def _stat(pid: int) -> tuple[int, float]:
    """Parent pid and CPU seconds (its own and its reaped children's) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process with all its descendants. A descendant that exited
    counts in its parent's reaped time; one not yet reaped is lost, which a long-lived stack avoids."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stats[int(entry.name)] = _stat(int(entry.name))
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += stats.get(pid, (0, 0.0))[1]
            todo += children.get(pid, [])
        out[name] = total
    return out


class CpuSampler:
    """Samples the CPU time of the stack's processes, and of this process's other descendants (the
    load generator it runs), every `every_s`, on a thread; `cores` reads them over a window."""

    def __init__(self, stack: dict[str, int], every_s: float = 0.25) -> None:
        self._stack = stack
        self._every_s = every_s
        self._times: list[float] = []
        self._samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        found = tree_cpu({**self._stack, "": os.getpid()})
        everything = found.pop("")
        found[LOAD_GENERATOR] = everything - sum(found.values())
        self._times.append(time.time())
        self._samples.append(found)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def cores(self, start: float, end: float) -> dict[str, float]:
        """Mean cores each used from `start` to `end` (wall-clock seconds), between the nearest samples."""
        if end <= start or len(self._times) < 2:
            return {}
        first = max(0, bisect.bisect_right(self._times, start) - 1)
        last = min(len(self._times) - 1, bisect.bisect_left(self._times, end))
        span = self._times[last] - self._times[first]
        if span <= 0:
            return {}
        a, b = self._samples[first], self._samples[last]
        return {name: max(0.0, (b[name] - a[name]) / span) for name in b}
