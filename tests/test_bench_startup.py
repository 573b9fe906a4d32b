"""``bench.startup`` measures the commands it names, on the path it names: the set-up
visit stores a session for ``sessions list``, ``sessions show`` and ``users show`` to
read, and a trial whose command exits with another code than its case expects fails
instead of timing some other path (an error line, say). No timing is asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bench.startup import CASES, ROOT, Case, Tree, _setup, _visit_replies, trial

from coach.testing import FakeOpenAIServer

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
        cpu, loaded = await asyncio.to_thread(trial, tree, CASES[name], NO_MODEL)
        assert cpu > 0 and not loaded, name


async def test_a_command_that_exits_otherwise_than_its_case_fails_the_trial(tree: Tree) -> None:
    missing = Case(("sessions", "show", "0" * 32))
    with pytest.raises(RuntimeError, match="exited 2, not 0"):
        await asyncio.to_thread(trial, tree, missing, NO_MODEL)
