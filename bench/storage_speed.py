"""coach's hot storage paths against the fastest peer and raw sqlite3, in process CPU.

Run from the repository root (the peer comes with the ``bench`` extra)::

    python -m bench.storage_speed                      # SQLite: writes and resume
    python -m bench.storage_speed --rounds 5 --turns 500 --reads 20   # a smoke run
    python -m bench.storage_speed --pg-transactions 300               # + PostgreSQL pings

What is compared (issue 25's targets):

* **A turn written.** ``coach write_batch`` (two ``AddMessage`` and one ``AppendSteps`` of
  the two ``ChatMessage`` steps: one transaction), ``coach seed API``
  (``add_session_message`` twice and ``save_agent_state``: three), openai-agents' ``SQLiteSession``
  (one ``add_items`` of the user and the assistant item; stdlib ``sqlite3`` in one worker
  thread) and **raw sqlite3 writing coach's own rows** — the session's claim, two
  conversation rows and two step rows whose (already encoded and signed) bytes are
  made before the timer, one thread hand-off, one commit: the floor for coach's layout.
  Each store writes ``--turns`` turns of one session into a fresh file per round.
* **Resume at ``--resume-turns`` turns.** coach's live resume path (``Userdata.load_session``:
  the process's recorder flushed, then ``resume_session``: the 25-pair window and the
  newest memory steps, verified and unpickled; the garbage collections it causes
  count), ``SQLiteSession.get_items(limit=50)`` and raw sqlite3 reading the rows
  ``resume_session`` reads (session, outputs, the newest 50 messages, the newest 100
  step rows, the state) in one hand-off, undecoded.

* **coach's own work, no database** (both sections): what coach does besides its SQL —
  per turn, the batch checked, its two steps pickled and signed, its four personal
  fields sealed; per read, the window's 50 messages and the steps opened (AES-GCM),
  verified (HMAC) and unpickled, from rows read before the timer. The floor under
  coach's figure that no change to the database layer can remove.
* **floor: raw sqlite3 and coach's own work, in one call** (both sections): the two
  above as one store — per turn, the batch planned and sealed, then raw's statements
  on those rows; per read, raw reads what ``resume_session`` reads (the session, its
  outputs, the window, the steps from the window's oldest message on, the state: one
  transaction) and coach's own work opens it. coach without its storage layer: when
  this is above a target, no change to that layer can meet it.
* **by hand** (a read): raw's read, then the contract's decode written by hand
  (:func:`bench.handwritten.hand_decode`); and **by hand in SQLAlchemy**: the same read
  in SQLAlchemy's connection and transaction, then the same decode — the stack doing
  the contract's work with nothing of coach's around it.

Every figure is **process CPU** (``time.process_time``: all threads — the loop and the
database threads), per turn or per read, for one store's batch of a round; a round runs
every store once, in an order that rotates, and a ratio is coach's batch over the peer's
batch *of the same round*; the report is the median of those ratios and their range.
Garbage is collected before each batch (outside the timing); the collections a batch
causes count. Wall time is printed beside it for reference only: on a shared machine
only the paired ratios mean something.

With ``--pg-transactions N`` it also counts, on PostgreSQL, the round trips that
``pool_pre_ping`` adds: N one-turn ``write_batch`` calls, with the pings the pool sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import platform
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from coach.persistence import open_repository
from coach.persistence.batch import Plan
from coach.persistence.codec import StepCodec
from coach.persistence.conversation import open_content
from coach.persistence.crypto import Sealer, new_data_key
from coach.persistence.driver import utc
from coach.persistence.memory import decode_or_empty
from coach.persistence.schema import utcnow

from .backends import SECRET, AgentsSQLiteBackend, CoachBackend, chat_items, turn_ops
from .handwritten import hand_decode
from .measure import coach_keys, pg_database, pg_url, sqlite_dir, sqlite_url
from .rawrows import KeptConnection, OneThread, sqlite_connect, sqlite_of, sqlite_time
from .text import Turn, turns

COMMAND = "python -m bench.storage_speed"
COACH = "coach write_batch"
SEED = "coach seed API"
RESUME = "coach resume_session"
PEER = AgentsSQLiteBackend.label
RAW = "raw sqlite3 (coach's rows)"
FLOOR = "floor: raw sqlite3 and coach's own work, in one call"
"""Per turn: the batch planned and sealed as ``write_batch`` does (:data:`WORK`), then
raw's statements; per read: what ``resume_session`` reads, read by raw in one
transaction, then opened, verified and unpickled as ``resume_session`` does. coach
without its storage layer: no change to that layer can bring coach below it."""
STEP_COLUMNS = ("session_id", "seq", "codec", "version", "signature", "payload")
"""A step row's columns as raw writes them (its message's id follows)."""
HAND = "by hand: raw sqlite3's read, then the contract's decode written by hand"
"""Per read: what ``resume_session`` reads, read by raw, then opened, verified and
unpickled into chat items by :func:`bench.handwritten.hand_decode` — the contract's work
with no layer around it (a hand-tuned reference, not a proven minimum)."""
HAND_STACK = (
    "by hand in SQLAlchemy: raw's statements in SQLAlchemy's connection and transaction, "
    "then the contract's decode written by hand"
)
"""Per read: :data:`HAND`, its statements run in a transaction of coach's own engine
(``begin()`` on a connection kept between reads, as coach's units keep theirs), on the
driver's cursor — the least SQLAlchemy can cost, no Core statement —, on raw's thread:
the reference with nothing of coach's storage layer but the stack it is built on."""
WORK = "coach's own work, no database"
"""Per turn: what coach does besides SQL — the ops checked, the steps pickled and signed,
every personal field sealed; per read: the window's messages and the steps opened,
verified and unpickled from rows read before the timer. The floor under coach's figure
that no database layer can remove."""


@dataclass(frozen=True)
class Batch:
    """One store's batch of a round: process CPU and wall seconds over ``count`` ops."""

    cpu: float
    wall: float
    count: int

    @property
    def cpu_per_op(self) -> float:
        """Process CPU seconds per op."""
        return self.cpu / self.count


async def measured(count: int, op: Callable[[int], Awaitable[object]]) -> Batch:
    """Run ``op(0) .. op(count - 1)`` under the process CPU clock (GC before, not in)."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(count):
        await op(n)
    return Batch(time.process_time() - cpu, time.perf_counter() - wall, count)


def ratio(batches: dict[str, list[Batch]], label: str, anchor: str) -> tuple[float, float, float]:
    """Median, min and max of ``label``/``anchor`` CPU per op, paired by round."""
    pairs = [
        a.cpu_per_op / b.cpu_per_op for a, b in zip(batches[label], batches[anchor], strict=True)
    ]
    return statistics.median(pairs), min(pairs), max(pairs)


def rotate(labels: Sequence[str], n: int) -> list[str]:
    """The round's order: rotated by ``n``, reversed every other round."""
    order = list(labels[n % len(labels) :]) + list(labels[: n % len(labels)])
    return order[::-1] if n % 2 else order


# --- raw sqlite3 on coach's schema -------------------------------------------------------


def write_turn_rows(
    conn: sqlite3.Connection,
    session_id: str,
    start: int,
    said: Sequence[tuple[str, object]],
    steps: Sequence[tuple[Any, ...]],
    at: str,
) -> None:
    """In the caller's transaction: the session's claim of its steps' positions, the
    messages ``(role, content)`` stamped ``at``, and the step rows (:data:`STEP_COLUMNS`),
    each linked to its message, in order."""
    claim_steps(conn, session_id, start, len(steps))
    ids = [insert_message(conn, session_id, role, text, at) for role, text in said]
    insert_steps(conn, session_id, steps, ids)


def insert_message(
    conn: sqlite3.Connection, session_id: str, role: str, content: object, at: str
) -> int:
    """One conversation row stamped ``at``; its id."""
    insert = (
        "INSERT INTO session_conversations (session_id, phase_id, role, content, "
        "interrupted, created_at) VALUES (?, NULL, ?, ?, 0, ?)"
    )
    found = conn.execute(insert, (session_id, role, content, at)).lastrowid
    assert found is not None
    return found


def claim_steps(conn: sqlite3.Connection, session_id: str, start: int, count: int) -> None:
    """The session's claim of ``count`` memory positions from ``start``."""
    claim = "UPDATE sessions SET memory_steps = ? WHERE id = ? AND memory_steps = ?"
    if conn.execute(claim, (start + count, session_id, start)).rowcount != 1:
        raise RuntimeError(f"stale claim of {session_id} at {start}")


def insert_steps(
    conn: sqlite3.Connection,
    session_id: str,
    steps: Sequence[tuple[Any, ...]],
    ids: Sequence[int | None],
) -> None:
    """The step rows (:data:`STEP_COLUMNS`), the ``n``-th linked to message ``ids[n]``
    (``None``: to none)."""
    conn.executemany(
        "INSERT INTO agent_steps (session_id, seq, codec, version, signature, payload, "
        "message_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(*row, ids[n]) for n, row in enumerate(steps)],
    )


def sealed_rows(
    plan: Plan, sealer: Sealer
) -> tuple[list[tuple[str, object]], list[tuple[Any, ...]]]:
    """A planned turn's messages ``(role, sealed content)`` and step rows
    (:data:`STEP_COLUMNS`), sealed as ``write_batch`` seals them."""
    said = [
        (row["role"], sealer.seal_row("session_conversations", row)["content"])
        for row in plan.messages
    ]
    steps = [sealer.seal_row("agent_steps", row) for row in plan.step_rows]
    return said, [tuple(row[c] for c in STEP_COLUMNS) for row in steps]


class RawCoachRows(OneThread):
    """stdlib ``sqlite3`` in one worker thread, on a database coach migrated: coach's rows
    without coach's Python (the step bytes are encoded before the timer)."""

    def __init__(self, path: Path) -> None:
        super().__init__("raw")
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.codec = StepCodec(SECRET)

    async def open(self, session_id: str) -> None:
        """Connect (in the worker thread) with coach's PRAGMAs (:func:`sqlite_connect`)."""
        self.session_id = session_id
        self.conn = await self.call(lambda: sqlite_connect(self.path))

    def rows(self, start: int, turn: Turn) -> tuple[int, list[tuple[Any, ...]]]:
        """The turn's step rows as coach stores them (text left out, signed with it)."""
        out = []
        texts = (turn.user, turn.assistant)
        for offset, (step, text) in enumerate(zip(chat_items(turn), texts, strict=True)):
            seq = start + offset
            payload = self.codec.dumps(step, elide_text=True)
            signed = self.codec.sign(self.session_id, seq, payload, text=text)
            out.append((self.session_id, seq, signed.codec, 2, signed.signature, payload))
        return start, out

    async def write_turn(self, turn: Turn, prepared: tuple[int, list[tuple[Any, ...]]]) -> None:
        """Claim, two messages, two steps, commit: one hand-off."""
        said = [("user", turn.user), ("assistant", turn.assistant)]
        await self.write_rows(prepared[0], said, prepared[1])

    async def write_rows(
        self,
        start: int,
        said: Sequence[tuple[str, object]],
        steps: Sequence[tuple[Any, ...]],
        at: datetime | None = None,
    ) -> None:
        """:func:`write_turn_rows` in a transaction of its own, committed: one hand-off.
        ``at``: the messages' time, which their seals bind (default: now)."""
        now = sqlite_time(at or datetime.now(UTC))

        def unit() -> None:
            conn = self.conn
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            write_turn_rows(conn, self.session_id, start, said, steps, now)
            conn.execute("COMMIT")

        await self.call(unit)

    async def write_plan(self, plan: Plan, sealer: Sealer) -> None:
        """A planned turn of this session, sealed (:func:`sealed_rows`), then written."""
        said, steps = sealed_rows(plan, sealer)
        await self.write_rows(plan.appends[self.session_id][0], said, steps, plan.now)

    async def read_resume(self, max_pairs: int = 25, max_steps: int = 100) -> int:
        """The rows ``resume_session`` reads, undecoded: one hand-off."""
        sid = self.session_id

        def unit() -> int:
            conn = self.conn
            assert conn is not None
            conn.execute("BEGIN")
            try:
                (count,) = conn.execute(
                    "SELECT memory_steps FROM sessions WHERE id = ?", (sid,)
                ).fetchone()
                outputs = conn.execute(
                    "SELECT * FROM phase_outputs WHERE session_id = ? ORDER BY created_at, id",
                    (sid,),
                ).fetchall()
                messages = conn.execute(
                    "SELECT role, content, phase_id, interrupted FROM session_conversations "
                    "WHERE session_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                    (sid, 2 * max_pairs),
                ).fetchall()
                steps = conn.execute(
                    "SELECT s.seq, s.codec, s.version, s.signature, s.payload, c.content "
                    "FROM agent_steps s LEFT JOIN session_conversations c ON c.id = s.message_id "
                    "WHERE s.session_id = ? AND s.seq >= ? ORDER BY s.seq",
                    (sid, max(0, count - max_steps)),
                ).fetchall()
                state = conn.execute(
                    "SELECT * FROM session_state WHERE session_id = ?", (sid,)
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return len(outputs) + len(messages[::-1]) + len(steps) + len(state)

        result: int = await self.call(unit)
        return result

    async def resume_rows(
        self, max_pairs: int = 25, first: int | None = None
    ) -> tuple[list[Any], list[Any], int]:
        """The window's messages ``(id, role, content, created_at)``, the steps from the
        oldest of them on (with their message's sealed text) and the stored step count.
        ``first``, the first of those steps when known: the steps are read by position,
        in one transaction with the session's phase outputs and state, as
        ``resume_session`` reads them (:data:`FLOOR`)."""

        def unit() -> tuple[list[Any], list[Any], int]:
            conn = self.conn
            assert conn is not None
            if first is None:
                return resume_rows(conn, self.session_id, max_pairs)
            conn.execute("BEGIN")
            try:
                return resume_rows(conn, self.session_id, max_pairs, first)
            finally:
                conn.execute("COMMIT")

        found: tuple[list[Any], list[Any], int] = await self.call(unit)
        return found

    async def aclose(self) -> None:
        """Close the connection and the thread."""
        if self.conn is not None:
            await self.call(self.conn.close)
            self.conn = None
        self.close()


def resume_rows(
    conn: sqlite3.Connection, sid: str, max_pairs: int = 25, first: int | None = None
) -> tuple[list[Any], list[Any], int]:
    """:meth:`RawCoachRows.resume_rows`'s statements on ``conn``, in the caller's
    transaction; with ``first``, the session's phase outputs and state are read too."""
    since = (
        "?" if first is not None else
        "(SELECT min(seq) FROM agent_steps WHERE session_id = ? AND message_id >= ?)"
    )  # fmt: skip
    (count,) = conn.execute("SELECT memory_steps FROM sessions WHERE id = ?", (sid,)).fetchone()
    if first is not None:
        conn.execute(
            "SELECT * FROM phase_outputs WHERE session_id = ? ORDER BY created_at, id",
            (sid,),
        ).fetchall()
        conn.execute("SELECT * FROM session_state WHERE session_id = ?", (sid,)).fetchall()
    window = conn.execute(
        "SELECT id, role, content, created_at FROM session_conversations "
        "WHERE session_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        (sid, 2 * max_pairs),
    ).fetchall()
    steps = conn.execute(
        "SELECT s.seq, s.codec, s.version, s.signature, s.payload, c.id, c.content, "
        "c.created_at, c.role FROM agent_steps s "
        "LEFT JOIN session_conversations c ON c.id = s.message_id "
        f"WHERE s.session_id = ? AND s.seq >= {since} ORDER BY s.seq",
        (sid, first) if first is not None else (sid, sid, min(row[0] for row in window)),
    ).fetchall()
    return window, [_StepRow(*row) for row in steps], int(count)


async def _coach_session(path: Path, mode: str = "batch") -> tuple[CoachBackend, Any]:
    coach = CoachBackend(sqlite_url(path), mode)
    await coach.open()
    return coach, await coach.new_session("s")


# --- writes ------------------------------------------------------------------------------


async def write_round(label: str, texts: Sequence[Turn]) -> Batch:
    """``label`` writes ``texts`` as one session's turns into a fresh file."""
    with sqlite_dir() as directory:
        if label in (COACH, SEED):
            coach, handle = await _coach_session(
                directory / "c.db", "batch" if label == COACH else "seed"
            )
            items = [coach.items(handle, t) for t in texts]
            try:
                return await measured(len(texts), lambda n: coach.write_turn(handle, items[n]))
            finally:
                await coach.aclose()
        if label == PEER:
            peer = AgentsSQLiteBackend(directory / "a.db")
            await peer.open()
            session = await peer.new_session("s")
            await session.get_items(limit=1)  # its tables, outside the timing
            prepared = [peer.items(session, t) for t in texts]
            try:
                return await measured(len(texts), lambda n: peer.write_turn(session, prepared[n]))
            finally:
                await peer.aclose()
        if label == WORK:
            return await encoding_round(texts)
        coach, handle = await _coach_session(directory / "r.db")
        await coach.aclose()
        raw = RawCoachRows(directory / "r.db")
        await raw.open(handle.id)
        try:
            if label == FLOOR:
                return await measured(len(texts), floor_writes(raw, texts))
            rows = [raw.rows(2 * n, t) for n, t in enumerate(texts)]
            return await measured(len(texts), lambda n: raw.write_turn(texts[n], rows[n]))
        finally:
            await raw.aclose()


def floor_writes(raw: RawCoachRows, texts: Sequence[Turn]) -> Callable[[int], Awaitable[None]]:
    """:data:`FLOOR` for ``texts``: turn ``n`` planned and sealed as :func:`encoding_round`
    does it, then written by ``raw``."""
    codec, sealer, sid = StepCodec(SECRET), Sealer("0" * 32, new_data_key()), raw.session_id
    batches = [turn_ops(sid, 2 * n, t) for n, t in enumerate(texts)]

    async def write(n: int) -> None:
        await raw.write_plan(Plan.of(batches[n], codec, utcnow), sealer)

    return write


async def encoding_round(texts: Sequence[Turn]) -> Batch:
    """:data:`WORK` for ``texts``: each turn's batch planned (checked, its steps pickled
    and signed) and its rows sealed, as ``write_batch`` does before its SQL."""
    codec, sealer, sid = StepCodec(SECRET), Sealer("0" * 32, new_data_key()), "1" * 32
    batches = [turn_ops(sid, 2 * n, t) for n, t in enumerate(texts)]

    async def work(n: int) -> None:
        plan = Plan.of(batches[n], codec, utcnow)
        for row in plan.messages:
            sealer.seal_row("session_conversations", row)
        for row in plan.step_rows:
            sealer.seal_row("agent_steps", row)

    return await measured(len(texts), work)


async def section_writes(rounds: int, count: int) -> dict[str, list[Batch]]:
    """``rounds`` rounds of every store writing ``count`` turns (after one warm-up)."""
    labels = (COACH, SEED, PEER, RAW, WORK, FLOOR)
    texts = turns(1, count)
    for label in labels:
        await write_round(label, texts[:20])
    batches: dict[str, list[Batch]] = {label: [] for label in labels}
    for n in range(rounds):
        for label in rotate(labels, n):
            batches[label].append(await write_round(label, texts))
        _log(f"write round {n + 1}/{rounds}", batches)
    return batches


# --- resume ------------------------------------------------------------------------------


async def section_resume(rounds: int, size: int, reads: int) -> dict[str, list[Batch]]:
    """One ``size``-turn session per store; every round reads it ``reads`` times per store."""
    texts = turns(size, size)
    with sqlite_dir() as directory:
        coach, handle = await _coach_session(directory / "c.db")
        await coach.bulk_load(handle, texts)
        raw = RawCoachRows(directory / "c.db")
        await raw.open(handle.id)
        peer = AgentsSQLiteBackend(directory / "a.db")
        await peer.open()
        session = await peer.new_session("s")
        await peer.bulk_load(session, texts)
        try:
            async with decoding(coach, raw) as decode:
                readers: dict[str, Callable[[int], Awaitable[object]]] = {
                    RESUME: lambda _n: coach.live_resume(handle),
                    PEER: lambda _n: peer.read_window(session),
                    RAW: lambda _n: raw.read_resume(),
                    WORK: lambda _n: decode(),
                    FLOOR: lambda _n: decode(read=True),
                    HAND: lambda _n: decode(read=True, by_hand=True),
                    HAND_STACK: lambda _n: decode(read=True, by_hand=True, stack=True),
                }
                for read in readers.values():  # warm-up: statement caches, first connections
                    for n in range(5):
                        await read(n)
                batches: dict[str, list[Batch]] = {label: [] for label in readers}
                for n in range(rounds):
                    for label in rotate(list(readers), n):
                        batches[label].append(await measured(reads, readers[label]))
                    _log(f"resume round {n + 1}/{rounds}", batches)
                return batches
        finally:
            await raw.aclose()
            await peer.aclose()
            await coach.aclose()


class _StepRow(NamedTuple):
    seq: int
    codec: str
    version: int
    signature: bytes
    payload: bytes
    message_id: int | None
    content: bytes | None
    message_at: str | None
    message_role: str | None


@contextlib.asynccontextmanager
async def decoding(
    coach: CoachBackend, raw: RawCoachRows
) -> AsyncIterator[Callable[..., Awaitable[int]]]:
    """:data:`WORK` for a resume: the window's 50 messages and the steps from the oldest
    of them on, read once (by ``raw``), then — each call — opened, verified and unpickled
    with coach's own functions, as ``resume_session`` does after its SQL. With
    ``read=True`` (:data:`FLOOR`) each call reads them again first; with ``by_hand=True``
    (:data:`HAND`) the decode is :func:`~bench.handwritten.hand_decode`'s; with
    ``stack=True`` as well (:data:`HAND_STACK`) the read runs in SQLAlchemy's connection
    (kept between reads, given back on leaving) and transaction, on ``raw``'s thread."""
    sid = raw.session_id
    sealer = await coach.repo.vault.sealer(coach.user_id)
    assert sealer is not None
    once = await raw.resume_rows()
    codec = StepCodec(SECRET)
    aead = sealer._aead  # the person's cipher, for the hand-written decode
    kept = KeptConnection(coach.repo.database.sync_engine)

    def in_stack(first: int) -> tuple[list[Any], list[Any], int]:
        with kept.transaction("BEGIN") as conn:
            return resume_rows(sqlite_of(conn), sid, first=first)

    async def decode(read: bool = False, by_hand: bool = False, stack: bool = False) -> int:
        at = once[1][0].seq if once[1] else once[2]
        if stack:
            window, steps, stored = await raw.call(lambda: in_stack(at))
        else:
            window, steps, stored = await raw.resume_rows(first=at) if read else once
        if by_hand:
            texts, steps_by_hand = hand_decode(aead, SECRET, sid, window, steps)
            return len(texts) + len(steps_by_hand)
        first = steps[0].seq if steps else stored
        known = {
            message_id: open_content(sealer, sid, utc(at), role, content)
            for message_id, role, content, at in window
        }
        decoded = decode_or_empty(codec, sealer, sid, steps, first, stored, known)
        if len(decoded) != len(steps):  # a refused row decodes to []: never time that
            raise RuntimeError("the bench's step rows did not decode")
        return len(known) + len(decoded)

    try:
        yield decode
    finally:
        await raw.call(kept.close)


# --- PostgreSQL: pool_pre_ping -------------------------------------------------------------


async def section_pings(transactions: int) -> tuple[int, Batch]:
    """``transactions`` one-turn ``write_batch`` calls on PostgreSQL; the pings sent."""
    async with pg_database("pings") as name:
        repo = await open_repository(
            pg_url(name), **coach_keys(pg_url(name)), secret=SECRET, create_schema=True
        )
        try:
            pings = 0
            dialect = repo.database.sync_engine.dialect
            do_ping = dialect.do_ping

            def counting(dbapi_connection: Any) -> bool:
                nonlocal pings
                pings += 1
                return do_ping(dbapi_connection)

            dialect.do_ping = counting  # type: ignore[method-assign]
            user = await repo.get_or_create_user("bench")
            sid = (await repo.create_session(user.id, "c")).id
            texts = turns(2, transactions)
            pings = 0

            async def turn(n: int) -> None:
                await repo.write_batch(turn_ops(sid, 2 * n, texts[n]))

            batch = await measured(transactions, turn)
            return pings, batch
        finally:
            await repo.aclose()


# --- report --------------------------------------------------------------------------------


def _log(what: str, batches: dict[str, list[Batch]]) -> None:
    figures = ", ".join(f"{k} {v[-1].cpu_per_op * 1e3:.3f}" for k, v in batches.items())
    print(f"  {what}: CPU ms/op {figures}", file=sys.stderr, flush=True)


def table(batches: dict[str, list[Batch]], anchor: str, unit: str) -> str:
    """Rows: median CPU and wall per op, and the paired ratio to ``anchor`` and to raw."""
    lines = [
        f"| store | CPU per {unit}, median (ms) | wall per {unit}, median (ms) "
        f"| / {anchor} (median of pairs, range) | / {RAW} |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, runs in batches.items():
        cpu = statistics.median(b.cpu_per_op for b in runs) * 1e3
        wall = statistics.median(b.wall / b.count for b in runs) * 1e3
        cells = []
        for other in (anchor, RAW):
            if label == other:
                cells.append("1")
            else:
                mid, low, high = ratio(batches, label, other)
                cells.append(f"{mid:.2f}× ({low:.2f}–{high:.2f})")
        lines.append(f"| {label} | {cpu:.3f} | {wall:.3f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds (15)")
    parser.add_argument("--turns", type=int, default=1000, help="turns written per batch")
    parser.add_argument("--resume-turns", type=int, default=2000, help="session length read")
    parser.add_argument("--reads", type=int, default=50, help="resume reads per batch")
    parser.add_argument("--sections", default="writes,resume", help="writes,resume")
    parser.add_argument("--pg-transactions", type=int, default=0, help="PostgreSQL: count pings")
    args = parser.parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    random.seed(1)
    print(
        f"{COMMAND} --rounds {args.rounds} --turns {args.turns} --resume-turns "
        f"{args.resume_turns} --reads {args.reads} --sections {args.sections}"
        + (f" --pg-transactions {args.pg_transactions}" if args.pg_transactions else "")
    )
    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    if "writes" in sections:
        writes = asyncio.run(section_writes(args.rounds, args.turns))
        print(f"\n**A turn written** ({args.rounds} rounds × {args.turns} turns)\n")
        print(table(writes, PEER, "turn"))
    if "resume" in sections:
        reads = asyncio.run(section_resume(args.rounds, args.resume_turns, args.reads))
        print(
            f"\n**Resume at {args.resume_turns:,} turns** "
            f"({args.rounds} rounds × {args.reads} reads)\n"
        )
        print(table(reads, PEER, "read"))
    if args.pg_transactions:
        pings, batch = asyncio.run(section_pings(args.pg_transactions))
        print(
            f"\n**PostgreSQL**: {args.pg_transactions} one-turn write_batch calls sent "
            f"{pings} pool pings ({pings / args.pg_transactions:.2f} per transaction); "
            f"CPU {batch.cpu_per_op * 1e3:.3f} ms, wall {batch.wall / batch.count * 1e3:.3f} ms "
            "per turn"
        )
    with contextlib.suppress(OSError):
        print(f"\nLoad average (1, 5, 15 min) at the end: {open('/proc/loadavg').read()[:14]}")


if __name__ == "__main__":
    main()
