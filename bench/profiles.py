"""Where coach's storage time goes: cProfile of every thread over the hot paths.

Run from the repository root::

    python -m bench.profiles                  # write_batch, resume at 2,000, recorder
    python -m bench.profiles --writes 100 --resume-turns 500 --recorder-turns 200

Three workloads, each in one profile of CPU time (``time.thread_time``: waiting in a
queue or in ``epoll`` costs nothing) that covers **every thread** — the event loop and
coach's database threads (a profiler is started in each thread as it starts, through
``threading.setprofile``, before the repository creates its pool), merged:

* ``--writes`` one-turn ``write_batch`` calls (two messages, two memory steps);
* ``--reads`` live resumes (recorder flush, ``resume_session``) of a ``--resume-turns``
  session;
* a ``Recorder`` recording ``--recorder-turns`` turns flat out, then ``flush``;
* the same on PostgreSQL, the turns spread over 50 sessions (as a fleet worker's
  concurrent conversations interleave).

The first three run on SQLite.

Each reports the functions with the largest own time (``tottime``) and its share of
the profile's total, and the total split by where the code lives (coach, SQLAlchemy,
asyncpg, the ``sqlite3`` module's C calls, asyncio, pickle/hmac, the rest). cProfile adds a
fixed cost to every Python call, so the shares lean towards code made of many small
Python calls (SQLAlchemy's) and away from C: read them as an order, not as timings.

Then, without any profiler, a one-turn write layer by layer (``--parts-rounds`` rounds
of ``--parts-turns`` turns of each layer, in an order that rotates, process CPU of all
threads): the floor — the turn planned and sealed as coach does it, written by raw
sqlite3 on a thread of its own —, the same statements in SQLAlchemy's own connection and
transaction, then in coach's unit of work (``Database.run``), ``Plan.apply`` instead of
them, and the whole ``write_batch``; each layer's cost is what it adds to the one under
it. A thread hand-off alone gives the scale; beside them, in the same rounds, the peer
(agents' ``SQLiteSession`` adding the turn's two items), the turn by hand (its rows made
by :mod:`bench.handwritten`, then raw's statements; and the same in one SQLAlchemy
transaction) and the seed API by hand in SQLAlchemy (its three calls' rows made by hand,
each call a SQLAlchemy transaction). Every row is also given over the peer, round by
round.

Last, the same ladder for a recorder's batch on PostgreSQL (``--pg-parts-turns`` turns
of each of 50 conversations per round, in batches of 100 ops, per message): raw asyncpg
writing coach's rows, the same statements through SQLAlchemy's asyncpg adapter, in
``Database.run``, ``Plan.of`` and ``Plan.apply`` instead, the whole ``write_batch``.

And the same for a live resume at ``--resume-turns`` turns (``--parts-rounds`` rounds of
100 reads of each part): coach's unit of work doing nothing, ``read_resume`` in it (the
statements, the window opened, the records), the steps decoded (``resume_session``), the
recorder flushed first (the live resume); beside them the peer's read, raw sqlite3's read
of the same rows, the decode's calls into C alone, the decode by hand
(:mod:`bench.handwritten`), coach's decode and the floor; each also over the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hmac
import os
import pickle
import pstats
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.engine import Connection

from coach.persistence.batch import Plan
from coach.persistence.codec import StepCodec
from coach.persistence.crypto import Sealer, associated, new_data_key
from coach.persistence.driver import utc
from coach.persistence.resume import Loaded, read_resume
from coach.persistence.schema import utcnow
from coach.store import WriteOp

from .backends import SECRET, AgentsSQLiteBackend, CoachBackend, CoachSession, turn_ops
from .handwritten import hand_batches
from .measure import sqlite_dir, sqlite_url, table
from .rawrows import (
    KeptConnection,
    OneThread,
    RawAsyncpg,
    RawBatch,
    RawOverSQLAlchemy,
    pg_statements,
    raw_batches,
    sqlite_of,
    sqlite_time,
)
from .recorder_cpu import (
    BATCH,
    SIGNED_PREFIX,
    new_sessions,
    pg_repo,
    pickled,
    record,
    workload,
)
from .storage_speed import (
    RawCoachRows,
    claim_steps,
    decoding,
    insert_message,
    insert_steps,
    measured,
    rotate,
    sealed_rows,
    write_turn_rows,
)
from .text import Turn, turns

COMMAND = "python -m bench.profiles"
EXCLUDED = frozenset(
    {
        "<built-in method gc.collect>",  # the bench's collection before a timed run
        "<method 'get' of '_queue.SimpleQueue' objects>",  # a thread waiting for work
        "<method 'poll' of 'select.epoll' objects>",  # the loop waiting
        "<method 'acquire' of '_thread.lock' objects>",
    }
)
"""Waits, and the bench's own collection: not work. (A thread that blocks in a queue's
``get`` was, under the profiler, sometimes charged seconds of CPU there; the threads'
CPU read from ``/proc`` over the same loop shows no thread spinning.)"""


@dataclass(frozen=True)
class Hot:
    """One function's own time in a profile."""

    name: str
    seconds: float
    share: float
    calls: int


@dataclass(frozen=True)
class ProfileResult:
    """A workload's profile: its hottest functions and the split by where code lives."""

    title: str
    ops: int
    unit: str
    total: float
    top: list[Hot]
    split: dict[str, float]


class _AllThreads:
    """A ``cProfile.Profile`` per thread, each started in its thread as it starts
    (``threading.setprofile(found.start_here)``)."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def start_here(self, *_: Any) -> None:
        """``threading.setprofile`` hook: replace itself by a profiler of this thread."""
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profiles.append(profile)
        profile.enable()


def _name(key: tuple[str, int, str]) -> str:
    path, line, name = key
    return name if path == "~" else f"{path}:{line}({name})"


def _where(key: tuple[str, int, str]) -> str:
    path, _, name = key
    if "coach/" in path:
        return "coach"
    if "sqlalchemy" in path:
        return "SQLAlchemy"
    if "asyncpg" in path:
        return "asyncpg"
    if "sqlite3" in name:
        return "sqlite3 (C)"
    if "asyncio" in path or "selectors" in path or "select.epoll" in name:
        return "asyncio and the loop"
    if "pickle" in path or "pickle" in name or "hmac" in path or "_hashlib" in name:
        return "pickle, hmac"
    if "livekit" in path or "pydantic" in path:
        return "livekit, pydantic"
    if "threading" in path or "concurrent" in path or "lock" in name:
        return "threads, locks"
    return "other (stdlib, builtins)"


def summarise(title: str, ops: int, unit: str, found: _AllThreads, top: int) -> ProfileResult:
    """The merged profile's hottest functions and its split."""
    stats = pstats.Stats(found.profiles[0])
    for profile in found.profiles[1:]:
        try:
            stats.add(profile)
        except TypeError:  # a thread that never ran a profiled call
            continue
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    own = {key: (row[2], row[1]) for key, row in table.items() if key[2] not in EXCLUDED}
    total = sum(seconds for seconds, _ in own.values()) or 1.0
    split: dict[str, float] = {}
    for key, (seconds, _) in own.items():
        split[_where(key)] = split.get(_where(key), 0.0) + seconds / total
    hottest = sorted(own.items(), key=lambda kv: -kv[1][0])[:top]
    rows = [Hot(_name(key), seconds, seconds / total, calls) for key, (seconds, calls) in hottest]
    return ProfileResult(
        title, ops, unit, total, rows, dict(sorted(split.items(), key=lambda kv: -kv[1]))
    )


async def prepared_session(path: Path, loaded: int = 0) -> CoachSession:
    """A migrated database with one session of ``loaded`` turns, made by a repository of
    its own (closed again: its threads' work is not in the profile)."""
    loader = CoachBackend(sqlite_url(path))
    await loader.open()
    handle = await loader.new_session("s")
    if loaded:
        await loader.bulk_load(handle, turns(loaded, loaded))
    await loader.aclose()
    return handle


@asynccontextmanager
async def resumable(
    path: Path, size: int
) -> AsyncIterator[tuple[CoachSession, CoachBackend, RawCoachRows]]:
    """A new database at ``path`` with one session of ``size`` turns
    (:func:`prepared_session`), and coach and raw open on it (closed after)."""
    handle = await prepared_session(path, size)
    coach = CoachBackend(sqlite_url(path))
    await coach.open()
    raw = RawCoachRows(path)
    try:
        await raw.open(handle.id)
        yield handle, coach, raw
    finally:
        await raw.aclose()
        await coach.aclose()


async def _profile(
    path: Path,
    op: Callable[[CoachBackend], Awaitable[object]],
    warm: Callable[[CoachBackend], Awaitable[object]],
) -> _AllThreads:
    """Open coach on ``path`` with every new thread profiled; ``warm``, then ``op``
    with the calling thread profiled too."""
    found = _AllThreads()
    threading.setprofile(found.start_here)  # before the repository's threads exist
    coach = CoachBackend(sqlite_url(path))
    try:
        await coach.open()
        await warm(coach)
        main = cProfile.Profile(time.thread_time)
        main.enable()
        await op(coach)
        main.disable()
    finally:
        threading.setprofile(None)
        await coach.aclose()
    found.profiles.insert(0, main)
    return found


async def profile_writes(count: int, top: int) -> ProfileResult:
    """``count`` one-turn ``write_batch`` calls into one session (after 3 unprofiled on
    the loop, profiled in the database thread)."""
    texts = turns(3, count + 3)
    with sqlite_dir() as directory:
        handle = await prepared_session(directory / "w.db")

        async def write(coach: CoachBackend, some: Sequence[Turn]) -> None:
            for turn in some:
                await coach.write_turn(handle, coach.items(handle, turn))

        found = await _profile(
            directory / "w.db", lambda c: write(c, texts[3:]), lambda c: write(c, texts[:3])
        )
    return summarise("write_batch, one turn per call", count, "turn", found, top)


async def profile_resume(size: int, reads: int, top: int) -> ProfileResult:
    """``reads`` live resumes of a ``size``-turn session."""
    with sqlite_dir() as directory:
        handle = await prepared_session(directory / "r.db", size)

        async def resume(coach: CoachBackend, count: int) -> None:
            for _ in range(count):
                await coach.live_resume(handle)

        found = await _profile(
            directory / "r.db", lambda c: resume(c, reads), lambda c: resume(c, 3)
        )
    return summarise(f"live resume at {size:,} turns", reads, "read", found, top)


async def profile_recorder_pg(count: int, sessions: int, top: int) -> ProfileResult:
    """A ``Recorder`` recording ``count`` turns spread round-robin over ``sessions``
    sessions on PostgreSQL, then ``flush`` (after a short unprofiled warm-up). Every
    statement runs on the loop's thread, so its profile is the whole process's."""
    async with pg_repo() as (repo, _, _url):
        await record(repo, workload(await new_sessions(repo, 2), 10, seed=-1))
        ops = workload(await new_sessions(repo, sessions), count // sessions, seed=5)
        found = _AllThreads()
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        await record(repo, ops)
        profile.disable()
        found.profiles.append(profile)
    title = f"recorder, flat out, PostgreSQL, {sessions} sessions"
    return summarise(title, 2 * len(ops) // 3, "message", found, top)


async def profile_recorder(count: int, top: int) -> ProfileResult:
    """A ``Recorder`` recording ``count`` turns of one session, then ``flush``."""
    with sqlite_dir() as directory:
        handle = await prepared_session(directory / "rec.db")
        ops = workload([handle.id], count, seed=5)
        found = await _profile(
            directory / "rec.db", lambda c: record(c.repo, ops), lambda c: asyncio.sleep(0)
        )
    return summarise("recorder, flat out", 2 * count, "message", found, top)


# --- a turn, layer by layer, without the profiler ------------------------------------------

HAND_OFF = (
    "for scale: a thread hand-off alone (a no-op on a worker thread, handed off as coach "
    "hands off; every store pays one)"
)
T_PEER = "for scale: the peer, agents `SQLiteSession.add_items` of the turn's two items"
T_HAND = (
    "for scale: by hand — the turn's rows made by hand (`bench.handwritten`), then raw "
    "sqlite3's claim, two INSERTs and COMMIT on a thread of its own"
)
T_STACK = (
    "for scale: by hand in SQLAlchemy — the turn's rows made by hand, then the same "
    "statements in one SQLAlchemy transaction (`begin()` on a connection kept between "
    "turns, as coach's units keep theirs) on a thread"
)
T_SEED = (
    "for scale: the seed API by hand in SQLAlchemy — its three calls' rows made by hand "
    "as it stores them (the steps whole, linked to no message), each call a SQLAlchemy "
    "transaction of its own (`begin()` on a kept connection) on a thread, the third "
    "reading the stored step count before its claim"
)
FLOOR = (
    "the floor: the turn planned and sealed on the loop (`Plan.of`, `seal_row`), then raw "
    "sqlite3's claim, two INSERTs and COMMIT on a thread of its own"
)
SQLALCHEMY = (
    "+ SQLAlchemy's connection and transaction: the same statements in `begin()` on a "
    "connection kept between turns (as coach's units keep theirs), on a thread of its "
    "own, without coach's `Database.run`"
)
UNIT = (
    "+ coach's unit of work: the same statements in a `Database.run` (its thread pool, "
    "the retry, the abandoned-caller check)"
)
APPLY = (
    "+ `Plan.apply` instead of the hand-written statements (sealing, bind processors, "
    "the driver's cursor)"
)
WHOLE = "+ the repository: the whole `write_batch`"
LAYERS = (FLOOR, SQLALCHEMY, UNIT, APPLY, WHOLE)


@dataclass(frozen=True)
class Ladder:
    """CPU (µs) per write of each layer, one value per round: each layer of
    :attr:`layers` adds itself to the one before; other rows are for scale."""

    title: str
    layers: tuple[str, ...]
    parts: dict[str, list[float]]
    anchor: str | None = None
    """The peer's row, when the ladder has one: every row is also given over it."""


async def turn_parts(rounds: int, count: int) -> Ladder:
    """Each round, ``count`` turns of each layer — from coach without its storage layer
    up to the whole ``write_batch``, one layer added at a time — in an order that
    rotates (process CPU of all threads, a collection before each): what each layer of
    coach's write path costs, with no profiler's overhead on every Python call."""
    parts: dict[str, list[float]] = {
        k: [] for k in (HAND_OFF, T_PEER, T_HAND, T_STACK, T_SEED, *LAYERS)
    }
    texts = turns(4, rounds * count)
    with sqlite_dir() as directory, closing(OneThread("bench-ladder")) as thread:
        coach = CoachBackend(sqlite_url(directory / "t.db"))
        await coach.open()
        peer = AgentsSQLiteBackend(directory / "a.db")
        await peer.open()
        session = await peer.new_session("s")
        await session.get_items(limit=1)  # its tables, outside the timing
        items = [peer.items(session, t) for t in texts]
        repo = coach.repo
        kept = KeptConnection(repo.database.sync_engine)
        apart = (*LAYERS, T_HAND, T_STACK, T_SEED)
        sessions = {layer: (await coach.new_session(layer)).id for layer in apart}
        raw, by_hand = RawCoachRows(directory / "t.db"), RawCoachRows(directory / "t.db")
        await raw.open(sessions[FLOOR])
        await by_hand.open(sessions[T_HAND])
        sealer = await repo.vault.sealer(coach.user_id)
        codec = StepCodec(SECRET)
        # Every turn's ops (its chat items) made before the timer, as the peer's items
        # are: turn n of each layer's session starts at step 2n.
        ops = {
            layer: [turn_ops(sessions[layer], 2 * n, t) for n, t in enumerate(texts)]
            for layer in apart
        }

        def planned(layer: str, n: int) -> Plan:
            return Plan.of(ops[layer][n], codec, utcnow)

        async def floor(n: int) -> None:
            await raw.write_plan(planned(FLOOR, n), sealer)

        def statements(layer: str, n: int) -> Callable[[sqlite3.Connection], None]:
            """The floor's statements for turn ``n``, planned and sealed now."""
            plan, sid = planned(layer, n), sessions[layer]
            said, steps = sealed_rows(plan, sealer)
            start, at = plan.appends[sid][0], sqlite_time(plan.now)
            return partial(
                write_turn_rows, session_id=sid, start=start, said=said, steps=steps, at=at
            )

        def transaction(write: Callable[[sqlite3.Connection], object]) -> None:
            """``write`` in SQLAlchemy's connection and transaction, without ``Database.run``."""
            with kept.transaction("BEGIN IMMEDIATE") as conn:
                write(sqlite_of(conn))

        async def bare(n: int) -> None:
            await thread.call(partial(transaction, statements(SQLALCHEMY, n)))

        async def hand_turn(n: int) -> None:
            (rows,) = hand_batches(ops[T_HAND][n], SECRET, sealer._aead)
            said = [(role, content) for _, role, content in rows.messages]
            await by_hand.write_rows(2 * n, said, rows.steps, rows.now)

        async def stack(n: int) -> None:
            (rows,) = hand_batches(ops[T_STACK][n], SECRET, sealer._aead)
            said = [(role, content) for _, role, content in rows.messages]
            at, sid = sqlite_time(rows.now), sessions[T_STACK]
            write = partial(
                write_turn_rows, session_id=sid, start=2 * n, said=said, steps=rows.steps, at=at
            )
            await thread.call(partial(transaction, write))

        async def seed(n: int) -> None:
            sid = sessions[T_SEED]
            for op in ops[T_SEED][n][:2]:  # the two messages, a call each
                (rows,) = hand_batches([op], SECRET, sealer._aead)
                ((_, role, content),) = rows.messages
                at = sqlite_time(rows.now)
                write = partial(insert_message, session_id=sid, role=role, content=content, at=at)
                await thread.call(partial(transaction, write))
            (rows,) = hand_batches(ops[T_SEED][n][2:], SECRET, sealer._aead)

            def append(db: sqlite3.Connection) -> None:
                db.execute("SELECT memory_steps FROM sessions WHERE id = ?", (sid,)).fetchone()
                claim_steps(db, sid, 2 * n, len(rows.steps))
                insert_steps(db, sid, rows.steps, [None] * len(rows.steps))

            await thread.call(partial(transaction, append))

        async def unit(n: int) -> None:
            write = statements(UNIT, n)
            await repo.database.run(lambda conn: write(sqlite_of(conn)), write=True, what="bench")

        async def apply(n: int) -> None:
            plan = planned(APPLY, n)
            sealers = {sessions[APPLY]: sealer}
            await repo.database.run(
                lambda conn: plan.apply(conn, sealers), write=True, what="bench"
            )

        async def whole(n: int) -> None:
            await repo.write_batch(ops[WHOLE][n])

        runs: dict[str, Callable[[int], Awaitable[object]]] = {
            HAND_OFF: lambda _n: thread.call(lambda: None),
            T_PEER: lambda n: peer.write_turn(session, items[n]),
            T_HAND: hand_turn,
            T_STACK: stack,
            T_SEED: seed,
            FLOOR: floor,
            SQLALCHEMY: bare,
            UNIT: unit,
            APPLY: apply,
            WHOLE: whole,
        }
        try:
            for r in range(rounds):
                for part in list(runs)[r % len(runs) :] + list(runs)[: r % len(runs)]:
                    gc.collect()
                    start = time.process_time()
                    for n in range(r * count, (r + 1) * count):
                        await runs[part](n)
                    parts[part].append((time.process_time() - start) / count * 1e6)
        finally:
            await thread.call(kept.close)
            await peer.aclose()
            await by_hand.aclose()
            await raw.aclose()
            await coach.aclose()
    title = f"a one-turn write, layer by layer ({rounds} rounds × {count:,})"
    return Ladder(title, LAYERS, parts, T_PEER)


PG_FLOOR = (
    "the floor: the batch's rows built, encoded and sealed (`raw_batches`), then raw "
    "asyncpg's claims and two INSERTs over `unnest`, in one transaction"
)
PG_SQLALCHEMY = (
    "+ SQLAlchemy's connection and transaction: the same statements through its asyncpg "
    "adapter (`engine.connect()`, `run_sync`, `begin()`), without coach's `Database.run`"
)
PG_UNIT = "+ coach's unit of work: the same statements in a `Database.run` (the timeout, the retry)"
PG_APPLY = (
    "+ `Plan.of` and `Plan.apply` instead of the rows and statements by hand (the sessions' "
    "lock, bind processors, a multi-row `VALUES` each for the messages and the steps)"
)
PG_LAYERS = (PG_FLOOR, PG_SQLALCHEMY, PG_UNIT, PG_APPLY, WHOLE)
PG_SESSIONS = 50
"""The conversations a recorder's batches interleave (as ``bench.recorder_cpu``'s 50 × 20)."""


async def batch_parts_pg(rounds: int, turns: int) -> Ladder:
    """Each round, ``turns`` turns of each of :data:`PG_SESSIONS` conversations
    interleaved, written in the recorder's batches of ``BATCH`` ops by each layer — from
    raw asyncpg writing coach's rows up to the whole ``write_batch`` — in an order that
    rotates (process CPU, a collection before each; the server's CPU is not in it): what
    each layer of coach's PostgreSQL write path costs per message, without the recorder
    (the floor's and coach's alike)."""
    parts: dict[str, list[float]] = {k: [] for k in PG_LAYERS}
    async with pg_repo() as (repo, dsn, _url):
        user = await repo.get_or_create_user("bench")
        sealer = await repo.vault.sealer(user.id)
        codec, per = StepCodec(SECRET), PG_SESSIONS * turns * 3
        ops = {
            layer: workload(await new_sessions(repo, PG_SESSIONS), rounds * turns, seed=n)
            for n, layer in enumerate(PG_LAYERS)
        }
        raw, bare = RawAsyncpg(dsn), RawOverSQLAlchemy(repo.database.url)
        await raw.open()
        await bare.open()

        def rows_of(batch: Sequence[WriteOp]) -> RawBatch:
            (rows,) = raw_batches(batch, codec, len(batch), sealer)
            return rows

        async def floor(batch: Sequence[WriteOp]) -> None:
            await raw.write(rows_of(batch))

        async def sqlalchemy(batch: Sequence[WriteOp]) -> None:
            await bare.write(rows_of(batch))

        async def unit(batch: Sequence[WriteOp]) -> None:
            await repo.database.run(pg_statements(rows_of(batch)), write=True, what="bench")

        async def apply(batch: Sequence[WriteOp]) -> None:
            plan = Plan.of(batch, codec, utcnow)
            sealers = dict.fromkeys(plan.session_ids, sealer)
            await repo.database.run(
                lambda conn: plan.apply(conn, sealers), write=True, what="bench"
            )

        runs: dict[str, Callable[[Sequence[Any]], Awaitable[object]]] = {
            PG_FLOOR: floor,
            PG_SQLALCHEMY: sqlalchemy,
            PG_UNIT: unit,
            PG_APPLY: apply,
            WHOLE: repo.write_batch,
        }
        try:
            for r in range(rounds):
                for part in PG_LAYERS[r % len(runs) :] + PG_LAYERS[: r % len(runs)]:
                    chunk = ops[part][r * per : (r + 1) * per]
                    gc.collect()
                    start = time.process_time()
                    for first in range(0, per, BATCH):
                        await runs[part](chunk[first : first + BATCH])
                    parts[part].append((time.process_time() - start) / (per * 2 / 3) * 1e6)
        finally:
            await raw.aclose()
            await bare.aclose()
    title = (
        f"a recorder's batch on PostgreSQL, layer by layer, per message ({rounds} rounds × "
        f"{PG_SESSIONS} conversations × {turns} turns, batches of {BATCH} ops)"
    )
    return Ladder(title, PG_LAYERS, parts)


R_PEER = "for scale: the peer, agents `SQLiteSession.get_items(limit=50)` of the same session"
R_RAW = (
    "for scale: raw sqlite3 reading the rows `resume_session` reads (the session, its "
    "outputs, the 50-message window, the steps from its oldest message on, the state; one "
    "transaction, one hand-off), undecoded: the floor's read"
)
R_C = (
    "for scale: the decode's calls into C alone, on blobs of the same sizes — 100 "
    "AES-GCM opens, 50 HMAC-SHA256, 50 unpickles (`pickle.loads`) — and nothing around them"
)
R_HAND = (
    "for scale: the contract's decode of those rows written by hand (`bench.handwritten`), "
    "no database — the same opens, checks and allow-listed unpickles into `ChatMessage`s, "
    "in one loop and nothing else"
)
R_WORK = (
    "for scale: coach's decode of those rows, no database — 50 messages and 50 steps "
    "opened, 50 signatures checked, 50 `ChatMessage`s unpickled through the allow-list"
)
R_FLOOR = "the floor: raw's read and coach's decode, in one call"
R_UNIT = (
    "coach's unit of work doing nothing: `Database.run` of a no-op (the hand-off, "
    "SQLAlchemy's connection and transaction, the retry loop)"
)
R_READ = (
    "+ `read_resume` in it: its statements through SQLAlchemy and the driver's cursor, "
    "the window's messages opened, the records built; no memory step decoded"
)
R_DECODE = "+ the memory steps decoded and the result built: the whole `resume_session`"
R_LIVE = "+ the process's recorder flushed first (idle): the live resume"
RESUME_LAYERS = (R_UNIT, R_READ, R_DECODE, R_LIVE)


def c_calls(
    sealer: Sealer, session_id: str, window: Sequence[Any], steps: Sequence[Any]
) -> Callable[[], None]:
    """The C calls of a resume's decode, alone: every sealed blob of ``window`` and
    ``steps`` (as :meth:`RawCoachRows.resume_rows` returns them) sealed again under a
    fresh key with the same associated data, its step's signature computed over a
    message of about the same length (what coach signs), its pickle loaded — with the
    blobs, the data and the pickles made before, so only the calls into C and their loop
    remain."""
    aead = AESGCM(new_data_key())
    opens: list[tuple[bytes, bytes, bytes]] = []
    for _, role, content, at in window:
        ad = associated("session_conversations", "content", (session_id, utc(at), role))
        opens.append(_resealed(aead, len(content), ad))
    pickles, macs = [], []
    for row in steps:
        ad = associated("agent_steps", "payload", (session_id, row.seq))
        opens.append(_resealed(aead, len(row.payload), ad))
        payload = sealer.open("agent_steps", "payload", (session_id, row.seq), row.payload)
        said = b""
        if row.content is not None:  # the message's text, signed with the step
            bound = (session_id, utc(row.message_at), row.message_role)
            text = sealer.open("session_conversations", "content", bound, row.content)
            said = bytes(4) + text.encode()
        macs.append(bytes(SIGNED_PREFIX) + said + payload)
        pickles.append(pickled(payload)[0])
    key = new_data_key()

    def calls() -> None:
        for nonce, sealed, ad in opens:
            aead.decrypt(nonce, sealed, ad)
        for message in macs:
            hmac.digest(key, message, "sha256")
        for data in pickles:
            pickle.loads(data)

    return calls


def _resealed(aead: AESGCM, size: int, ad: bytes) -> tuple[bytes, bytes, bytes]:
    nonce = os.urandom(12)
    return nonce, aead.encrypt(nonce, os.urandom(size - 1 - 12 - 16), ad), ad


async def resume_parts(rounds: int, reads: int, size: int = 2000) -> Ladder:
    """Each round, ``reads`` reads of each part of a live resume of a ``size``-turn
    session, in an order that rotates (:func:`~.storage_speed.rotate`; process CPU of
    all threads, a collection before each): coach's layers from an empty unit of work up
    to the live resume, and beside them raw's read, the decode's C calls, the decode by
    hand, coach's decode and the floor."""
    parts: dict[str, list[float]] = {
        k: [] for k in (HAND_OFF, R_PEER, R_RAW, R_C, R_HAND, R_WORK, R_FLOOR, *RESUME_LAYERS)
    }
    with sqlite_dir() as directory, closing(OneThread("bench-ladder")) as thread:
        async with (
            resumable(directory / "r.db", size) as (handle, coach, raw),
            decoding(coach, raw) as decode,
        ):
            peer = AgentsSQLiteBackend(directory / "a.db")
            await peer.open()
            session = await peer.new_session("s")
            await peer.bulk_load(session, turns(size, size))
            repo = coach.repo
            sealer = await repo.vault.sealer(coach.user_id)
            window, steps, _ = await raw.resume_rows()
            first = steps[0].seq
            calls = c_calls(sealer, handle.id, window, steps)

            async def c_work() -> None:
                calls()

            def read(conn: Connection) -> Loaded:
                return read_resume(
                    conn,
                    handle.id,
                    user_id=coach.user_id,
                    sealer=sealer,
                    phase_ids=repo.phase_ids,
                    max_pairs=25,
                    max_steps=100,
                )

            runs: dict[str, Callable[[], Awaitable[object]]] = {
                HAND_OFF: lambda: thread.call(lambda: None),
                R_PEER: lambda: peer.read_window(session),
                R_RAW: lambda: raw.resume_rows(first=first),
                R_C: c_work,
                R_HAND: lambda: decode(by_hand=True),
                R_WORK: decode,
                R_FLOOR: lambda: decode(read=True),
                R_UNIT: lambda: repo.database.run(lambda _conn: None, write=False, what="bench"),
                R_READ: lambda: repo.database.run(read, write=False, what="bench"),
                R_DECODE: lambda: coach.read_window(handle),
                R_LIVE: lambda: coach.live_resume(handle),
            }
            try:
                for run in runs.values():  # warm-up: statement caches, first connections
                    for _ in range(5):
                        await run()
                for r in range(rounds):
                    for part in rotate(list(runs), r):
                        run = runs[part]
                        batch = await measured(reads, lambda _n: run())  # noqa: B023 (awaited here)
                        parts[part].append(batch.cpu_per_op * 1e6)
            finally:
                await peer.aclose()
    title = f"a live resume at {size:,} turns, layer by layer ({rounds} rounds × {reads:,})"
    return Ladder(title, RESUME_LAYERS, parts, R_PEER)


def parts_report(r: Ladder) -> str:
    """Each layer's CPU per write and what it adds to the layer under it (median of the
    rounds' differences)."""
    rows = []
    for part, values in r.parts.items():
        added = "–"
        if part in r.layers[1:]:
            below = r.parts[r.layers[r.layers.index(part) - 1]]
            steps = [a - b for a, b in zip(values, below, strict=True)]
            added = f"{statistics.median(steps):+.1f} ({min(steps):+.1f} to {max(steps):+.1f})"
        median, low, high = statistics.median(values), min(values), max(values)
        rows.append([part, f"{median:.1f}", f"{low:.1f}–{high:.1f}", added])
        if r.anchor is not None:
            over = [a / b for a, b in zip(values, r.parts[r.anchor], strict=True)]
            rows[-1].append(f"{statistics.median(over):.2f}× ({min(over):.2f}–{max(over):.2f})")
    header = [
        r.title,
        "CPU µs, median",
        "range",
        "added by the layer, µs (median of rounds, range)",
    ]
    if r.anchor is not None:
        header.append("/ the peer (median of rounds, range)")
    return table(header, rows)


def report(results: Sequence[ProfileResult]) -> str:
    """Per workload: the split, then the hottest functions."""
    out = []
    for r in results:
        split = ", ".join(f"{where} {share:.0%}" for where, share in r.split.items())
        lines = [
            f"**{r.title}** ({r.ops:,} {r.unit}s; profiled CPU {r.total / r.ops * 1e3:.3f} ms "
            f"per {r.unit}, inflated by the profiler)",
            "",
            f"By where the code lives: {split}.",
            "",
            "| function (own time) | share | calls per " + r.unit + " |",
            "|---|---:|---:|",
        ]
        for hot in r.top:
            name = hot.name.replace("|", "\\|")
            root = str(Path(__file__).resolve().parents[1]) + "/"
            for prefix in (sys.prefix + "/lib/", sys.base_prefix + "/lib/", root):
                name = name.replace(prefix, "")
            lines.append(f"| `{name}` | {hot.share:.1%} | {hot.calls / r.ops:.1f} |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


async def run(
    writes: int, size: int, reads: int, recorder_turns: int, top: int
) -> list[ProfileResult]:
    """The four profiles."""
    return [
        await profile_writes(writes, top),
        await profile_resume(size, reads, top),
        await profile_recorder(recorder_turns, top),
        await profile_recorder_pg(recorder_turns, 50, top),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This measurement's flags."""
    parser.add_argument("--writes", type=int, default=500, help="write_batch calls (500)")
    parser.add_argument("--resume-turns", type=int, default=2000, help="session length (2,000)")
    parser.add_argument("--profile-reads", type=int, default=200, help="resumes profiled (200)")
    parser.add_argument("--recorder-turns", type=int, default=1000, help="turns recorded")
    parser.add_argument("--top", type=int, default=12, help="functions listed per profile")
    parser.add_argument(
        "--parts-rounds", type=int, default=11, help="rounds of the turn's layers (11)"
    )
    parser.add_argument(
        "--parts-turns", type=int, default=400, help="turns per layer and round (400)"
    )
    parser.add_argument(
        "--pg-parts-turns",
        type=int,
        default=20,
        help="turns of each conversation per layer and round, PostgreSQL (20)",
    )


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    a = parser.parse_args(argv)
    print(
        f"{COMMAND} --writes {a.writes} --resume-turns {a.resume_turns} --profile-reads "
        f"{a.profile_reads} --recorder-turns {a.recorder_turns} --parts-rounds "
        f"{a.parts_rounds} --parts-turns {a.parts_turns} --pg-parts-turns {a.pg_parts_turns}"
    )
    print(
        report(asyncio.run(run(a.writes, a.resume_turns, a.profile_reads, a.recorder_turns, a.top)))
    )
    print()
    print(parts_report(asyncio.run(turn_parts(a.parts_rounds, a.parts_turns))))
    print()
    print(parts_report(asyncio.run(batch_parts_pg(a.parts_rounds, a.pg_parts_turns))))
    print()
    print(parts_report(asyncio.run(resume_parts(a.parts_rounds, 100, a.resume_turns))))


if __name__ == "__main__":
    main()
