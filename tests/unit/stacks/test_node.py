"""The CDK runs on the wheel's Node 24, whatever Node the machine has, and no jsii banner reaches the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stacks.node import NODE, link


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_the_wheel_brings_node_24_lts() -> None:
    assert run([str(NODE), "--version"]).stdout.startswith("v24.")


def test_preflight_help_prints_no_jsii_banner() -> None:
    # As a shell runs it: no JSII_NODE, whatever node PATH finds first (Debian's 20 on this machine).
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_")}
    done = run([str(Path(sys.executable).with_name("synapse")), "preflight", "--help"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: synapse preflight")
    printed = (done.stdout + done.stderr).splitlines()
    assert [line for line in printed if line.startswith("b'")] == []


def test_linked_npm_and_npx_run_on_the_wheels_node(tmp_path: Path) -> None:
    link(tmp_path)
    env = dict(os.environ, PATH=os.pathsep.join([str(tmp_path), os.environ["PATH"]]))
    assert run([str(tmp_path / "node"), "-p", "process.version"]).stdout.startswith("v24.")
    npm = run([str(tmp_path / "npm"), "--version"], env)
    assert npm.returncode == 0, npm.stderr
    # npx runs a command with npm's environment; the node it finds is the linked one.
    npx = run([str(tmp_path / "npx"), "--no-install", "--", "node", "-p", "process.version"], env)
    assert npx.stdout.startswith("v24."), npx.stderr


def test_linking_again_replaces_the_links(tmp_path: Path) -> None:
    (tmp_path / "node").symlink_to("/usr/bin/node")
    link(tmp_path)
    assert (tmp_path / "node").resolve() == NODE.resolve()
