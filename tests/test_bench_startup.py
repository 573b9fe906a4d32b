"""``bench.startup`` measures the commands it names, on the path it names: the set-up
visit stores a session for ``sessions list``, ``sessions show`` and ``users show`` to
read, and a trial whose command exits with another code than its case expects fails
instead of timing some other path (an error line, say). The stack each command is set
beside is one it loads, and ``bench.results`` reads the table ``bench.startup`` prints.
No timing is asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bench import startup
from bench.results import startup_rows
from bench.startup import (
    CASES,
    GREETING,
    ROOT,
    STACKS,
    Case,
    Tree,
    Trial,
    _setup,
    _visit_replies,
    trial,
)

from coach.testing import FakeOpenAIServer, say

NO_MODEL = "http://127.0.0.1:9/v1"
"""The commands measured here run no agent: no model answers."""


@pytest.fixture
async def tree(tmp_path: Path) -> AsyncIterator[Tree]:
    """A tree of this checkout after the set-up visit, its model server already gone."""
    async with FakeOpenAIServer(_visit_replies()) as server:
        tree = Tree("now", ROOT, tmp_path / "home")
        await asyncio.to_thread(_setup, tree, server.base_url)
    yield tree


async def test_the_set_up_visit_stores_a_session_the_commands_read(tree: Tree) -> None:
    assert len(tree.session) == 32
    for name in ("sessions-list", "sessions-show", "users-show"):
        run = await asyncio.to_thread(trial, tree, CASES[name], NO_MODEL)
        assert run.cpu > 0 and run.peak > 0 and not run.loaded, name


async def test_a_command_s_memory_is_its_own_not_the_bench_s(tree: Tree) -> None:
    """``--help`` holds a fraction of this test process's memory: the figure is the
    command's own peak, not the forked bench's resident memory from before the ``exec``
    (which ``wait4`` would report)."""
    run = await asyncio.to_thread(trial, tree, CASES["help"], NO_MODEL)
    assert 0 < run.peak < _resident_mb() / 2


def _resident_mb() -> float:
    """This process's resident memory now (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_a_chat_is_measured_to_its_greeting(tree: Tree) -> None:
    """CPU and peak memory read the moment the greeting is printed, the agent loaded."""
    async with FakeOpenAIServer([say(GREETING)]) as server:
        run = await asyncio.to_thread(trial, tree, CASES["chat"], server.base_url)
    assert run.cpu > 0 and run.peak > 0 and run.loaded


async def test_a_command_that_exits_otherwise_than_its_case_fails_the_trial(tree: Tree) -> None:
    missing = Case(("sessions", "show", "0" * 32))
    with pytest.raises(RuntimeError, match="exited 2, not 0"):
        await asyncio.to_thread(trial, tree, missing, NO_MODEL)


async def test_a_command_that_does_not_load_its_stack_fails_the_trial(tree: Tree) -> None:
    """``--help`` imports no database: set beside the store's stack, it is refused, so
    no command's figure is set beside a stack it could do without."""
    helped = Case(("--help",), stack="store")
    with pytest.raises(RuntimeError, match="stack not loaded: .*sqlalchemy"):
        await asyncio.to_thread(trial, tree, helped, NO_MODEL)


@pytest.mark.parametrize("name", sorted(STACKS))
async def test_each_stack_imports_on_its_own(name: str) -> None:
    case = next(c for c in CASES.values() if c.stack == name)
    assert await asyncio.to_thread(startup.stack_trial, case) > 0


def test_the_results_read_the_table_the_startup_bench_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "_header", False)
    runs = [Trial(1.0, False, 90), Trial(1.2, False, 95), Trial(1.1, False, 92)]
    startup._row("sessions-list", CASES["sessions-list"], {"now": runs}, ["now"], [0.7, 0.8, 0.9])
    startup._row("help", CASES["help"], {"now": [Trial(0.2, False, 30)]}, ["now"], [])
    startup._row("chat", CASES["chat"], {"now": [Trial(2.0, True, 180)]}, ["now"], [2.6])
    rows = startup_rows(capsys.readouterr().out)
    assert (rows["sessions-list"].cpu, rows["sessions-list"].stack) == (1.1, 0.8)
    assert (rows["help"].cpu, rows["help"].stack) == (0.2, None)
    assert (
        rows["sessions-list"]
        .row("list", 0.5)[-1]
        .endswith("its stack alone is over the target here")
    )
    assert rows["sessions-list"].row("list", 0.85)[-1] == "**not met**"
    assert rows["chat"].row("chat", 2.5)[-1] == "met"


@pytest.mark.parametrize("trees", [["now"], ["at x", "now"]])
def test_the_table_s_rows_have_as_many_cells_as_its_header(
    trees: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "_header", False)
    runs = {tree: [Trial(1.0, False, 60), Trial(1.1, False, 61)] for tree in trees}
    startup._row("sessions-list", CASES["sessions-list"], runs, trees, [0.7, 0.8])
    header, rule, row = capsys.readouterr().out.splitlines()
    assert rule.count("|---") == header.count("|") - 1 == row.count("|") - 1
    assert row.split(" | ")[header.split(" | ").index(f"now: {startup.PEAK_COLUMN}")] == "60"
