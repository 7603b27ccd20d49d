"""Reading the project's Markdown: its pages, their links and headings, and the examples they mark.

An example that runs against the local stack is a fenced `sh` or `python` block right after the line
`<!-- example: local -->`; a plain block right after `<!-- example: output -->` is what the example
before it prints. In a shell example, each run of command lines is a step, and the comment lines right
under it (starting `# {`, `# [`, `# data:`, `# event:`, `# id:` or `# HTTP/`) show its output: the
tests check the output's shape against them (its JSON keys, its SSE events and headers), not its values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import REPO

MARKER = re.compile(r"^<!--\s*example:\s*(\w+)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target): the text may wrap onto the next line; images and reference links are not used here.
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# What a block that talks to the local stack contains: its address, the examples' $API, an OpenAI client.
TARGETS_LOCAL_STACK = re.compile(r"\$\{?API\b|127\.0\.0\.1:80\d\d|localhost:\d+|OpenAI\(")
SHELL_LANGS = ("sh", "bash", "shell", "console")
OUTPUT_START = re.compile(r"^(\{|\[|data:|event:|id:|HTTP/)")
HEADER_LIKE = re.compile(r"^[A-Za-z][\w-]*:\s")
JSON_KEY = re.compile(r'"(\w+)"\s*:')


def pages() -> list[Path]:
    """README.md and every page in docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str = ""  # "local", "output", or "" when unmarked
    output: Block | None = None  # for a local example: the output block that follows it

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, in order, each with the marker on the line just before it."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, lang = opening.group(1), opening.group(2).lower()
        start = index
        index += 1
        body = []
        while index < len(lines) and not lines[index].startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1  # past the closing fence
        marked = MARKER.match(lines[start - 1]) if start > 0 else None
        found.append(Block(path, start + 1, lang, "\n".join(body), marked.group(1) if marked else ""))
    last_local: Block | None = None
    for block in found:
        if block.marker == "local":
            last_local = block
        elif block.marker == "output" and last_local is not None and last_local.output is None:
            last_local.output = block
    return found


def outside_fences(path: Path) -> str:
    """The page with its fenced blocks blanked out: a `#` line in a block is no heading, a `[x](y)`
    in one no link."""
    kept, fence = [], ""
    for line in path.read_text().splitlines():
        opening = FENCE.match(line)
        if fence:
            if line.startswith(fence):
                fence = ""
            kept.append("")
        elif opening:
            fence = opening.group(1)
            kept.append("")
        else:
            kept.append(line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{2}|(?<!\w)[*_]|[*_](?!\w)", "", text)  # emphasis, not snake_case
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page's headings make; a repeated heading's get -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(path).splitlines():
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def links(path: Path) -> list[str]:
    """The targets of the page's Markdown links, outside code blocks and inline code."""
    return [match.group(2) for match in LINK.finditer(INLINE_CODE.sub("", outside_fences(path)))]


@dataclass
class Step:
    """Command lines that run together, and the output the page shows under them."""

    line: int  # in the page, 1-based
    command: str
    expected: list[str] = field(default_factory=list)


def steps(block: Block) -> list[Step]:
    """A shell example's steps; a Python example is one step (its output is its output block's)."""
    if block.lang == "python":
        return [Step(block.line + 1, block.text)]
    found: list[Step] = []
    command: list[str] = []
    reading_output = False
    for number, line in enumerate(block.text.splitlines(), start=block.line + 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped[1:]
            shown = text[1:] if text.startswith(" ") else text
            if command:
                found.append(Step(number - len(command), "\n".join(command)))
                command = []
                reading_output = bool(OUTPUT_START.match(shown))
            elif reading_output:
                reading_output = (
                    shown in ("", "...")
                    or text.startswith("  ")
                    or bool(OUTPUT_START.match(shown) or HEADER_LIKE.match(shown))
                )
            if reading_output and found:
                found[-1].expected.append(shown)
        elif not stripped:
            if command:
                found.append(Step(number - len(command), "\n".join(command)))
                command = []
            reading_output = False
        else:
            command.append(line)
            reading_output = False
    if command:
        found.append(Step(block.line + 1 + len(block.text.splitlines()) - len(command), "\n".join(command)))
    return found


def shape_problems(expected: list[str], actual: str) -> list[str]:
    """How the output differs in shape from what the page shows: JSON keys it lacks, SSE events or
    headers with fixed values it lacks, another HTTP status. Values that vary (ids, numbers, times,
    generated text) are not compared."""
    problems = []
    missing = sorted(set(JSON_KEY.findall("\n".join(expected))) - set(JSON_KEY.findall(actual)))
    if missing:
        problems.append(f"the output has no key {', '.join(missing)}")
    actual_lines = [line.strip().lower() for line in actual.splitlines()]
    for shown in expected:
        status = re.match(r"^HTTP/\S+\s+(\d{3})\b", shown)
        if status:
            if not any(re.match(rf"http/\S+\s+{status.group(1)}\b", line) for line in actual_lines):
                problems.append(f"the status is not {status.group(1)}")
            continue
        field_line = re.match(r"^([A-Za-z][\w-]*):\s*(\S+)\s*$", shown)
        # A field with a fixed value (event: delta, data: [DONE], Idempotent-Replayed: true); an id, a
        # number or JSON varies, and JSON is checked by its keys above.
        if field_line and re.fullmatch(r"[A-Za-z\[\]_-]+", field_line.group(2)):
            wanted = f"{field_line.group(1)}: {field_line.group(2)}".lower()
            if wanted not in actual_lines:
                problems.append(f"no line {shown!r} in the output")
    return problems


NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def masked(text: str) -> list[str]:
    """The lines of a printed output with every number replaced: their shape and their order."""
    return [NUMBER.sub("N", line.rstrip()) for line in text.strip().splitlines()]
