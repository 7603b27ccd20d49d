"""aiperf, NVIDIA's LLM benchmarking tool, as the LLM benchmark's load generator and timer.

aiperf pins its own versions of pydantic's neighbours, rich, pyzmq and prometheus-client, so it lives
in a virtual environment of its own under .synapse/, installed on first use with a pinned version,
and runs as a command. Each run writes its exports to one folder; bench.llm_figures reads them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.llm_prompts import QUESTIONS
from bench.stack import REPO

VERSION = "0.13.0"
VENV = REPO / ".synapse" / "aiperf" / f"venv-{VERSION}"
INSTALL_TIMEOUT_S = 900
# Environment that would turn the local tokenizer folder into a hub lookup (aiperf 0.13 refuses a local
# path under HF_HUB_OFFLINE=1); a local path never reaches a hub, so they are left unset.
HUB_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
GRACE_S = 30.0


@dataclass(frozen=True)
class Prompts:
    """What every request asks: the questions of bench.llm_prompts, each as one user message, sent in
    the dataset's order (again from the first when a run asks for more), each answer capped at
    `max_tokens` and otherwise as long as the model makes it."""

    dataset: Path  # bench.llm_prompts.write_dataset's JSONL
    max_tokens: int
    seed: int = 1

    def describe(self) -> str:
        return (
            f"{len(QUESTIONS)} short everyday questions ({QUESTIONS[0]!r}, {QUESTIONS[1]!r}, ...; "
            "`bench/llm_prompts.py`), one user message each, sent in a fixed order (aiperf's "
            "`--custom-dataset-type single_turn`, sequential), no output length asked for: each answer "
            f"runs to the model's end of turn, `max_completion_tokens` {self.max_tokens} being only a cap"
        )


def executable() -> Path:
    return VENV / "bin" / "aiperf"


def ensure_installed() -> Path:
    """aiperf's command, installing the pinned version into its own environment the first time."""
    command = executable()
    stamp = VENV / ".installed"
    if command.exists() and stamp.exists():
        return command
    print(f"bench: installing aiperf {VERSION} into {VENV} (once; about a minute)", flush=True)
    shutil.rmtree(VENV, ignore_errors=True)
    VENV.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter the project's venv runs on
    subprocess.run([base, "-m", "venv", str(VENV)], check=True, timeout=INSTALL_TIMEOUT_S)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, f"aiperf=={VERSION}"], check=True, timeout=INSTALL_TIMEOUT_S)
    stamp.write_text(VERSION + "\n")
    return command


@dataclass(frozen=True)
class AiperfRun:
    """One closed-loop run against an OpenAI-compatible chat endpoint, streaming."""

    url: str
    model: str
    api_key: str
    tokenizer: Path
    concurrency: int
    requests: int
    prompts: Prompts
    warmup: int = 0
    # A request waits for a place among the engine's sequences: at 64 clients, for half the run.
    timeout_s: float = 300.0
    # A path slower than planned stops sending after this long; what is in flight gets GRACE_S more.
    max_s: float = 240.0

    def argv(self, command: Path, artifacts: Path) -> list[str]:
        p = self.prompts
        # A rate well above what the path can serve, capped by --concurrency: a closed loop of that many
        # clients. With --concurrency alone, aiperf 0.13's timing process spins a core.
        rate = 20.0 * self.concurrency
        argv = [
            str(command), "profile", "--model", self.model, "--url", self.url, "--endpoint-type", "chat",
            "--streaming", "--api-key", self.api_key, "--tokenizer", str(self.tokenizer),
            "--input-file", str(p.dataset), "--custom-dataset-type", "single_turn",
            "--dataset-sampling-strategy", "sequential", "--random-seed", str(p.seed),
            # Greedy, the same answer to a question on every path and in every run.
            "--extra-inputs", '{"temperature": 0.0}',
            "--concurrency", str(self.concurrency), "--request-rate", f"{rate:g}",
            "--arrival-pattern", "constant", "--request-count", str(self.requests),
            # The server's own token counts (end of turn included, as vLLM counts it).
            "--use-server-token-count", "--request-timeout-seconds", f"{self.timeout_s:g}",
            "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none", "--artifact-dir", str(artifacts),
        ]  # fmt: skip
        argv += ["--benchmark-duration", f"{self.max_s:g}", "--benchmark-grace-period", f"{GRACE_S:g}"]
        if self.warmup:
            argv += ["--warmup-request-count", str(self.warmup)]
        return argv


def run(spec: AiperfRun, artifacts: Path, *, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Runs aiperf; its console output goes to artifacts/console.log. A non-zero exit is not raised:
    aiperf exits 1 when every request failed, and the row then counts the errors."""
    command = ensure_installed()
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    scratch = artifacts / "scratch"
    env = {k: v for k, v in os.environ.items() if k not in HUB_SWITCHES}
    # Its memory-mapped dataset goes to the run's folder, not a new folder in /tmp per run, and no
    # dataset cache grows in ~/.cache.
    env |= {"AIPERF_DATASET_MMAP_BASE_PATH": str(scratch), "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false"}
    try:
        done = subprocess.run(
            spec.argv(command, artifacts), env=env, cwd=artifacts, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (artifacts / "console.log").write_text(done.stdout + done.stderr)
    return done
