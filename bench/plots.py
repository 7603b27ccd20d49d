"""The report's PNG plots (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from bench.measure import SweepPoint, pct
from planner.simulator import Floats

SLO_MS = 250.0


def latency_cdf(path: Path, series: Mapping[str, Floats]) -> Path:
    """End-to-end latency CDF per system, log-scaled, with the SLO marked."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, values in series.items():
        if len(values) == 0:
            continue
        ordered = np.sort(values)
        ax.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=name)
    ax.axvline(SLO_MS, color="grey", linestyle="--", linewidth=1, label="250 ms SLO")
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("share of jobs")
    ax.set_title("Latency CDF at the same offered load")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def load_sweep(path: Path, points: Sequence[SweepPoint], curve: Mapping[str, Sequence[float]]) -> Path:
    """P50/P99 and busy share against offered load: measured points over the simulator's curve."""
    fig, (lat, busy) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates = [p.rate for p in points]
    lat.plot(curve["rate"], curve["p50"], color="C0", alpha=0.5, label="simulated P50")
    lat.plot(curve["rate"], curve["p99"], color="C1", alpha=0.5, label="simulated P99")
    measured = [p.typical.measured.server_ms for p in points]
    lat.scatter(rates, [pct(ms, 50) for ms in measured], color="C0", label="measured P50")
    lat.scatter(rates, [pct(ms, 99) for ms in measured], color="C1", label="measured P99")
    lat.axhline(SLO_MS, color="grey", linestyle="--", linewidth=1)
    lat.set_xlabel("offered load (jobs/s)")
    lat.set_ylabel("latency (ms)")
    lat.set_ylim(bottom=0)
    lat.legend(fontsize=8)
    lat.grid(True, alpha=0.3)
    busy.plot(curve["rate"], [100 * b for b in curve["busy"]], color="C2", alpha=0.5, label="simulated")
    busy.scatter(rates, [100 * (p.typical.measured.busy or 0) for p in points], color="C2", label="measured")
    busy.set_ylim(0, 105)
    busy.set_xlabel("offered load (jobs/s)")
    busy.set_ylabel("worker busy (%)")
    busy.legend(fontsize=8)
    busy.grid(True, alpha=0.3)
    fig.suptitle("One worker, T(b) = 100 ms for b <= 100")
    return _save(fig, path)


def pool_timeline(
    path: Path, samples: Sequence[tuple[float, int]], done: Sequence[tuple[float, int]]
) -> Path:
    """Workers READY and jobs completed against time since the burst."""
    fig, ax = plt.subplots(figsize=(8, 4))
    if samples:
        t, n = zip(*samples, strict=True)
        ax.step(t, n, where="post", color="C0", label="workers READY")
    ax.set_xlabel("seconds since the burst")
    ax.set_ylabel("workers")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    other = ax.twinx()
    if done:
        t2, c = zip(*done, strict=True)
        other.plot(t2, c, color="C1", label="jobs completed")
    other.set_ylabel("jobs completed")
    fig.legend(loc="upper left", fontsize=8)
    ax.set_title("Burst from zero: pool size over time")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
