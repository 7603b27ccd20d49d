"""The LLM benchmark's plot: output tokens/s and TTFT P50 against concurrency, one line per path."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, ScalarFormatter

from bench.llm_figures import LlmRow


def by_concurrency(path: Path, rows: Sequence[LlmRow], order: Sequence[str], title: str) -> Path:
    fig, (tps, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    levels = sorted({r.concurrency for r in rows})
    for index, label in enumerate(order):
        mine = sorted((r for r in rows if r.path == label), key=lambda r: r.concurrency)
        if not mine:
            continue
        x = [r.concurrency for r in mine]
        style = {"color": f"C{index}", "marker": "o", "label": label}
        tps.plot(x, [r.output_tps for r in mine], **style)
        ttft.plot(x, [r.ttft_p50_ms if r.ttft_p50_ms > 0 else math.nan for r in mine], **style)
        for ax, figure in ((tps, "output_tps"), (ttft, "ttft_p50_ms")):
            failed = [r for r in mine if r.errors]  # circled: some of its requests failed
            ax.scatter([r.concurrency for r in failed], [getattr(r, figure) for r in failed], s=160,
                       facecolors="none", edgecolors="red", linewidths=1.2, zorder=3)  # fmt: skip
    for ax in (tps, ttft):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(levels))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("concurrent clients")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    tps.set_ylabel("output tokens/s")
    tps.set_ylim(bottom=0)
    ttft.set_yscale("log")
    ttft.set_ylabel("time to first token, P50 (ms)")
    fig.suptitle(f"{title} (red circle: some requests failed)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
