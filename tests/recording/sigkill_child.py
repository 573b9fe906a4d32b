"""A worker-like child process for ``test_sigkill``: one scripted visit, turn by turn.

Run as ``python -m tests.recording.sigkill_child`` with ``COACH_DATABASE_URL`` and
``COACH_SECRET_KEY`` set. It opens a
:class:`~coach.conversation.runtime.Runtime` exactly as the worker does and reads one command per
line on stdin, answering each with one JSON line on stdout:

* ``durable`` — speak the next turn of ``TURNS``, then wait until the recorder has
  committed everything queued so far (``flush``): ``{"event": "durable", ...}``.
* ``open`` — speak the next turn and answer at once: ``{"event": "turn", ...}``. The
  turn's writes are the open commit window.
* ``in_commit`` — speak the next turn; the first write transaction that inserts rows
  stops right before its ``COMMIT``, answers ``{"event": "in_commit", ...}`` and hangs
  (the hook is on this process's engine).

Every answer carries the session id and what the session emitted so far (messages and
the ids of the memory-step items), so the parent knows what may be stored.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from sqlalchemy import event

from coach.conversation.runtime import Runtime
from coach.persistence import Repository
from coach.settings import Settings

from .visit import Watcher, run_turn, start_visit


def emit(kind: str, watcher: Watcher, turn: int, runtime: Runtime) -> None:
    userdata = watcher.userdata
    answer = {
        "event": kind,
        "turn": turn,
        "session_id": userdata.session_id,
        "messages": watcher.messages,
        "steps": [item.id for item in watcher.items],
        "completed_phases": userdata.completed_phases,
    }
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def main() -> None:
    runtime = await Runtime.open(Settings())
    session, model, watcher = await start_visit(runtime, identity="kim")
    armed = {"turn": -1}
    assert isinstance(runtime.store, Repository)
    engine = runtime.store.database.sync_engine

    @event.listens_for(engine, "before_cursor_execute")
    def _note_insert(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if armed["turn"] >= 0 and statement.lstrip().upper().startswith("INSERT"):
            conn.info["coach_test_inserted"] = True

    @event.listens_for(engine, "commit")
    def _stop_before_commit(conn: Any) -> None:
        if conn.info.pop("coach_test_inserted", False):
            emit("in_commit", watcher, armed["turn"], runtime)
            time.sleep(600)  # blocks the transaction before its COMMIT until SIGKILL

    turn = 0
    while line := await asyncio.to_thread(sys.stdin.readline):
        command = line.strip()
        if command == "in_commit":
            armed["turn"] = turn
        await run_turn(session, model, turn)
        if command == "durable":
            await asyncio.wait_for(runtime.recorder.flush(), 10)
            emit("durable", watcher, turn, runtime)
        elif command == "open":
            emit("turn", watcher, turn, runtime)
        turn += 1
    await session.aclose()
    await runtime.aclose()


if __name__ == "__main__":
    asyncio.run(main())
