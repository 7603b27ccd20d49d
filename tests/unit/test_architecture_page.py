"""The architecture page (docs/architecture.md) and the README's "Where the code runs" stay true to the code.

(a) Paths. Every path the architecture page or the README writes in backticks exists. A path is a
    backticked token of path characters (no spaces, no `<placeholder>`, `{id}` or `*`) that starts with a
    top-level entry of the repository (`manager/batch_runner.py`, `openai_api/`, `docker/manager.Dockerfile`,
    `app.py`), or a `.py` name under a heading that names a folder in backticks: there it is read from that
    folder (`batch_runner.py` under "### `manager/`: the workload manager"). A `.py` path with a folder
    that is neither (`frontdor/handler.py`) is reported too: it points nowhere a reader could follow.
(b) Redis keys. The page's key families are the first column of the table under its "Redis layout"
    heading: each a backticked `{synapse}:...` key, a `{name}` for each part that varies; what follows a
    `#` is not part of the key (Powertools appends `#<hash>` to an idempotency key's prefix). They must be
    exactly the keys contract/keys.py builds: every `PREFIX + "..."` and every f-string that starts with
    `{PREFIX}` there.
(c) Modules. Every product module (each .py file but `__init__.py` under the product packages and
    triton_backends/) is named on README.md or a page of docs/, in one of two ways:
    - its path from the repository root, anywhere on the page (`manager/batch_runner.py`);
    - its path from its top folder, in backticks, in a table row under a heading that names the folder in
      backticks (`batch_runner.py`, `providers/ecs.py` in a row under "### `manager/`: ...").
(d) Artefacts. In the tables that say what the artefacts hold (the README's under "Where the code runs",
    the page's under "The parts" and "Folders"), a row that names how an artefact is built
    (`stacks/bundling.py`, `docker/manager.Dockerfile`, `worker_image/Dockerfile`) names in backticks
    exactly the folders that artefact holds (`contract/`, ...): the Lambda asset's `LAMBDA_PACKAGES`, a
    Dockerfile's `COPY <folder>/ ...` lines; and each of those tables has such a row for every artefact.

Every check is a function of the texts it reads, so the self-tests below show each one failing on a
made-up page."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.imports import product_packages
from tests.markdown_docs import HEADING, outside_fences, pages
from tests.processes import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
README = REPO / "README.md"
KEYS_MODULE = REPO / "contract" / "keys.py"
# triton_backends/ holds Triton backends, not an importable package of the project (pyproject lists none).
MODULE_FOLDERS = (*product_packages(), "triton_backends")
LAMBDA_BUILD = "stacks/bundling.py"
DOCKERFILES = ("docker/manager.Dockerfile", "worker_image/Dockerfile")

BACKTICKED = re.compile(r"`([^`\n]+)`")
PATH_TOKEN = re.compile(r"^[\w.-]+(?:/[\w.-]+)*/?$")
FOLDER_TOKEN = re.compile(r"^([\w.-]+)/$")
PLACEHOLDER = re.compile(r"\{[^}]*\}")
CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    text: str
    headings: tuple[str, ...]  # the headings it sits under, outermost first

    @property
    def folders(self) -> set[str]:
        """The folders its headings name in backticks (`manager/`)."""
        return {
            m.group(1) for h in self.headings for t in BACKTICKED.findall(h) if (m := FOLDER_TOKEN.match(t))
        }

    @property
    def is_table_row(self) -> bool:
        return self.text.lstrip().startswith("|")


def lines_of(text: str) -> Iterator[Line]:
    """The page's lines outside fenced blocks, each with the headings above it (a heading ends at the next
    one of its level or higher)."""
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            stack = [(lvl, h) for lvl, h in stack if lvl < level] + [(level, heading.group(2))]
            continue
        yield Line(number, line, tuple(h for _, h in stack))


def page_text(path: Path) -> str:
    return outside_fences(path)


def top_level(root: Path) -> set[str]:
    return {entry.name for entry in root.iterdir() if not entry.name.startswith(".")}


# (a) paths


def path_problems(where: str, text: str, root: Path) -> list[str]:
    roots = top_level(root)
    problems = []
    for line in lines_of(text):
        for token in BACKTICKED.findall(line.text):
            if not PATH_TOKEN.match(token) or ("/" not in token and not token.endswith(".py")):
                continue
            first = token.split("/", 1)[0]
            if first in roots:
                if not (root / token).exists():
                    problems.append(f"{where}:{line.number} names `{token}`, which does not exist")
            elif token.endswith(".py"):
                folders = sorted(line.folders)
                if not folders:
                    if "/" in token:
                        problems.append(
                            f"{where}:{line.number} names `{token}`, which is no path from the repository "
                            "root and sits under no folder's heading: write its path from the repository root"
                        )
                elif not any((root / folder / token).exists() for folder in folders):
                    places = " or ".join(f"{folder}/{token}" for folder in folders)
                    problems.append(f"{where}:{line.number} names `{token}`, but there is no {places}")
    return problems


# (b) Redis keys


def family(key: str) -> str:
    """A key's family: `{synapse}:job:{id}` -> `job:{}`; what follows `#` is dropped."""
    return PLACEHOLDER.sub("{}", key.removeprefix("{synapse}:").split("#", 1)[0])


def page_key_families(text: str) -> dict[str, int]:
    """The key families of the table under the "Redis layout" heading (its first column), with their lines."""
    found: dict[str, int] = {}
    for line in lines_of(text):
        if not line.is_table_row or not any("Redis layout" in h for h in line.headings):
            continue
        first_cell = CELL_SPLIT.split(line.text.strip().strip("|"))[0]
        for token in BACKTICKED.findall(first_cell):
            if token.startswith("{synapse}:"):
                found[family(token)] = line.number
    return found


def code_key_families(source: str) -> set[str]:
    """What contract/keys.py builds: `PREFIX + "name"` and f-strings starting with `{PREFIX}`."""

    def is_prefix(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == "PREFIX"

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and is_prefix(node.left):
            if isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
                found.add(node.right.value)
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.FormattedValue) and is_prefix(head.value):
                found.add(
                    "".join(
                        str(part.value) if isinstance(part, ast.Constant) else "{}"
                        for part in node.values[1:]
                    )
                )
    return found


def key_problems(where: str, text: str, keys_source: str) -> list[str]:
    on_page = page_key_families(text)
    in_code = code_key_families(keys_source)
    if not on_page:
        return [
            f"{where} has no key table under a 'Redis layout' heading (first column: `{{synapse}}:...` keys)"
        ]
    problems = [
        f"{where}:{number} lists `{{synapse}}:{name}`, a key contract/keys.py does not build: fix the key or "
        "remove the row"
        for name, number in sorted(on_page.items())
        if name not in in_code
    ]
    problems += [
        f"contract/keys.py builds `{{synapse}}:{name}`, which {where}'s Redis layout table does not list: "
        "add a row, the key in backticks in its first column"
        for name in sorted(in_code - on_page.keys())
    ]
    return problems


# (c) modules


def product_modules(root: Path, folders: Iterable[str]) -> list[str]:
    return sorted(
        path.relative_to(root).as_posix()
        for folder in folders
        for path in (root / folder).rglob("*.py")
        if path.name != "__init__.py"
    )


def unnamed_modules(modules: Iterable[str], texts: Iterable[str]) -> list[str]:
    """The modules no page names: by their path from the root anywhere, or from their folder in a table row
    under that folder's heading."""
    named: set[str] = set()
    relative: set[tuple[str, str]] = set()  # (folder, path from it)
    whole = []
    for text in texts:
        whole.append(text)
        for line in lines_of(text):
            if line.is_table_row:
                for token in BACKTICKED.findall(line.text):
                    relative.update((folder, token) for folder in line.folders)
    joined = "\n".join(whole)
    for module in modules:
        folder, _, rest = module.partition("/")
        if (folder, rest) in relative or re.search(rf"(?<![\w/.-]){re.escape(module)}(?!\w)", joined):
            named.add(module)
    return [module for module in modules if module not in named]


# (d) artefacts


def constant(path: Path, name: str) -> object:
    """A module-level constant, read from the file's syntax tree: importing stacks/ starts the CDK's Node
    runtime (as in tests/unit/test_layout.py)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path} sets no {name}")


def copied_folders(dockerfile: str, roots: set[str]) -> set[str]:
    """The repository's top-level folders a Dockerfile copies (`COPY name/ ...`; not `COPY --from`)."""
    return set(re.findall(r"^COPY\s+([\w.-]+)/\s", dockerfile, flags=re.MULTILINE)) & roots


def artefacts(root: Path) -> dict[str, set[str]]:
    """Each artefact's build file and the folders of ours it holds."""
    roots = top_level(root)
    found = {LAMBDA_BUILD: set(constant(root / LAMBDA_BUILD, "LAMBDA_PACKAGES"))}  # type: ignore[call-overload]
    for dockerfile in DOCKERFILES:
        found[dockerfile] = copied_folders((root / dockerfile).read_text(encoding="utf-8"), roots)
    return found


def artefact_problems(where: str, text: str, heading: str, held: dict[str, set[str]]) -> list[str]:
    """The table right under `heading` against what each artefact holds: a row that names an artefact's
    build file names, in backticks, exactly the folders that artefact holds."""
    rows = [
        line
        for line in lines_of(text)
        if line.is_table_row and line.headings and heading in line.headings[-1]
    ]
    if not rows:
        return [f"{where} has no table right under a heading '{heading}'"]
    problems, seen = [], set()
    for line in rows:
        tokens = BACKTICKED.findall(line.text)
        listed = {m.group(1) for token in tokens if (m := FOLDER_TOKEN.match(token))}
        for build in sorted(held.keys() & set(tokens)):
            seen.add(build)
            if listed != held[build]:
                holds = " + ".join(f"`{folder}/`" for folder in sorted(held[build]))
                problems.append(
                    f"{where}:{line.number} says the artefact of `{build}` holds {sorted(listed)}, but it "
                    f"holds {sorted(held[build])}: name exactly {holds} in that row"
                )
    problems += [
        f"{where}'s table under '{heading}' names no artefact built by `{build}`: add it to the row of the "
        "folder it runs, with the folders it holds in backticks"
        for build in sorted(held.keys() - seen)
    ]
    return problems


# The tests on the repository.

PAGES_CHECKED = {"docs/architecture.md": ARCHITECTURE, "README.md": README}


@pytest.mark.parametrize("name", sorted(PAGES_CHECKED))
def test_every_path_the_page_names_exists(name: str) -> None:
    problems = path_problems(name, page_text(PAGES_CHECKED[name]), REPO)
    assert not problems, "fix or remove these paths:\n" + "\n".join(problems)


def test_the_redis_layout_lists_exactly_the_keys_contract_keys_builds() -> None:
    problems = key_problems("docs/architecture.md", page_text(ARCHITECTURE), KEYS_MODULE.read_text("utf-8"))
    assert not problems, "\n".join(problems)


def test_every_product_module_is_named_on_a_page() -> None:
    modules = product_modules(REPO, MODULE_FOLDERS)
    assert len(modules) > 100, "the product's modules were not found"
    unnamed = unnamed_modules(modules, (page_text(page) for page in pages()))
    assert not unnamed, (
        "name each of these modules on a page: a row for it (`name.py` and its role) in the table under its "
        "folder's heading in docs/architecture.md, or its path from the repository root:\n"
        + "\n".join(unnamed)
    )


@pytest.mark.parametrize(
    ("name", "heading"),
    [
        ("README.md", "Where the code runs"),
        ("docs/architecture.md", "The parts"),
        ("docs/architecture.md", "Folders"),
    ],
)
def test_the_folder_tables_say_what_each_artefact_holds(name: str, heading: str) -> None:
    text = page_text(PAGES_CHECKED[name])
    problems = artefact_problems(name, text, heading, artefacts(REPO))
    assert not problems, "\n".join(problems)


def test_the_artefacts_are_read_from_their_build_files() -> None:
    held = artefacts(REPO)
    assert held[LAMBDA_BUILD] == {"contract", "openai_api", "frontdoor"}
    assert held["docker/manager.Dockerfile"] == {"contract", "openai_api", "manager"}
    assert {"contract", "worker_image", "triton_models", "triton_backends"} <= held["worker_image/Dockerfile"]


# Each check fails on a made-up page.

MADE_UP_KEYS = """
PREFIX = "{synapse}:"
WORKERS_KEY = PREFIX + "workers"
def job_key(job_id): return f"{PREFIX}job:{job_id}"
def idem(route): return f"{PREFIX}idem:{route}"
"""


def test_a_missing_path_is_found(tmp_path: Path) -> None:
    (tmp_path / "manager").mkdir()
    (tmp_path / "manager" / "service.py").write_text("")
    page = "\n".join(
        [
            "# Page",
            "`manager/service.py`, `manager/gone.py`, `POST /v1/files`, `<state>/x.py`, `text/plain`",
            "`orphan.py` (a file name alone is not checked outside a folder's heading), `nowhere/x.py`",
            "## `manager/`: the manager",
            "| `service.py` | ok |",
            "| `missing.py` | gone |",
        ]
    )
    assert path_problems("p.md", page, tmp_path) == [
        "p.md:2 names `manager/gone.py`, which does not exist",
        "p.md:3 names `nowhere/x.py`, which is no path from the repository root and sits under no "
        "folder's heading: write its path from the repository root",
        "p.md:6 names `missing.py`, but there is no manager/missing.py",
    ]


def test_a_key_missing_from_either_side_is_found() -> None:
    page = "\n".join(
        [
            "## Redis layout",
            "| key | type |",
            "| --- | --- |",
            "| `{synapse}:job:{id}` | hash |",
            "| `{synapse}:idem:{route}#{hash}` | string |",
            "| `{synapse}:gone:{id}` | list |",
            "## Other",
            "| `{synapse}:workers` | set |",
        ]
    )
    assert code_key_families(MADE_UP_KEYS) == {"workers", "job:{}", "idem:{}"}
    assert key_problems("p.md", page, MADE_UP_KEYS) == [
        "p.md:6 lists `{synapse}:gone:{}`, a key contract/keys.py does not build: fix the key or remove "
        "the row",
        "contract/keys.py builds `{synapse}:workers`, which p.md's Redis layout table does not list: "
        "add a row, the key in backticks in its first column",
    ]
    assert key_problems("p.md", "# Nothing", MADE_UP_KEYS)[0].startswith("p.md has no key table")


def test_an_unnamed_module_is_found() -> None:
    modules = ["manager/a.py", "manager/providers/b.py", "manager/c.py", "bench/c.py", "bench/d.py"]
    page = "\n".join(
        [
            "See manager/a.py.",
            "## `manager/`",
            "| `providers/b.py` | a row |",
            "`c.py` in prose does not count",
            "## `bench/`",
            "| `c.py` | a row |",
            "Not `manager/ab.py`, nor xbench/d.py.",
        ]
    )
    assert unnamed_modules(modules, [page]) == ["manager/c.py", "bench/d.py"]


def test_an_artefact_that_holds_other_folders_is_found() -> None:
    held = {"docker/m.Dockerfile": {"contract", "manager"}, "stacks/b.py": {"contract", "frontdoor"}}
    page = "\n".join(
        [
            "## Folders",
            "| folder | shipped as |",
            "| --- | --- |",
            "| `manager/` | the image (`docker/m.Dockerfile`): `contract/` + `frontdoor/` + `manager/` |",
        ]
    )
    assert artefact_problems("p.md", page, "Folders", held) == [
        "p.md:4 says the artefact of `docker/m.Dockerfile` holds ['contract', 'frontdoor', 'manager'], but "
        "it holds ['contract', 'manager']: name exactly `contract/` + `manager/` in that row",
        "p.md's table under 'Folders' names no artefact built by `stacks/b.py`: add it to the row of the "
        "folder it runs, with the folders it holds in backticks",
    ]
    dockerfile = "COPY a/ a/\nCOPY --from=build /x /x\nCOPY b/r.txt /tmp/\nCOPY c/ /opt/\n"
    assert copied_folders(dockerfile, {"a", "b", "c"}) == {"a", "c"}
    nested = "## Folders\n### `manager/`\n| `docker/m.Dockerfile`: `contract/` |"
    assert artefact_problems("p.md", nested, "Folders", held) == [
        "p.md has no table right under a heading 'Folders'"
    ]
