"""Storage of a real visit: tool calls, hand-offs, phase outputs, state — not two-message turns.

Run from the repository root::

    python -m bench.visit_storage --turns 200     # SQLite and PostgreSQL

One scripted visit of ``--turns`` user turns (``bench.conversation``'s script: the user
identifies, the challenge is captured and handed to the strategist, every phase is
completed with ``complete_phase``, then the evaluator records an evaluation and
finishes) runs through a real ``AgentSession`` and coach's ``Runtime``, recording ON,
into a fresh database. What it stored beyond the empty schema is divided by the UTF-8
bytes of the conversation's text (the messages as read back through the repository).

The peer, openai-agents' ``SQLiteSession``, is given **the same visit**: coach's memory
steps read back (``load_agent_state``) as the Responses-API items that library stores —
messages, function calls with their arguments and outputs (a hand-off is one) — one
``add_items`` per step, into its own file. SQLite sizes are after a WAL checkpoint and
``VACUUM``; PostgreSQL's are ``pg_total_relation_size`` after ``VACUUM FULL``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import SECRET, AgentsSQLiteBackend
from .measure import (
    coach_keys,
    key_settings,
    pg_bytes,
    pg_database,
    pg_url,
    sqlite_bytes,
    sqlite_dir,
    sqlite_tables,
)
from .measure import table as md_table

COMMAND = "python -m bench.visit_storage"


@dataclass(frozen=True)
class VisitStorage:
    """Bytes one store used for the visit, beyond its empty schema."""

    label: str
    db: str
    turns: int
    stored: int
    text: int
    tables: dict[str, int]
    counts: dict[str, int]

    @property
    def ratio(self) -> float:
        """Stored bytes / message text bytes."""
        return self.stored / self.text


async def _count_rows(url: str, tables: Sequence[str]) -> dict[str, int]:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return {
                name: int((await conn.execute(text(f"SELECT count(*) FROM {name}"))).scalar_one())
                for name in tables
            }
    finally:
        await engine.dispose()


def peer_items(steps: Sequence[Any]) -> list[dict[str, Any]]:
    """coach's memory steps as the Responses-API items openai-agents stores."""
    items: list[dict[str, Any]] = []
    for step in steps:
        kind = getattr(step, "type", None)
        if kind == "message":
            text = "\n".join(c for c in step.content if isinstance(c, str))
            items.append({"role": step.role, "content": text})
        elif kind == "function_call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": step.call_id,
                    "name": step.name,
                    "arguments": step.arguments,
                }
            )
        elif kind == "function_call_output":
            items.append(
                {"type": "function_call_output", "call_id": step.call_id, "output": step.output}
            )
    return items


async def visit(db: str, turns: int, directory: Path, name: str | None) -> list[VisitStorage]:
    """One recorded visit into ``db``; coach's storage (and, on SQLite, the peer's)."""
    from pydantic import SecretStr

    from coach.conversation.recorder import Recorder
    from coach.conversation.runtime import Runtime
    from coach.persistence import open_repository
    from coach.settings import Settings

    from .conversation import Meters, converse, meter_recorder_task, meter_submits

    url = pg_url(name) if name else f"sqlite+aiosqlite:///{directory / 'visit.db'}"
    repo = await open_repository(url, **coach_keys(url), secret=SECRET, create_schema=True)
    await repo.aclose()
    empty = await _size(db, directory / "visit.db", name)
    settings = Settings(
        database_url=url,
        **key_settings(url),
        secret_key=SecretStr("coach-bench-secret-0123456789abcdef"),
        llm_base_url="http://127.0.0.1:9/v1",
        _env_file=None,
    )
    with meter_recorder_task(asyncio.get_running_loop()) as task, meter_submits(Recorder) as sub:
        runtime = await Runtime.open(settings)
        try:
            run = await converse(runtime, Meters(task, sub), turns, recording=True)
            assert run.session_id is not None
            messages = await runtime.store.get_session_conversation(run.session_id)
            steps = await runtime.store.load_agent_state(run.session_id)
        finally:
            await runtime.aclose()
    text = sum(len(m.content.encode()) for m in messages)
    tables = await _size(db, directory / "visit.db", name)
    names = ("session_conversations", "agent_steps", "phase_outputs", "state_deltas")
    counts = await _count_rows(url, names)
    found = [
        VisitStorage(
            "coach (Runtime, recorder)",
            db,
            turns,
            sum(tables.values()) - sum(empty.values()),
            text,
            {k: v - empty.get(k, 0) for k, v in tables.items()},
            counts,
        )
    ]
    if db == "sqlite":
        found.append(await _peer(directory, turns, peer_items(steps), text))
    return found


async def _size(db: str, path: Path, name: str | None) -> dict[str, int]:
    if db == "postgres":
        assert name is not None
        return await pg_bytes(name)
    total = await asyncio.to_thread(sqlite_bytes, path)
    tables = await asyncio.to_thread(sqlite_tables, path)
    tables["(other pages)"] = total - sum(tables.values())
    return tables


async def _peer(directory: Path, turns: int, items: list[dict[str, Any]], text: int) -> Any:
    path = directory / "peer.db"
    peer = AgentsSQLiteBackend(path)
    await peer.open()
    session = await peer.new_session("visit")
    await session.get_items(limit=1)
    await peer.aclose()
    empty = sqlite_bytes(path)
    await peer.open()
    session = await peer.new_session("visit")
    for item in items:
        await session.add_items([item])
    await peer.aclose()
    stored = sqlite_bytes(path) - empty
    counts = {"items": len(items)}
    return VisitStorage(AgentsSQLiteBackend.label, "sqlite", turns, stored, text, {}, counts)


async def run(dbs: Sequence[str], turns: int) -> list[VisitStorage]:
    """The visit on every database of ``dbs``."""
    found: list[VisitStorage] = []
    for db in dbs:
        with sqlite_dir() as directory:
            if db == "postgres":
                async with pg_database("visit") as name:
                    found += await visit(db, turns, directory, name)
            else:
                found += await visit(db, turns, directory, None)
    return found


def report(found: Sequence[VisitStorage]) -> str:
    """The table and where coach's bytes go."""
    rows = [
        [
            s.label,
            s.db,
            f"{s.stored:,}",
            f"{s.text:,}",
            f"**{s.ratio:.2f}×**",
            ", ".join(f"{k} {v:,}" for k, v in s.counts.items()),
        ]
        for s in found
    ]
    lines = [
        md_table(
            ["store", "database", "stored bytes", "message text bytes", "stored / text", "rows"],
            rows,
            right=2,
        )
    ]
    for s in found:
        if s.tables:
            top = sorted(s.tables.items(), key=lambda kv: -kv[1])
            split = ", ".join(f"`{k}` {v / s.stored:.0%}" for k, v in top if v > 0)
            lines.append(f"\n- {s.label}, {s.db}: {split}")
    return "\n".join(lines)


def median_ratio(found: Sequence[VisitStorage], label_start: str) -> float:
    """The median stored/text of the stores whose label starts with ``label_start``."""
    return statistics.median(s.ratio for s in found if s.label.startswith(label_start))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="user turns of the visit (200)")
    parser.add_argument("--dbs", default="sqlite,postgres", help="sqlite,postgres")
    args = parser.parse_args(argv)
    print(f"{COMMAND} --turns {args.turns} --dbs {args.dbs}")
    found = asyncio.run(run([d for d in args.dbs.split(",") if d], args.turns))
    print(report(found))
    print(json.dumps({f"{s.label} {s.db}": round(s.ratio, 3) for s in found}))


if __name__ == "__main__":
    main()
