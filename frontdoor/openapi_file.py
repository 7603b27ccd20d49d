"""Writes the OpenAPI spec of the front door's routes: `python -m frontdoor.openapi_file docs/openapi.json`.

A module of its own so that the spec helpers (`frontdoor.openapi`), which the routes import, never
import the handler back.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from frontdoor.handler import build_app
from frontdoor.openapi import spec_text


def main(argv: Sequence[str] | None = None) -> None:
    """Writes the spec to the file named on the command line, or to stdout."""
    args = list(sys.argv[1:] if argv is None else argv)
    text = spec_text(build_app())
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
