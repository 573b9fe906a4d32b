"""The README and docs/ as a reader uses them: the commands marked runnable run as written,
every relative link and #anchor leads somewhere, and the reference pages name exactly what
the code has (the RPC methods and their error codes, every setting and its default)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from coach.settings import Settings, setting_names
from coach.surfaces.rpc import ERRORS, METHODS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "<!-- runnable -->"
"""The line just above a fenced ``sh`` block that this test runs."""
LOCAL = {".git", ".venv", ".env", ".demo", ".voice-demo"}
"""What a checkout holds of its own (never in git): not shown to the commands run."""
RUN_TIMEOUT = 300
"""Seconds one block may take before it counts as hanging (`make demo`: two chats)."""
FENCE = re.compile(r"^(```+|~~~+)\s*(.*)$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int
    """The line of its opening fence, from 1."""
    info: str
    text: str
    runnable: bool

    def __str__(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    n = 0
    while n < len(lines):
        opening = FENCE.match(lines[n])
        if opening is None:
            n += 1
            continue
        fence, info = opening.groups()
        end = next(k for k in range(n + 1, len(lines)) if lines[k].startswith(fence))
        runnable = n > 0 and lines[n - 1].strip() == RUNNABLE
        found.append(Block(path, n + 1, info, "\n".join(lines[n + 1 : end]) + "\n", runnable))
        n = end + 1
    return found


def prose(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced blocks, numbered from 1."""
    inside = {k for b in blocks(path) for k in range(b.line, b.line + b.text.count("\n") + 2)}
    return [(n, x) for n, x in enumerate(path.read_text().splitlines(), 1) if n not in inside]


def slugs(path: Path) -> set[str]:
    """The #anchors GitHub gives the headings of a Markdown file."""
    seen: dict[str, int] = {}
    for _, line in prose(path):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def table(path: Path, heading: str) -> list[list[str]]:
    """The body rows of every Markdown table whose header starts with ``heading``."""
    rows: list[list[str]] = []
    header = False
    for _, line in prose(path):
        if not line.startswith("|"):
            header = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] == heading:
            header = True
        elif header and not set(line) <= set("|-: "):
            rows.append(cells)
    return rows


RUNNABLE_BLOCKS = [b for path in DOCS for b in blocks(path) if b.runnable]


def test_a_runnable_mark_stands_just_above_an_sh_block() -> None:
    for path in DOCS:
        marked = {n + 1 for n, x in prose(path) if x.strip() == RUNNABLE}
        opened = {b.line for b in blocks(path) if b.runnable and b.info == "sh"}
        assert marked == opened, f"{rel(path)}: a {RUNNABLE} line is not just above ```sh"
    # The newcomer's first command without a model is one of them.
    assert [b.text for b in RUNNABLE_BLOCKS if b.path.name == "README.md"] == ["make demo\n"]


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    readme = ROOT / "README.md"
    first = blocks(readme)[0]
    commands = [line.split("#")[0].strip() for line in first.text.splitlines()]
    assert (first.info, commands) == ("sh", ["make run", "make test"])
    # Read in five minutes; the reference is in docs/.
    assert len(readme.read_text().splitlines()) <= 250


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A scratch copy of the checkout (links to its files) with the installed virtualenv
    as its ``.venv``: what a block writes stays there, and no local ``.env`` is read."""
    work = tmp_path / "checkout"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in LOCAL:
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return work


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=str)
def test_a_runnable_block_runs_as_written(block: Block, checkout: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COACH_", "OPENAI_", "LIVEKIT_", "MAKE", "MFLAGS"))
    }
    env |= {
        "HOME": str(home),  # the default database and secret key land in here
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        # The virtualenv is installed already: make must not install into it again.
        "MAKEFLAGS": "STAMP=",
    }
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=checkout,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    said = f"{block}:\n{block.text}--- stdout\n{done.stdout[-3000:]}--- stderr\n{done.stderr}"
    assert done.returncode == 0, said
    assert "Traceback" not in done.stderr, said


@pytest.mark.parametrize("path", DOCS, ids=rel)
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for n, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"line {n}: {target} (no such file)")
            elif anchor and anchor not in slugs(linked):
                broken.append(f"line {n}: {target} (no such heading in {rel(linked)})")
    assert not broken, f"{rel(path)}: " + "; ".join(broken)


def test_the_readme_sections_and_docs_the_code_names_exist() -> None:
    named: list[tuple[Path, str]] = []
    sources = [*ROOT.glob("src/coach/**/*.py"), *ROOT.glob("web/src/**/*.ts*")]
    sources += [*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]
    sources += [ROOT / name for name in (".env.example", "Makefile", "docker-compose.yml")]
    for source in sources:
        if source == Path(__file__):
            continue  # this test's own patterns
        text = source.read_text()
        named += [(source, f"README.md#{s}") for s in re.findall(r'README: "([^"]+)"', text)]
        named += [(source, d) for d in re.findall(r"\bdocs/[\w-]+\.md\b", text)]
    assert (ROOT / "web/src/livekitRoom.ts", "README.md#Running with LiveKit") in named
    readme = slugs(ROOT / "README.md")
    for source, name in named:
        file, _, section = name.partition("#")
        assert (ROOT / file).exists(), f"{rel(source)} names {file}, which does not exist"
        slug = re.sub(r"[^\w\- ]", "", section.lower()).replace(" ", "-")
        assert not section or slug in readme, f"{rel(source)} names {name!r}: no such section"


def test_rpc_md_documents_exactly_the_registered_methods_and_error_codes() -> None:
    path = ROOT / "docs" / "rpc.md"
    methods = [row[0].strip("`") for row in table(path, "method")]
    assert sorted(methods) == sorted(METHODS)
    codes = [int(row[0]) for row in table(path, "code")]
    assert sorted(codes) == sorted(ERRORS)


def env_names(cell: str) -> list[str]:
    return re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)


def test_configuration_md_documents_exactly_the_settings_coach_reads() -> None:
    rows = table(ROOT / "docs" / "configuration.md", "variable")
    documented = [name for row in rows for name in env_names(row[0])]
    assert len(documented) == len(set(documented)), "a setting is documented twice"
    assert set(documented) == setting_names()


def shown(value: object) -> str:
    """A default as the docs write it: 10.0 as 10, 100_000 as 100000."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_configuration_md_gives_each_plain_default_as_the_code_has_it() -> None:
    by_name: dict[str, FieldInfo] = {}
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names = getattr(alias, "choices", [alias]) if alias else [f"COACH_{field_name.upper()}"]
        by_name |= {str(name): field for name in names}
    checked = 0
    for row in table(ROOT / "docs" / "configuration.md", "variable"):
        name, default = env_names(row[0])[0], row[1]
        field = by_name[name]
        if default.startswith("unset"):
            assert field.default is None and field.default_factory is None, name
        elif re.fullmatch(r"`[^`]*`", default):
            assert default.strip("`") == shown(field.default), name
        else:  # said in words: "the LLM's", "a fresh temporary directory"
            continue
        checked += 1
    assert checked >= 20  # most defaults are plain values, and checked
