"""Instructions a turn's write costs, counted by valgrind: the same figure on a busy
machine as on an idle one.

Run from the repository root (needs Debian's ``valgrind`` and a C compiler)::

    python -m bench.instructions                    # every workload, 200 turns each
    python -m bench.instructions --turns 50 coach   # one workload

Process CPU on a shared machine moves by more than a small change to coach saves (the
passes' paired runs of a change of a few percent were "inside the noise"); the
instructions executed do not. Each workload runs in a fresh ``python`` under
``valgrind --tool=callgrind``, uninstrumented until its timed loop starts: a helper
built here (``callgrind.h``'s client requests) starts the count after the warm-up and
stops it after the loop, counting **every thread** — the loop's and the database's.
Only user-space instructions count: the kernel's share of a thread hand-off (a futex, a
write to the loop's pipe), which every store pays once a turn, does not, so the ratio of
two stores' instructions is wider than the ratio of their CPU time.

Workloads (``--turns`` each, after 50 of warm-up, one session in a fresh SQLite file):

* ``coach``: ``write_batch`` of a turn (two messages, their two memory steps);
* ``seed``: the seed API's turn (``add_session_message`` twice, ``save_agent_state``
  with every step so far: three units of work);
* ``peer``: openai-agents' ``SQLiteSession.add_items`` of the turn's two items;
* ``unit``: coach's empty unit of work (``Database.run`` of nothing: the hand-off,
  ``BEGIN IMMEDIATE``, ``COMMIT``);
* ``to_thread``: ``asyncio.to_thread`` of nothing (the standard hand-off).

And the recorder's batch path (:mod:`bench.recorder_cpu`'s workloads, counted **per
message**): ``--turns`` turns spread round-robin over ``--sessions`` sessions (50), after
at least 4 turns of each and 100 in all as warm-up, submitted as that bench submits them
(a yield to the loop a turn), every batch 100 ops:

* ``recorder``: coach's ``Recorder`` over coach's repository, until flushed;
* ``recorder_floor``: the same recorder over raw's writer (coach's encoding, raw
  ``sqlite3``'s statements: :class:`bench.rawrows.RawStore`);
* ``recorder_raw``: raw ``sqlite3`` writing the same rows, made before the count;
* ``recorder_stack``: the rows made by hand (:mod:`bench.handwritten`) and raw's
  statements in SQLAlchemy's connection and transaction, no recorder;
* ``recorder_idle``: the recorder over a store that writes nothing;
* ``yields``: the workload's yields to the loop alone, no recorder;
* ``recorder_pg``, ``recorder_floor_pg``: coach's recorder on PostgreSQL, and the same
  recorder over raw's statements through SQLAlchemy's asyncpg adapter (the floor
  through SQLAlchemy of section 5). PostgreSQL's own instructions (the server) are in
  neither, and the loop's wake-ups follow the server's answers, so these two move by
  several per cent from run to run;
* ``batches_pg``, ``batches_floor_pg``: the same ops as 100-op batches with no
  recorder, the same count each time: coach's ``write_batch`` of each, and the floor's
  work — the batch's rows and seals made by coach's functions
  (:func:`bench.rawrows.raw_batches`), raw's statements in coach's unit of work;
* ``batches_raw_pg``: raw ``asyncpg`` writing the same batches' rows, made before the
  count (:class:`bench.rawrows.RawAsyncpg`): the client's own share of raw's statements.

And the live resume (:mod:`bench.storage_speed`'s resume section, counted **per read**):
``--turns`` reads of one 2,000-turn session, after 5 of warm-up:

* ``resume``: coach's live resume (the idle recorder flushed, then ``resume_session``);
* ``resume_peer``: openai-agents' ``SQLiteSession.get_items(limit=50)``;
* ``resume_stack``: by hand in SQLAlchemy — raw's read of the rows ``resume_session``
  reads, in SQLAlchemy's connection and transaction, then the contract's decode by hand;
* ``resume_kept``: the two largest of what coach keeps on a resume (:mod:`bench.kept`):
  its records opened and its context built. With ``resume_stack``, a lower bound of the
  least coach can cost while it keeps every behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

COMMAND = "python -m bench.instructions"
WORKLOADS = ("coach", "seed", "peer", "unit", "to_thread")
BATCH_WORKLOADS = (
    "recorder", "recorder_floor", "recorder_raw", "recorder_stack", "recorder_idle", "yields",
    "recorder_pg", "recorder_floor_pg", "batches_pg", "batches_floor_pg", "batches_raw_pg",
)  # fmt: skip
"""Counted per message (the rest per turn)."""
RESUME_WORKLOADS = ("resume", "resume_peer", "resume_stack", "resume_kept")
RESUME_TURNS = 2000
SESSIONS = 50
_HELPER = """#include <valgrind/callgrind.h>
void count_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void count_stop(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
"""
_WARM_UP = 50


def build_helper(directory: Path) -> Path:
    """The shared library whose two calls start and stop callgrind's count."""
    source, library = directory / "count.c", directory / "libcount.so"
    source.write_text(_HELPER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def count(
    workload: str, turns: int, directory: Path, helper: Path, sessions: int = SESSIONS
) -> int:
    """Instructions of ``turns`` turns of ``workload`` (a batch workload's over
    ``sessions`` sessions), in a fresh process."""
    out = directory / f"{workload}.out"
    subprocess.run(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable, "-m", "bench.instructions",
            "--child", str(helper), "--turns", str(turns), "--sessions", str(sessions),
            workload,
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=1800,  # a hang guard only: valgrind runs a turn ~50 times slower
    )  # fmt: skip
    dump = out.with_name(out.name + ".1")  # the count between start and stop
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no summary for {workload}")


async def _child(workload: str, turns: int, helper: Path, sessions: int) -> None:
    """One workload, counted between its warm-up and its end."""
    from coach.persistence import open_repository

    from .backends import SECRET, AgentsSQLiteBackend, chat_items, turn_ops
    from .measure import coach_keys, sqlite_url
    from .text import turns as texts

    library = ctypes.CDLL(str(helper))
    if workload in BATCH_WORKLOADS:
        await _batch_child(workload, turns, library, sessions)
        return
    if workload in RESUME_WORKLOADS:
        await _resume_child(workload, turns, library)
        return
    written = texts(1, _WARM_UP + turns)
    with tempfile.TemporaryDirectory() as tmp:
        one: Callable[[int], Awaitable[object]]
        if workload == "peer":
            peer = AgentsSQLiteBackend(Path(tmp) / "a.db")
            await peer.open()
            session = await peer.new_session("s")
            items = [peer.items(session, turn) for turn in written]
            one, closing = (lambda n: peer.write_turn(session, items[n])), peer.aclose
        else:
            url = sqlite_url(Path(tmp) / "c.db")
            repo = await open_repository(url, **coach_keys(url), secret=SECRET, create_schema=True)
            user = await repo.get_or_create_user("bench")
            sid = (await repo.create_session(user.id, "challenge")).id
            ops = [turn_ops(sid, 2 * n, turn, chat_items(turn)) for n, turn in enumerate(written)]
            steps = [step for op in ops for step in getattr(op, "steps", ())]

            async def seed(n: int) -> None:
                await repo.add_session_message(sid, "user", written[n].user)
                await repo.add_session_message(sid, "assistant", written[n].assistant)
                await repo.save_agent_state(sid, steps[: 2 * (n + 1)])

            one = {
                "coach": lambda n: repo.write_batch(ops[n]),
                "seed": seed,
                "unit": lambda _n: repo._db.run(lambda _c: None, write=True, what="nothing"),  # noqa: SLF001
                "to_thread": lambda _n: asyncio.to_thread(lambda: None),
            }[workload]
            closing = repo.aclose
        await _counted(one, _WARM_UP, turns, library)
        await closing()


async def _batch_child(workload: str, turns: int, library: Any, sessions: int) -> None:
    """One of :data:`BATCH_WORKLOADS`: its warm-up, then its counted part."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from coach.conversation.recorder import Recorder
    from coach.persistence import open_repository
    from coach.persistence.codec import StepCodec
    from coach.persistence.crypto import Sealer, new_data_key
    from coach.store import AppendSteps

    from .backends import SECRET
    from .handwritten import write_hand_batches
    from .measure import coach_keys, sqlite_url
    from .rawrows import (
        RawAsyncpg,
        RawOverSQLAlchemy,
        RawSQLite,
        RawSQLiteOverSQLAlchemy,
        RawStore,
        pg_statements,
        raw_batches,
    )
    from .recorder_cpu import BATCH, new_sessions, pg_repo, submit_all
    from .recorder_cpu import workload as batch_ops

    warm_turns, codec = max(4, 100 // sessions), StepCodec(SECRET)

    @contextlib.contextmanager
    def counting(counted: bool = True) -> Iterator[None]:
        gc.collect()
        if counted:
            library.count_start()
        yield
        if counted:
            library.count_stop()

    def parts(ids: list[str]) -> tuple[list[Any], list[Any]]:
        """The warm-up's ops, and the counted ones after them (steps numbered on)."""
        later = [
            replace(op, start=op.start + 2 * warm_turns) if isinstance(op, AppendSteps) else op
            for op in batch_ops(ids, max(1, turns // sessions), seed=2)
        ]
        return batch_ops(ids, warm_turns, seed=1), later

    async def record(store: Any, ids: list[str]) -> None:
        """The warm-up, then the counted ops, each through a new recorder, flushed."""
        for counted, ops in enumerate(parts(ids)):
            recorder = Recorder(store, max_batch=BATCH)
            recorder.start()
            with counting(bool(counted)):
                await submit_all(recorder, ops)
                await recorder.flush()
            stats = recorder.stats()
            await recorder.aclose()
            if stats.errors or stats.written != len(ops):
                raise RuntimeError(f"the recorder lost writes: {stats}")

    async def write_raw(writer: Any, ids: list[str]) -> None:
        """Raw's writes of the warm-up's rows, then of the counted ones, made before."""
        warm, ops = parts(ids)
        for rows in raw_batches(warm, codec, BATCH):
            await writer.write(rows)
        made = raw_batches(ops, codec, BATCH)
        with counting():
            for rows in made:
                await writer.write(rows)

    class Idle:
        async def write_batch(self, ops: Sequence[Any]) -> None:
            """Write nothing."""

    if workload.endswith("_pg"):
        async with pg_repo() as (repo, dsn, url):
            ids = await new_sessions(repo, sessions)
            if workload == "batches_raw_pg":
                writer = RawAsyncpg(dsn)
                await writer.open()
                await write_raw(writer, ids)
                await writer.aclose()
            elif workload == "recorder_pg":
                await record(repo, ids)
            elif workload == "recorder_floor_pg":
                stack = RawOverSQLAlchemy(url)
                await stack.open()
                await record(RawStore(stack, codec), ids)
                await stack.aclose()
            else:  # the batches themselves, with no recorder
                sealer = Sealer("raw", new_data_key())
                for counted, ops in enumerate(parts(ids)):
                    with counting(bool(counted)):
                        for first in range(0, len(ops), BATCH):
                            batch = ops[first : first + BATCH]
                            if workload == "batches_pg":
                                await repo.write_batch(batch)
                            else:  # the floor's work: coach's rows and seals, raw's SQL
                                (rows,) = raw_batches(batch, codec, BATCH, sealer)
                                await repo.database.run(pg_statements(rows), write=True, what="raw")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.db"
        url = sqlite_url(path)
        repo = await open_repository(url, **coach_keys(url), secret=SECRET, create_schema=True)
        ids = await new_sessions(repo, sessions)
        if workload == "recorder":
            await record(repo, ids)
        await repo.aclose()
        warm, ops = parts(ids)
        raw = RawSQLite(path)
        await raw.open()
        if workload == "recorder_idle":
            await record(Idle(), ids)
        elif workload == "recorder_floor":
            await record(RawStore(raw, codec), ids)
        elif workload == "yields":
            with counting():
                for n in range(len(ops)):
                    if n % 3 == 2:
                        await asyncio.sleep(0)
        elif workload == "recorder_stack":
            kept = RawSQLiteOverSQLAlchemy(url)
            await kept.open()
            aead = AESGCM(new_data_key())
            await write_hand_batches(kept, warm, SECRET, aead, BATCH)
            with counting():
                await write_hand_batches(kept, ops, SECRET, aead, BATCH)
            await kept.aclose()
        elif workload == "recorder_raw":
            await write_raw(raw, ids)
        await raw.aclose()


async def _resume_child(workload: str, reads: int, library: Any) -> None:
    """One of :data:`RESUME_WORKLOADS`: ``reads`` reads of a 2,000-turn session, after 5."""
    from .backends import AgentsSQLiteBackend, CoachBackend
    from .kept import resume_kept
    from .measure import sqlite_url
    from .storage_speed import RawCoachRows, decoding
    from .text import turns as texts

    written = texts(RESUME_TURNS, RESUME_TURNS)
    with tempfile.TemporaryDirectory() as tmp:
        if workload == "resume_peer":
            peer = AgentsSQLiteBackend(Path(tmp) / "a.db")
            await peer.open()
            session = await peer.new_session("s")
            await peer.bulk_load(session, written)
            await _counted(lambda _n: peer.read_window(session), 5, reads, library)
            await peer.aclose()
            return
        coach = CoachBackend(sqlite_url(Path(tmp) / "c.db"))
        await coach.open()
        handle = await coach.new_session("s")
        await coach.bulk_load(handle, written)
        if workload == "resume":
            await _counted(lambda _n: coach.live_resume(handle), 5, reads, library)
        elif workload == "resume_kept":
            opened, context = await resume_kept(coach, handle.id)

            async def kept(_n: int) -> None:
                opened()
                context()

            await _counted(kept, 5, reads, library)
        else:  # by hand in SQLAlchemy: raw's read in its connection, the decode by hand
            raw = RawCoachRows(Path(tmp) / "c.db")
            await raw.open(handle.id)
            async with decoding(coach, raw) as decode:
                stack = partial(decode, read=True, by_hand=True, stack=True)
                await _counted(lambda _n: stack(), 5, reads, library)
            await raw.aclose()
        await coach.aclose()


async def _counted(
    one: Callable[[int], Awaitable[object]], warm: int, counted: int, library: Any
) -> None:
    """``one(n)`` for ``warm`` values of ``n`` uncounted, then for ``counted`` more, counted."""
    for n in range(warm):
        await one(n)
    gc.collect()
    library.count_start()
    for n in range(warm, warm + counted):
        await one(n)
    library.count_stop()


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns counted (200)")
    parser.add_argument(
        "--sessions", type=int, default=SESSIONS, help="the batch workloads' sessions (50)"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("workloads", nargs="*", help=f"of {', '.join(WORKLOADS)} (all)")
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    known = {*WORKLOADS, *BATCH_WORKLOADS, *RESUME_WORKLOADS}
    if unknown := sorted(set(args.workloads) - known):
        parser.error(f"no such workload: {', '.join(unknown)}")
    args.workloads = args.workloads or list(WORKLOADS)
    if args.child is not None:
        asyncio.run(_child(args.workloads[0], args.turns, args.child, args.sessions))
        return
    with tempfile.TemporaryDirectory() as tmp:
        helper = build_helper(Path(tmp))
        print(
            f"{COMMAND} --turns {args.turns} --sessions {args.sessions}: "
            "instructions (valgrind, every thread)"
        )
        for workload in args.workloads:
            if workload in BATCH_WORKLOADS:
                messages = 2 * args.sessions * max(1, args.turns // args.sessions)
                per = count(workload, args.turns, Path(tmp), helper, args.sessions) / messages
                print(f"  {workload}: {per:,.0f} a message")
            elif workload in RESUME_WORKLOADS:
                per = count(workload, args.turns, Path(tmp), helper) / args.turns
                print(f"  {workload}: {per:,.0f} a read")
            else:
                per = count(workload, args.turns, Path(tmp), helper) / args.turns
                print(f"  {workload}: {per:,.0f} a turn")


if __name__ == "__main__":
    main()
