"""The package's shape: imports point one way, and what is typed against the repository
protocol loads no database library."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The coach modules ``path`` imports at any depth (function bodies included)."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.level and node.module else node.module
            target = target or base
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("coach")}


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = {t for t in _imports(path) if t in modules and t != name}
        # A module that imports its own package's __init__ is not a cycle of concern.
        graph[name] = {t for t in targets if not name.startswith(f"{t}.")}
    return graph


def test_no_import_cycles_between_modules() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_contract_and_the_agents_load_no_database_library() -> None:
    code = (
        "import sys, coach.store, coach.agents, coach.conversation.userdata,"
        " coach.conversation.recorder;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic', "
        "'aiosqlite', 'asyncpg'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_the_package_offers_its_public_names_without_importing_them() -> None:
    """``import coach`` (every command does it) loads none of the agent framework; each
    public name is imported when first used, and is the object its module defines."""
    import subprocess
    import sys

    code = (
        "import sys, coach\n"
        "assert 'livekit.agents' not in sys.modules and 'sqlalchemy' not in sys.modules\n"
        "import importlib\n"
        "for name in coach.__all__:\n"
        "    if name != '__version__':\n"
        "        obj = getattr(coach, name)\n"
        "        assert obj is getattr(importlib.import_module(obj.__module__), name), name\n"
        "print(coach.__version__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().count(".") == 2  # a version such as 0.1.0


@pytest.mark.parametrize(
    ("modules", "heavy"),
    [
        # --help: the parser and the default database's path.
        ("coach.__main__", ("pydantic", "sqlalchemy", "aiohttp", "livekit")),
        # Every check of settings at start: web's, token's and the worker commands'.
        (
            "coach.settings, coach.surfaces.web_checks, coach.surfaces.token,"
            " coach.surfaces.livekit_cli",
            ("sqlalchemy", "aiohttp", "livekit"),
        ),
    ],
)
def test_the_start_up_checks_load_no_heavy_library(modules: str, heavy: tuple[str, ...]) -> None:
    """What ``python -m coach`` reads before a command runs (``tests/surfaces/
    test_startup_imports.py`` runs the commands themselves)."""
    code = f"import json, sys, {modules}; print(json.dumps([m for m in sys.modules]))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = {name.split(".")[0] for name in json.loads(out.stdout)}
    assert not loaded & set(heavy)


def _all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports at any depth, absolute names only."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_nothing_outside_the_tests_imports_them() -> None:
    root = SRC.parent
    leaning = [
        str(path.relative_to(root))
        for folder in (SRC, root / "bench", root / "migrations")
        for path in folder.rglob("*.py")
        if any(name == "tests" or name.startswith("tests.") for name in _all_imports(path))
    ]
    assert leaning == []


def test_only_the_demo_command_imports_the_testing_fakes() -> None:
    graph = _graph()
    users = {
        name
        for name, targets in graph.items()
        if not name.startswith("coach.testing")
        and any(t == "coach.testing" or t.startswith("coach.testing.") for t in targets)
    }
    assert users == {"coach.__main__"}


def test_no_test_imports_a_conftest() -> None:
    tests = SRC.parent / "tests"

    def imports_a_conftest(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("conftest"):
                return True
            if isinstance(node, ast.Import) and any(
                alias.name.endswith("conftest") for alias in node.names
            ):
                return True
        return False

    assert [str(p.relative_to(tests)) for p in tests.rglob("*.py") if imports_a_conftest(p)] == []


LAYERS: tuple[tuple[str, ...], ...] = (
    ("coach", "coach.__main__"),
    ("coach.surfaces", "coach.testing"),
    ("coach.conversation.runtime", "coach.conversation.attach", "coach.settings", "coach.models"),
    ("coach.agents",),
    ("coach.conversation",),
    ("coach.persistence",),
    ("coach.prompts",),
    ("coach.store",),
    ("coach.state",),
    ("coach.errors", "coach.metrics", "coach.locations", "coach._resources"),
)
"""The layers, top down: a module imports its own layer and the ones below it only.
Surfaces reach people; the runtime and the attachment wire agents to a LiveKit session
(from the settings and the models they name);
the agents work on the live conversation (``UserData``, its zones, the recorder); the
prompts are validated configuration; the store is the contract persistence implements;
state is pure logic."""


def _layer(module: str) -> int:
    """The index of ``module``'s layer (the longest matching prefix wins; ``coach`` is
    the package's own ``__init__`` only)."""
    best, found = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (prefix != "coach" and module.startswith(prefix + "."))
            if inside and len(prefix) > best:
                best, found = len(prefix), index
    assert found >= 0, f"{module} is in no layer: add it to LAYERS"
    return found


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer(target) < _layer(name)
    ]
    assert upward == []


def test_only_the_wiring_and_the_surfaces_open_the_database() -> None:
    """The agents and the live conversation see storage only through the store protocol."""
    users = {
        name
        for name, targets in _graph().items()
        if not name.startswith("coach.persistence")
        and any(t == "coach.persistence" or t.startswith("coach.persistence.") for t in targets)
    }
    assert {_layer(name) for name in users} <= {0, 1, 2}, sorted(users)
