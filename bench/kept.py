"""What coach keeps that the hand-written reference skips: each behaviour of the
contract on the write and resume paths, timed alone on the values those paths give it.

"By hand in SQLAlchemy" (``bench.handwritten``, ``bench.profiles``, ``bench.recorder_cpu``)
does the contract's work — the same rows sealed, signed and pickled, the same statements
in SQLAlchemy's connection and transaction — and nothing else. Coach must also do what
its specification and tests ask of every write and read; each of these costs CPU on
every turn, and no rewrite takes it away without taking the behaviour with it:

* every op checked before anything is written (a bad role, text or phase id writes
  nothing: ``message_row``);
* each message stamped with a time of its own, a microsecond apart (its time names it
  in its seal);
* ids bound as ids (a value that is no id matches nothing: ``HexId``), times refused
  unless aware and stored in UTC (``UTCDateTime``);
* each statement's listeners told (``driver_sql``; its translation of driver errors
  is not timed);
* the unit of work's crash contract: a unit its caller gave up on rolls back instead of
  committing later (``Database.run``'s flag and ``_transact``); on PostgreSQL, a
  stalled database reported within the timeout;
* each session's owner's key found before its rows are sealed or opened (per-person
  keys: ``Owners``);
* on PostgreSQL, a batch's sessions locked in id order, so writers of overlapping
  sessions wait for each other instead of deadlocking (the claim's lock of them first,
  ``claim_steps(lock=...)``);
* the recorder: writes queued in order and committed in groups, with back-pressure,
  commit-lag metrics and a flush (``Recorder``, here on a store that writes nothing);
* before a live resume, the process's recorder flushed (the issue's live resume);
* a resume's records: the session, its phase outputs and its state opened, and the
  context the agent is handed (its history, its next phase) built.

Each behaviour's cost is coach's own code for it, called as its path calls it, many
times in a row, in rotated rounds (the median; this thread's CPU, or the process's for
what awaits). Its calls per unit come from the path's shape: a turn, a message of the
recorder's batches, a resume. A ledger's sum is a lower bound — in place, with the rest
of the path around it, the same code costs at least as much — and added to the
reference's own cost measured in the same run it gives the least coach can cost while
it keeps every behaviour: an estimate across two measurements, named so where reported.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Dialect

from coach.conversation.recorder import Recorder
from coach.persistence.batch import Plan
from coach.persistence.codec import StepCodec
from coach.persistence.conversation import WindowMessage, fetch_window, message_row
from coach.persistence.driver import _FEW_ROWS, claim_steps
from coach.persistence.engine import _Caller, _listeners, _transact, driver_sql
from coach.persistence.owners import Owners
from coach.persistence.phases import output_record
from coach.persistence.resume import _statements, resume_context
from coach.persistence.schema import HexId, UTCDateTime, utcnow
from coach.persistence.sessions import session_record
from coach.persistence.zones import _STATE_ROW, state_record
from coach.state.resume import completed_phase_ids, next_phase_id
from coach.store import AddMessage, AppendSteps, StateRecord

from .backends import SECRET, CoachBackend, turn_ops
from .measure import sqlite_dir, sqlite_url, table
from .recorder_cpu import BATCH, new_sessions, pg_repo, record, workload
from .text import turns

__all__ = ["Kept", "Ledger", "Shape", "measure", "report", "shape"]

CHECKS = "every op checked before anything is written (`message_row`, over a plain row)"
OWN_TIME = "each message its own time, a microsecond apart (`Plan._add`)"
IDS = "an id bound as an id: a value that is no id matches nothing (`HexId`)"
TIMES = "a time refused unless aware, stored in UTC (`UTCDateTime`)"
LISTENERS = (
    "a statement's listeners told (`driver_sql`'s checks for them: SQLAlchemy's flag, "
    "then its two events; its translation of driver errors is not counted)"
)
UNIT = (
    "a unit its caller gave up on rolls back, never commits later (`Database.run`'s "
    "flag and `_transact`, over a bare transaction)"
)
STALL = "a stalled database reported within the timeout (`asyncio.timeout`, PostgreSQL)"
OWNERS = (
    "each session's owner's key found before sealing, a missing one refused (`Owners.of_sessions`)"
)
PERSON = "the person's key found, and the owner in the query (`Owners.of_person`)"
LOCK = (
    "a batch's sessions locked in id order: overlapping writers wait, never deadlock "
    "(the claim's lock of them first, over the same claim without it)"
)
RECORDER = (
    "the recorder: queued in order, group commit, back-pressure, commit-lag metrics, "
    "flush (a `Recorder` on a store that writes nothing)"
)
READ_UNIT = f"{UNIT}, a read"
FLUSH = "the process's recorder flushed before a live resume (idle, as at a reconnect)"
OPENED = (
    "the session, its phase outputs and its state opened into records (the reference "
    "reads them sealed and leaves them: `session_record`, `output_record`, `state_record`)"
)
CONTEXT = (
    "the resumed context built: the history from the outputs and the window, the "
    "completed phases, the next phase (`reconstruct_history`, `next_phase_id`)"
)


@dataclass(frozen=True)
class Kept:
    """One behaviour: its CPU per call (µs, median of rounds) and its calls per unit."""

    behaviour: str
    per_call: float
    calls: float

    @property
    def cost(self) -> float:
        """µs per unit of the path."""
        return self.per_call * self.calls


@dataclass(frozen=True)
class Ledger:
    """A path's kept behaviours, per ``unit`` (a turn, a message, a resume); ``key``
    names the path: ``turn``, ``resume`` or a recorder's ``db sessions × turns``."""

    key: str
    title: str
    unit: str
    rows: tuple[Kept, ...]

    @property
    def total(self) -> float:
        """µs per unit: the least coach adds to the reference while it keeps them all."""
        return sum(row.cost for row in self.rows)


@dataclass(frozen=True)
class Shape:
    """A path's calls per unit: messages, step rows, sessions, statements, transactions,
    and the transactions that lock their sessions first (PostgreSQL, several sessions)."""

    messages: float
    steps: float
    sessions: float
    statements: float
    transactions: float
    locks: float = 0.0

    def calls(self) -> dict[str, float]:
        """Each behaviour's calls per unit."""
        return {
            CHECKS: self.messages,
            OWN_TIME: self.messages,
            IDS: self.messages + self.steps + self.sessions,  # each row's, each claim's
            TIMES: self.messages,
            LISTENERS: self.statements,
            UNIT: self.transactions,
            STALL: self.transactions,
            OWNERS: self.transactions,
            LOCK: self.locks,
        }


def shape(ops: Sequence[Any], batch: int, *, postgres: bool, per: str = "message") -> Shape:
    """What ``write_batch`` does for ``ops`` cut into batches of ``batch``, per message
    (``per="message"``) or in all (``per="all"``): SQLite claims each session's steps in
    a statement of its own, PostgreSQL all of a batch's in one (which locks them first,
    when there are several); then the messages in one insert (on SQLite, a turn's few in
    one each), and one insert of the steps."""
    messages = steps = sessions = statements = locks = 0
    batches = range(0, len(ops), batch)
    for first in batches:
        chunk = ops[first : first + batch]
        said = sum(isinstance(op, AddMessage) for op in chunk)
        appended = {op.session_id for op in chunk if isinstance(op, AppendSteps)}
        messages += said
        steps += sum(len(op.steps) for op in chunk if isinstance(op, AppendSteps))
        sessions += len({op.session_id for op in chunk})
        locked = postgres and len(appended) > 1
        locks += locked
        few = not postgres and said <= _FEW_ROWS  # SQLite: an INSERT per message
        claims = 1 if postgres else len(appended)
        statements += claims + (said if few else said > 0) + (len(appended) > 0)
    every = messages if per == "message" else 1
    return Shape(
        messages / every,
        steps / every,
        sessions / every,
        statements / every,
        len(batches) / every,
        locks / every,
    )


Part = Callable[[], Awaitable[float]]


async def _medians(parts: dict[str, Part], rounds: int) -> dict[str, float]:
    """Each part's µs per call, median of ``rounds`` rounds in an order that rotates."""
    found: dict[str, list[float]] = {name: [] for name in parts}
    names = list(parts)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            found[name].append(await parts[name]())
    return {name: statistics.median(values) for name, values in found.items()}


def _timed(call: Callable[[], object], count: int) -> Callable[[], float]:
    """µs of this thread's CPU per call of ``call``, over ``count`` calls."""

    def once() -> float:
        start = time.thread_time()
        for _ in range(count):
            call()
        return (time.thread_time() - start) / count * 1e6

    return once


def _awaited(call: Callable[[], Awaitable[object]], count: int) -> Part:
    """µs of the process's CPU per awaited call of ``call``, over ``count`` calls."""

    async def once() -> float:
        start = time.process_time()
        for _ in range(count):
            await call()
        return (time.process_time() - start) / count * 1e6

    return once


def _beside(timed: Callable[[], float], bare: Callable[[], float]) -> Callable[[], float]:
    """``timed`` less ``bare``, measured one after the other."""
    return lambda: timed() - bare()


def _thread_parts(
    conn: Connection, message: AddMessage, count: int, begin: str | None, lock: list[str]
) -> dict[str, Callable[[], float]]:
    """The behaviours that run where the unit runs, on ``conn``. On SQLite (``begin``:
    how a unit begins) a unit watches for its caller giving up; on PostgreSQL (``lock``:
    the sessions a batch locks) the caller's timeout does that, and the unit does not."""
    dialect, at = conn.dialect, utcnow()
    ids = HexId().bind_processor(dialect)
    assert ids is not None

    def plain() -> dict[str, Any]:  # the reference's row: the op's values as they are
        return {
            "session_id": message.session_id,
            "phase_id": message.phase_id,
            "role": message.role,
            "content": message.content,
            "interrupted": message.interrupted,
            "created_at": at,
        }

    # Claims that hold for no session: the same statement and locks, and no row version
    # written — rolled-back versions would pile up over the rounds and slow both sides.
    claims = [(sid, -1, 1) for sid in lock]

    def claimed(locking: list[str]) -> Callable[[], None]:
        def claim() -> None:
            with conn.begin() as transaction:
                claim_steps(conn, claims, lock=locking)
                transaction.rollback()

        return claim

    few = _transactions(count)
    parts = {
        CHECKS: _beside(_timed(lambda: message_row(message, at), count), _timed(plain, count)),
        OWN_TIME: _timed(lambda: at + timedelta(microseconds=7), count),
        IDS: _timed(lambda: ids(message.session_id), count),
        TIMES: _times(dialect, at, count),
        LISTENERS: _timed(lambda: _told(conn), count),
    }
    if lock:
        parts[LOCK] = _beside(_timed(claimed(lock), few), _timed(claimed([]), few))
    else:
        parts[UNIT] = _unit(conn, begin, few)
    return parts


def _told(conn: Connection) -> bool:
    """``driver_sql``'s checks for a statement's listeners."""
    events = _listeners(conn)
    return events is not None and (
        bool(events.before_cursor_execute) or bool(events.after_cursor_execute)
    )


def _times(dialect: Dialect, at: datetime, count: int) -> Callable[[], float]:
    """A time's check and conversion to UTC: on SQLite, coach's bind of it over the
    reference's (the same text, of a time it knows is UTC); on PostgreSQL, where both
    hand the driver an aware time, ``UTCDateTime``'s conversion alone."""
    if dialect.name != "sqlite":
        return _timed(lambda: UTCDateTime().process_bind_param(at, dialect), count)
    bind = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert bind is not None
    naive = at.replace(tzinfo=None)
    return _beside(
        _timed(lambda: bind(at), count), _timed(lambda: naive.isoformat(" ", "microseconds"), count)
    )


def _transactions(count: int) -> int:
    """Transactions a round times, for ``count`` calls of a cheap behaviour (a
    transaction is a round trip on PostgreSQL)."""
    return max(1, count // 20)


def _bare(conn: Connection, begin: str | None) -> None:
    """A bare transaction on ``conn``, begun with ``begin`` (SQLite) or as the driver does."""
    with conn.begin():
        if begin is not None:
            driver_sql(conn, begin)


def _unit(conn: Connection, begin: str | None, few: int) -> Callable[[], float]:
    """The unit's guard against an abandoned caller: ``_transact`` with its flag, over a
    bare transaction, ``few`` of each."""

    def watched() -> None:  # a new flag per unit, as `Database.run` makes one
        _transact(conn, _nothing, _Caller(), begin)

    return _beside(_timed(watched, few), _timed(partial(_bare, conn, begin), few))


def _nothing(_conn: Connection) -> None:
    return None


class _Nowhere:
    """A store that writes nothing: what a recorder costs on its own. (A recorder reads
    back only after a failed batch, which never comes.)"""

    async def write_batch(self, ops: Sequence[Any]) -> None:
        return None

    async def agent_step_count(self, session_id: str) -> int:
        raise AssertionError("a store that writes nothing is never read")

    async def get_state(self, session_id: str) -> StateRecord:
        raise AssertionError("a store that writes nothing is never read")


async def _recorded(ops: Sequence[Any]) -> float:
    """µs of CPU per message of a ``Recorder`` recording ``ops`` into nothing
    (:func:`~bench.recorder_cpu.record`), less the same loop's yields between turns
    without it (the reference does not yield)."""
    messages = sum(isinstance(op, AddMessage) for op in ops)
    cpu, _, _ = await record(_Nowhere(), ops)
    gc.collect()
    start = time.process_time()
    for n in range(len(ops)):
        if n % 3 == 2:  # as record's loop: a conversation yields between turns
            await asyncio.sleep(0)
    return (cpu - (time.process_time() - start)) / messages * 1e6


async def _flush(recorder: Recorder) -> None:
    async with asyncio.timeout(5):  # as the live resume waits for it
        await recorder.flush()


async def _sealers(owners: Owners, plan: Plan) -> None:
    """As ``write_batch`` finds them: its sessions' owners' sealers, every one found."""
    sessions = plan.session_ids
    if sessions - (await owners.of_sessions(sessions)).keys():
        raise AssertionError("a session of the bench has no owner")


def _stalls(count: int) -> Part:
    async def bounded() -> None:
        # the timeout's own cost (a timer set and cancelled) around a unit
        async with asyncio.timeout(30):  # noqa: ASYNC100
            pass

    return _awaited(bounded, count)


async def _now(part: Callable[[], float]) -> float:
    return part()


def _in_greenlet(_conn: Connection, part: Callable[[], float]) -> float:
    return part()


Shapes = Sequence[tuple[int, int]]
"""The recorder's workloads, sessions × turns of each (``bench.recorder_cpu``'s); the
first of one session."""


async def measure(shapes: Shapes, rounds: int = 11, count: int = 20_000) -> list[Ledger]:
    """Every path's ledger: a turn through ``write_batch`` and a live resume (SQLite),
    then a recorder's message on SQLite and on PostgreSQL for each of ``shapes``."""
    ledgers = []
    most = max(s for s, _ in shapes)
    with sqlite_dir() as directory:
        coach = CoachBackend(sqlite_url(directory / "k.db"))
        await coach.open()
        try:
            sessions = [(await coach.new_session(str(n))).id for n in range(most)]
            ledgers += await _sqlite_ledgers(coach, sessions, shapes, rounds, count)
        finally:
            await coach.aclose()
    async with pg_repo() as (repo, _, _):
        sessions = await new_sessions(repo, most)
        ledgers += await _pg_ledgers(repo, sessions, shapes, rounds, count)
    return ledgers


def _loads(sessions: list[str], shapes: Shapes) -> dict[tuple[int, int], list[Any]]:
    return {(s, t): workload(sessions[:s], t, seed=5) for s, t in shapes}


async def _sqlite_ledgers(
    coach: CoachBackend, sessions: list[str], shapes: Shapes, rounds: int, count: int
) -> list[Ledger]:
    repo = coach.repo
    turn = turn_ops(sessions[0], 0, turns(4, 1)[0])
    message = next(op for op in turn if isinstance(op, AddMessage))
    loads = _loads(sessions, shapes)
    idle = Recorder(_Nowhere())
    idle.start()
    try:
        with repo.database.sync_engine.connect() as conn:
            writes = _thread_parts(conn, message, count, "BEGIN IMMEDIATE", [])
            parts: dict[str, Part] = {name: partial(_now, part) for name, part in writes.items()}
            parts[READ_UNIT] = partial(_now, _unit(conn, "BEGIN", _transactions(count)))
            parts[PERSON] = _awaited(partial(repo._owners.of_person, coach.user_id), count // 10)
            parts[FLUSH] = _awaited(partial(_flush, idle), count // 10)
            parts.update(_recorder_parts(repo, loads, count))
            found = await _medians(parts, rounds)
    finally:
        await idle.aclose()
    resumed = await coach.new_session("resumed")
    await coach.bulk_load(resumed, turns(9, 60))
    parts = await _resume_parts(coach, resumed.id, count // 10)
    found.update(await _medians(parts, rounds))
    statements = await _resume_statements(coach, resumed)
    one = shape(turn, BATCH, postgres=False, per="all")
    ledgers = [
        # the first shape's batches are of one session, as a turn's
        _ledger("turn", "a turn through `write_batch` (SQLite)", "turn", one, found, f"{OWNERS} 1"),
        Ledger(
            "resume",
            "a live resume at any length (SQLite)",
            "resume",
            (
                Kept(FLUSH, found[FLUSH], 1),
                Kept(PERSON, found[PERSON], 1),
                Kept(UNIT, found[READ_UNIT], 1),
                Kept(LISTENERS, found[LISTENERS], statements),
                Kept(OPENED, found[OPENED], 1),
                Kept(CONTEXT, found[CONTEXT], 1),
            ),
        ),
    ]
    for (s, t), ops in loads.items():
        ledgers.append(_recorder_ledger("sqlite", s, t, ops, found, postgres=False))
    return ledgers


def _recorder_parts(
    repo: Any, loads: dict[tuple[int, int], list[Any]], count: int
) -> dict[str, Part]:
    """Per workload: the recorder into nothing, and the owners' lookup of its first batch."""
    parts: dict[str, Part] = {}
    for (s, _), ops in loads.items():
        parts[f"{RECORDER} {s}"] = partial(_recorded, ops)
        first = Plan.of(ops[:BATCH], StepCodec(SECRET), utcnow)
        parts[f"{OWNERS} {s}"] = _awaited(partial(_sealers, repo._owners, first), count // 100)
    return parts


def _ledger(
    key: str, title: str, unit: str, path: Shape, found: dict[str, float], owners: str
) -> Ledger:
    """The write path's behaviours that ``found`` has (``owners``: its owners' lookup for
    this path's batches), each as often as ``path`` calls it."""
    calls, found = path.calls(), {**found, OWNERS: found[owners]}
    names = (CHECKS, OWN_TIME, IDS, TIMES, LISTENERS, UNIT, OWNERS, STALL, LOCK)
    rows = tuple(Kept(n, found[n], calls[n]) for n in names if n in found and calls[n])
    return Ledger(key, title, unit, rows)


def _recorder_ledger(
    db: str,
    sessions: int,
    turns_: int,
    ops: Sequence[Any],
    found: dict[str, float],
    *,
    postgres: bool,
) -> Ledger:
    path = shape(ops, BATCH, postgres=postgres)
    key = f"{db} {sessions} × {turns_:,}"
    write = _ledger(
        key,
        f"a message through the recorder, {key}",
        "message",
        path,
        found,
        f"{OWNERS} {sessions}",
    )
    return Ledger(
        key,
        write.title,
        write.unit,
        (Kept(RECORDER, found[f"{RECORDER} {sessions}"], 1), *write.rows),
    )


async def _resume_parts(coach: CoachBackend, session_id: str, count: int) -> dict[str, Part]:
    """A resume's records and context (:func:`resume_kept`), ``count`` of each per round."""
    opened, context = await resume_kept(coach, session_id)
    return {
        OPENED: partial(_now, _timed(opened, count)),
        CONTEXT: partial(_now, _timed(context, count)),
    }


async def resume_kept(
    coach: CoachBackend, session_id: str
) -> tuple[Callable[[], None], Callable[[], None]]:
    """:data:`OPENED` and :data:`CONTEXT`: a resume's records opened and its context built,
    as ``read_resume`` makes them from the rows it read of ``session_id`` (read once,
    here), one call each. ``session_id`` must have messages older than its window."""
    repo = coach.repo
    sealer = await repo._owners.of_person(coach.user_id)
    by_id, outputs_of = _statements(repo.phase_ids)
    ids = {"b_id": session_id, "b_user": coach.user_id}

    def rows(conn: Connection) -> tuple[Any, list[Any], list[Any], list[WindowMessage]]:
        outputs = outputs_of.rows(conn, ids)
        state = _STATE_ROW.rows(conn, ids)
        return by_id.rows(conn, ids)[0], outputs, state, fetch_window(conn, session_id, 51, sealer)

    session, output_rows, state, messages = await repo.database.run(rows, write=False, what="b")
    outputs = [output_record(row, sealer, prompt_marker=True) for row in output_rows]
    assert len(messages) == 51 and outputs and state  # a window with older messages

    def opened() -> None:
        session_record(session, sealer)
        [output_record(row, sealer, prompt_marker=True) for row in output_rows]
        state_record(state[0], sealer)

    def context() -> None:  # as read_resume builds it
        done = completed_phase_ids(outputs)
        resume_context(outputs, done, messages[-50:], repo.phase_ids, 25)
        next_phase_id(repo.phase_ids, outputs)

    return opened, context


async def _resume_statements(coach: CoachBackend, handle: Any) -> int:
    """The statements one live resume of ``handle`` runs (counted by a listener, once,
    untimed)."""
    engine = coach.repo.database.sync_engine
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        await coach.live_resume(handle)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(seen)


async def _pg_ledgers(
    repo: Any, sessions: list[str], shapes: Shapes, rounds: int, count: int
) -> list[Ledger]:
    loads = _loads(sessions, shapes)
    message = next(op for op in loads[shapes[0]] if isinstance(op, AddMessage))
    many = loads[shapes[-1]][:BATCH]  # the batch of the most sessions: what they lock
    locked = sorted({op.session_id for op in many})
    async with repo.database._async.connect() as conn:
        thread = await conn.run_sync(lambda c: _thread_parts(c, message, count, None, locked))
        parts: dict[str, Part] = {
            name: partial(conn.run_sync, _in_greenlet, part) for name, part in thread.items()
        }
        parts[STALL] = _stalls(count // 10)
        parts.update(_recorder_parts(repo, loads, count))
        found = await _medians(parts, rounds)
    return [
        _recorder_ledger("postgres", s, t, ops, found, postgres=True)
        for (s, t), ops in loads.items()
    ]


def report(ledgers: Sequence[Ledger]) -> str:
    """Each ledger as a table, its sum last."""
    out = []
    for ledger in ledgers:
        rows = [
            [k.behaviour, f"{k.per_call:.2f}", f"{k.calls:.2f}", f"{k.cost:.2f}"]
            for k in ledger.rows
        ]
        rows.append([f"**what coach keeps, per {ledger.unit}**", "", "", f"**{ledger.total:.1f}**"])
        out += [
            f"**{ledger.title}**",
            "",
            table(
                [
                    "behaviour kept (coach's own code for it)",
                    "µs per call",
                    f"calls per {ledger.unit}",
                    f"µs per {ledger.unit}",
                ],
                rows,
            ),
            "",
        ]
    return "\n".join(out).rstrip()


COMMAND = "python -m bench.kept"


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: every path's ledger, as ``bench.results`` reports them."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="rotated rounds (11)")
    parser.add_argument("--count", type=int, default=20_000, help="calls per round (20,000)")
    parser.add_argument("--turns", type=int, default=1000, help="recorder turns (1,000)")
    parser.add_argument("--sessions", type=int, default=50, help="recorder sessions (50)")
    a = parser.parse_args(argv)
    print(
        f"{COMMAND} --rounds {a.rounds} --count {a.count} --turns {a.turns} --sessions {a.sessions}"
    )
    shapes = ((1, a.turns), (a.sessions, max(1, a.turns // a.sessions)))
    print(report(asyncio.run(measure(shapes, a.rounds, a.count))))


if __name__ == "__main__":
    main()
