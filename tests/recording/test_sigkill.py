"""A worker killed with SIGKILL mid-conversation loses at most its last commit window.

The child (``sigkill_child``) is a real process running a ``Runtime`` on a SQLite file
or a PostgreSQL database. It speaks turns 0..KILLED_TURN-1 and *acknowledges* each
only after ``recorder.flush()`` returned: those writes are durable. Then it speaks
turn KILLED_TURN (which completes a phase) and is killed with no warning either

* ``open``: as soon as the turn's reply has been produced — whatever the writer had
  committed by then may be there, the rest of the turn is the lost window; or
* ``in_commit``: while the writer's transaction for that turn has inserted its rows
  and is about to COMMIT — all of it must be gone, atomically.

What is asserted, precisely:

1. every acknowledged write is stored: messages, memory steps, phase outputs;
2. what is stored beyond that is a prefix of what the killed turn queued (in order,
   nothing invented, nothing twice) — and with ``in_commit`` nothing at all;
3. no half-written step: ``agent_steps.seq`` is exactly ``0..n-1``, every blob passes
   its HMAC check and unpickles, and the zoned state's deltas are numbered 1..step;
4. a new ``Runtime`` on the same database resumes the session and its recorder appends
   after the last stored step.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from coach.conversation.runtime import Runtime
from coach.persistence import Repository, open_repository
from coach.settings import Settings
from coach.testing import call, say
from tests.support import MEMORY_SECRET, key_env, keys_of, keys_url, raw_sql

from .visit import TURNS, start_visit

ROOT = Path(__file__).resolve().parents[2]
KILLED_TURN = 5
"""``done with define``: the user message, the tool call, the phase change, the reply."""
assert TURNS[KILLED_TURN][0] == "done with define"


class Child:
    """The worker process, driven one command (one turn) at a time."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: Path) -> None:
        self.proc = proc
        self.stderr = stderr

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}\n".encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        assert line, f"the child died: {self.stderr.read_text()[-3000:]}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def sigkill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        assert await asyncio.wait_for(self.proc.wait(), 10) == -signal.SIGKILL


@pytest.fixture
async def child(database_url: str, tmp_path: Path) -> AsyncIterator[Child]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
    env.update(
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
        COACH_DATABASE_URL=database_url,
        COACH_SECRET_KEY=MEMORY_SECRET.decode(),
        COACH_LLM_BASE_URL="http://127.0.0.1:9/v1",
        PYTHONUNBUFFERED="1",
    )
    env.update(key_env(database_url))
    stderr = tmp_path / "child.stderr"
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.recording.sigkill_child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=ROOT,
        )
    try:
        yield Child(proc, stderr)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def messages(answer: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(role, content, phase) for role, content, phase in answer["messages"]]


async def stored_seqs(store: Repository, session_id: str) -> list[int]:
    async with raw_sql(store) as conn:
        rows = await conn.execute(
            text("SELECT seq FROM agent_steps WHERE session_id = :sid ORDER BY seq"),
            {"sid": session_id},
        )
        return [int(seq) for (seq,) in rows]


async def assert_whole_steps(store: Repository, session_id: str) -> list[Any]:
    """No half-written step: seq 0..n-1, every blob verified and unpickled."""
    seqs = await stored_seqs(store, session_id)
    assert seqs == list(range(len(seqs)))
    steps = await store.load_agent_state(session_id)
    assert len(steps) == len(seqs) > 0  # [] would mean a blob failed to decode
    state = await store.get_state(session_id)
    deltas = await store.get_deltas(session_id)
    assert [d.step for d in deltas] == list(range(1, state.step + 1))
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["open", "in_commit"])
async def test_sigkill_mid_conversation_loses_at_most_the_last_commit_window(
    child: Child, database_url: str, moment: str
) -> None:
    for turn in range(KILLED_TURN):
        acked = await child.ask("durable")
        assert acked["event"] == "durable" and acked["turn"] == turn
    killed = await child.ask(moment)
    assert killed["event"] == ("turn" if moment == "open" else "in_commit")
    assert killed["turn"] == KILLED_TURN
    await child.sigkill()

    session_id = acked["session_id"]
    assert session_id and killed["session_id"] == session_id
    store = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    try:
        # 1 + 2: the acknowledged prefix, then at most a prefix of the killed turn.
        conversation = [
            (m.role, m.content, m.phase_id)
            for m in await store.get_session_conversation(session_id)
        ]
        durable, queued = messages(acked), messages(killed)
        assert queued[: len(durable)] == durable
        assert conversation == queued[: len(conversation)]
        assert len(durable) <= len(conversation)
        steps = await assert_whole_steps(store, session_id)  # 3
        step_ids = [getattr(s, "id", None) for s in steps]
        assert step_ids == killed["steps"][: len(steps)]
        assert len(acked["steps"]) <= len(steps)
        completed = [
            o.phase_id for o in await store.get_phase_outputs(session_id) if o.status == "completed"
        ]
        assert completed[: len(acked["completed_phases"])] == acked["completed_phases"]
        if moment == "in_commit":  # the interrupted transaction left nothing behind
            assert conversation == durable
            assert step_ids == acked["steps"]
            assert completed == acked["completed_phases"] == ["challenge", "empathize"]
        lost = len(queued) - len(conversation), len(killed["steps"]) - len(steps)
        print(f"\n[{moment}] lost {lost[0]} messages and {lost[1]} steps of the killed turn")

        # 4: a new worker resumes the session and appends after the last stored step.
        await assert_resumes(database_url, session_id, conversation, step_ids, store)
    finally:
        await store.aclose()


async def assert_resumes(
    database_url: str,
    session_id: str,
    conversation: list[tuple[str, str, str | None]],
    step_ids: list[Any],
    store: Repository,
) -> None:
    settings = Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=MEMORY_SECRET.decode(),
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_shutdown_timeout=10,
    )
    runtime = await Runtime.open(settings)
    try:
        session, model, watcher = await start_visit(runtime, "kim", greeting="Welcome back!")
        model.extend([call("select_session_to_load", session_id=session_id), say("Continue?")])
        await session.run(user_input="resume my onboarding session")
        model.extend([call("load_selected_session"), say("Welcome back, let's go on.")])
        await session.run(user_input="continue")
        userdata = session.userdata
        assert userdata.session_id == session_id
        phase = userdata.current_phase_id
        assert phase in ("define", "ideate")  # define, unless its completion was stored
        model.extend([call("complete_phase", summary=f"{phase} decided again"), say("Noted.")])
        await session.run(user_input=f"done with {phase}")
        await session.aclose()
        await asyncio.wait_for(runtime.recorder.flush(), 10)
        assert runtime.recorder.stats().dropped == 0

        steps = await assert_whole_steps(store, session_id)
        assert [getattr(s, "id", None) for s in steps] == step_ids + [i.id for i in watcher.items]
        stored = await store.get_session_conversation(session_id)
        assert [(m.role, m.content, m.phase_id) for m in stored] == conversation + watcher.messages
        outputs = {o.phase_id: o for o in await store.get_phase_outputs(session_id)}
        assert outputs[phase].status == "completed"
        assert outputs[phase].output == f"{phase} decided again"
    finally:
        await runtime.aclose()
