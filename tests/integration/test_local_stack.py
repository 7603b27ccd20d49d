"""`synapse up` (what `make up` runs): starts everything, serves a job, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.models import shared_checkpoints
from tests.processes import REPO, free_port, port_open, start, synapse, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment carries marker (every child of `up` inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def banner_commands(banner: str) -> list[str]:
    """The curl commands the banner shows, each with its continuation lines."""
    commands: list[str] = []
    lines = iter(banner.splitlines())
    for line in lines:
        if not line.startswith("  curl "):
            continue
        command = line.strip()
        while command.endswith("\\") or command.count("'") % 2:  # a continuation, or a quote still open
            command += "\n" + next(lines)  # as shown: bash reads the backslash-newline and the quotes
        commands.append(command)
    return commands


def run_banner_examples(banner: str) -> list[str]:
    """Runs them in order as a user would paste them, a placeholder (`<jobId>`, `<id>`) filled from the
    answer before it; each must answer JSON, or SSE for a stream, and no error."""
    outputs: list[str] = []
    for shown in banner_commands(banner):
        command = shown
        for placeholder, field in (("<jobId>", "jobId"), ("<id>", "id")):
            if placeholder in command:
                command = command.replace(placeholder, str(json.loads(outputs[-1])[field]))
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=120, check=True
        )
        body = done.stdout.strip()
        datas = [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]
        parsed = [json.loads(d) for d in datas if d != "[DONE]"] if datas else [json.loads(body)]
        assert parsed and not any(p.get("error") for p in parsed), f"{command}\n{body[-2000:]}"
        outputs.append(body)
    return outputs


def post_json(url: str, body: dict[str, object], key: str) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "x-api-key": key}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


def get_json(url: str, key: str) -> dict[str, object]:
    with urllib.request.urlopen(
        urllib.request.Request(url, headers={"x-api-key": key}), timeout=30
    ) as response:
        return dict(json.load(response))


def test_up_serves_a_job_and_ctrl_c_stops_every_process(tmp_path: Path):
    services = ("api", "redis", "http", "grpc", "metrics", "manager")
    monitoring = ("prometheus", "pushgateway", "redis_exporter")
    ports = {name: free_port() for name in services + monitoring}
    marker = f"synapse-up-test-{os.getpid()}-{time.time_ns()}"
    env = {
        "SYNAPSE_API_PORT": str(ports["api"]),
        "SYNAPSE_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
        "SYNAPSE_TRITON_HTTP_PORT": str(ports["http"]),
        "SYNAPSE_TRITON_GRPC_PORT": str(ports["grpc"]),
        "SYNAPSE_TRITON_METRICS_PORT": str(ports["metrics"]),
        "SYNAPSE_METRICS_PORT": str(ports["manager"]),
        "SYNAPSE_PROMETHEUS_PORT": str(ports["prometheus"]),
        "SYNAPSE_PUSHGATEWAY_PORT": str(ports["pushgateway"]),
        "SYNAPSE_REDIS_EXPORTER_PORT": str(ports["redis_exporter"]),
        "SYNAPSE_STATE_DIR": str(tmp_path / "state"),
        "SYNAPSE_MODEL_REPOSITORY": str(REPO / "triton_models"),
        # The checkpoints the other stacks built (SmolLM2's conversion takes most of a minute): what is
        # under test is the processes `up` starts, serves with and stops; the build has tests of its own.
        "SYNAPSE_CHECKPOINT_DIR": str(shared_checkpoints()),
        "SYNAPSE_UP_TEST_MARKER": marker,
    }
    log = tmp_path / "up.log"
    up = start(synapse("up"), env, log)
    try:
        wait_until(lambda: "Synapse is up" in log.read_text(), 300, "synapse up", up, log)
        banner = log.read_text()
        key = re.search(r"API key\s+(\S+)", banner)
        assert key is not None, banner
        api = f"http://127.0.0.1:{ports['api']}"
        assert api in banner and "curl" in banner
        assert len(run_banner_examples(banner)) == len(banner_commands(banner)) >= 6
        prometheus = f"http://127.0.0.1:{ports['prometheus']}"
        assert prometheus in banner
        with urllib.request.urlopen(f"{prometheus}/-/ready", timeout=10) as ready:
            assert ready.status == 200
        exporter = f"http://127.0.0.1:{ports['redis_exporter']}/metrics"
        assert exporter in banner
        with urllib.request.urlopen(exporter, timeout=10) as exposition:
            assert "\nredis_up 1\n" in exposition.read().decode(), "the exporter reads the stack's Redis"

        job = post_json(f"{api}/async-infer", {"model": "gpu-sim", "prompt": "The three"}, key.group(1))
        done = get_json(f"{api}/results/{job['jobId']}?wait=20", key.group(1))
        assert done["status"] == "COMPLETED"
        assert done["result"] == {
            "text": "eerht ehT",
            "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
        }
        assert processes_with(marker), "the stack's processes should carry the marker"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(90)

    assert up.returncode == 0, log.read_text()[-3000:]
    wait_until(lambda: not processes_with(marker), 10, "every process of the stack to exit")
    assert not any(port_open(port) for port in ports.values())
