"""The recorder's CPU per message against raw writers of the same rows, the same batching.

Run from the repository root::

    python -m bench.recorder_cpu                          # SQLite and PostgreSQL
    python -m bench.recorder_cpu --rounds 3 --turns 200   # a smoke run
    python -m bench.recorder_cpu --encode-parts           # the encoding against its C calls

Issue 25's target: recorder CPU per message ≤ 2× raw, on SQLite and on PostgreSQL.

* **coach** — a ``Recorder`` over coach's repository, as a worker runs it: every turn of
  the workload (``message`` user, ``message`` assistant, ``steps`` of their two
  ``ChatMessage`` memory steps) is submitted as fast as back-pressure allows, yielding to
  the loop once per turn, then ``flush``: the figure runs from the first submit until
  everything is durable.
* **raw** — the same ops cut into batches of the recorder's ``max_batch`` (100, what it
  commits under this load: the report prints the recorder's ops per commit beside it),
  each batch the same rows coach stores (:mod:`bench.rawrows`; encoded and signed before
  the timer), one transaction per batch: stdlib ``sqlite3`` in one worker thread, or
  ``asyncpg`` on the loop.
* **floor** — coach's ``Recorder`` over raw's writer (:class:`bench.rawrows.RawStore`):
  the same queue and batches, each batch encoded, signed and sealed as coach does it,
  then raw's statements. Nothing of coach's storage layer runs, so no change to it can
  bring coach below this figure: when the floor over raw is above the target, the
  target cannot be met by the storage layer.
* **by hand** — raw's CPU plus that of making the same rows by hand
  (:func:`bench.handwritten.hand_batches`: the texts and steps sealed, the steps pickled
  and signed, as coach's contract asks, in one loop and nothing else), over raw's: the
  contract's work with no recorder and no storage layer around it, a hand-tuned
  reference (not a proven minimum). Above the target, it leaves no room for them.
* **by hand in SQLAlchemy** — the same rows made by hand batch by batch in the timed
  loop and written with raw's statements in SQLAlchemy's connection and transaction
  (:class:`bench.rawrows.RawSQLiteOverSQLAlchemy` on coach's own SQLite engine, or
  :class:`bench.rawrows.RawOverSQLAlchemy` on PostgreSQL), no recorder: the stack doing
  the contract's work with nothing of coach's, measured in one piece.

With ``--encode-parts``, instead: the part of coach's CPU per message that raw's figure
leaves out — turning the ops into rows (:func:`raw_batches`: sealing, pickling, signing)
— set beside its calls into C alone (:func:`c_calls`), one session of ``--turns`` turns,
``--rounds`` rounds in alternating order: how much of that work is Python around them.

Workloads: one session of ``--turns`` turns, and ``--sessions`` sessions sharing the
same number of turns round-robin (as concurrent conversations interleave). Every figure
is **process CPU of all threads** (``time.process_time``); garbage is collected before
each run (outside the timing) and the collections a run causes count. A round runs
coach, raw, the floor and the rows by hand in SQLAlchemy once each, in an order that
rotates; a ratio is the median over rounds of coach's (or the floor's, or the rows by
hand in SQLAlchemy's) CPU per message over raw's in the same round (range in brackets).
PostgreSQL's own CPU (the server process) is in none of them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hmac
import os
import pickle
import statistics
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coach.conversation.recorder import Recorder
from coach.persistence import open_repository
from coach.persistence.codec import COMPRESS_FROM, PICKLE_PROTOCOL, StepCodec
from coach.persistence.crypto import Sealer, associated, new_data_key
from coach.store import AddMessage

from .backends import SECRET, turn_ops
from .handwritten import hand_batches, write_hand_batches
from .measure import coach_keys, pg_database, pg_url, sqlite_dir, sqlite_url, table, verdict
from .rawrows import (
    RawAsyncpg,
    RawOverSQLAlchemy,
    RawSQLite,
    RawSQLiteOverSQLAlchemy,
    RawStore,
    raw_batches,
)
from .text import turns

COMMAND = "python -m bench.recorder_cpu"
BATCH = 100
"""The recorder's ``max_batch`` (its default), and so the raw writers' batch."""
TARGET = 2.0
KINDS = ("coach", "raw", "floor", "stack")


@dataclass
class RecorderCpu:
    """One database and workload: per-round CPU and wall per message of both writers."""

    db: str
    sessions: int
    turns: int
    coach_cpu: list[float] = field(default_factory=list)
    raw_cpu: list[float] = field(default_factory=list)
    coach_wall: list[float] = field(default_factory=list)
    raw_wall: list[float] = field(default_factory=list)
    encode_cpu: list[float] = field(default_factory=list)
    """CPU per message of turning the ops into raw rows (encoding, signing): not in raw."""
    ops_per_commit: list[float] = field(default_factory=list)
    floor_cpu: list[float] = field(default_factory=list)
    """CPU per message of coach's recorder over raw's writer (:class:`RawStore`)."""
    hand_cpu: list[float] = field(default_factory=list)
    """CPU per message of encoding the rows by hand (:func:`hand_batches`): not in raw."""
    stack_cpu: list[float] = field(default_factory=list)
    """CPU per message of the rows made by hand and written with raw's statements in
    SQLAlchemy's connection and transaction (:func:`write_by_hand`), no recorder."""

    @property
    def name(self) -> str:
        """``1 × 1,000`` style."""
        return f"{self.sessions} × {self.turns:,}"

    @property
    def ratios(self) -> list[float]:
        """coach / raw CPU per message, per round."""
        return [a / b for a, b in zip(self.coach_cpu, self.raw_cpu, strict=True)]

    @property
    def floor_ratios(self) -> list[float]:
        """The floor / raw CPU per message, per round."""
        return [a / b for a, b in zip(self.floor_cpu, self.raw_cpu, strict=True)]

    @property
    def hand_ratios(self) -> list[float]:
        """(raw + the rows encoded by hand) / raw CPU per message, per round: the
        contract's work with no recorder or storage layer around it, over raw."""
        return [(r + h) / r for r, h in zip(self.raw_cpu, self.hand_cpu, strict=True)]

    @property
    def stack_ratios(self) -> list[float]:
        """By hand in SQLAlchemy / raw CPU per message, per round: the stack doing the
        contract's work, with nothing of coach's, over raw."""
        return [a / b for a, b in zip(self.stack_cpu, self.raw_cpu, strict=True)]


def workload(sessions: Sequence[str], texts_per: int, seed: int) -> list[Any]:
    """Every turn's three ops, the sessions round-robin (turn 1 of each, then turn 2 …)."""
    texts = turns(seed, len(sessions) * texts_per)
    ops: list[Any] = []
    for t in range(texts_per):
        for s, sid in enumerate(sessions):
            ops += turn_ops(sid, 2 * t, texts[s * texts_per + t])
    return ops


class _CountingStore:
    """The repository, counting the ops of each batch the recorder commits."""

    def __init__(self, repo: Any) -> None:
        self._repo = repo
        self.sizes: list[int] = []

    async def write_batch(self, ops: Sequence[Any]) -> None:
        await self._repo.write_batch(ops)
        self.sizes.append(len(ops))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)


async def submit_all(recorder: Recorder, ops: Sequence[Any]) -> None:
    """Submit ``ops`` (turns of three) as fast as back-pressure allows, yielding to the
    loop at the end of each turn as a conversation does."""
    for n, op in enumerate(ops):
        recorder.submit(op)
        if n % 3 == 2:
            if recorder.saturated:
                await recorder.wait_for_capacity()
            await asyncio.sleep(0)


async def record(repo: Any, ops: Sequence[Any]) -> tuple[float, float, float]:
    """Record ``ops`` through a new ``Recorder``: (CPU s, wall s, ops per commit)."""
    store = _CountingStore(repo)
    recorder = Recorder(store, max_batch=BATCH)
    recorder.start()
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    await submit_all(recorder, ops)
    await recorder.flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stats = recorder.stats()
    await recorder.aclose()
    if stats.errors or stats.dropped or stats.written != len(ops):
        raise RuntimeError(f"the recorder lost writes: {stats}")
    return cpu, wall, statistics.fmean(store.sizes)


async def write_raw(
    raw: RawSQLite | RawAsyncpg, ops: Sequence[Any]
) -> tuple[float, float, float, float]:
    """Write ``ops``'s rows in batches of :data:`BATCH`: (CPU s, wall s, CPU s of encoding
    them first with coach's functions, CPU s of encoding them by hand — both outside the
    first two)."""
    gc.collect()
    aead = AESGCM(new_data_key())
    by_hand = time.process_time()
    made = hand_batches(ops, SECRET, aead, BATCH)
    by_hand = time.process_time() - by_hand
    del made  # freed outside the timer, as the rows coach encodes below are
    gc.collect()
    encoding = time.process_time()
    batches = raw_batches(ops, StepCodec(SECRET), BATCH)
    encoding = time.process_time() - encoding
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for rows in batches:
        await raw.write(rows)
    return time.process_time() - cpu, time.perf_counter() - wall, encoding, by_hand


async def write_by_hand(
    writer: RawSQLiteOverSQLAlchemy | RawOverSQLAlchemy,
    ops: Sequence[Any],
    *,
    aead: AESGCM | None = None,
    secret: bytes = SECRET,
    batch: int = BATCH,
) -> tuple[float, float]:
    """``ops``'s rows made by hand (:func:`hand_batches`) batch by batch in the timed
    loop, each written by ``writer`` (raw's statements in SQLAlchemy's connection and
    transaction): (CPU s, wall s). No recorder, no storage layer. ``aead`` and
    ``secret``: the person's cipher and the memory secret, for rows coach reads back
    (default: a random key, the bench's secret)."""
    aead = aead or AESGCM(new_data_key())
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    await write_hand_batches(writer, ops, secret, aead, batch)
    return time.process_time() - cpu, time.perf_counter() - wall


@asynccontextmanager
async def pg_repo() -> AsyncIterator[tuple[Any, str, str]]:
    """A migrated PostgreSQL database and coach's repository on it; yields the
    repository, asyncpg's DSN and SQLAlchemy's URL of it."""
    async with pg_database("reccpu") as name:
        repo = await open_repository(
            pg_url(name), **coach_keys(pg_url(name)), secret=SECRET, create_schema=True
        )
        try:
            yield repo, pg_url(name, "postgresql"), pg_url(name)
        finally:
            await repo.aclose()


async def new_sessions(repo: Any, count: int) -> list[str]:
    user = await repo.get_or_create_user("bench")
    return [(await repo.create_session(user.id, "challenge")).id for _ in range(count)]


async def _sqlite_round(
    kind: str, directory: Path, sessions: int, per: int, n: int
) -> tuple[float, ...]:
    path = directory / f"{kind}-{n}.db"
    repo = await open_repository(
        sqlite_url(path), **coach_keys(sqlite_url(path)), secret=SECRET, create_schema=True
    )
    try:
        ops = workload(await new_sessions(repo, sessions), per, seed=n)
        if kind == "coach":
            return await record(repo, ops)
    finally:
        await repo.aclose()
    if kind == "stack":
        stack = RawSQLiteOverSQLAlchemy(sqlite_url(path))
        await stack.open()
        try:
            return await write_by_hand(stack, ops)
        finally:
            await stack.aclose()
    raw = RawSQLite(path)
    await raw.open()
    try:
        if kind == "floor":
            return await record(RawStore(raw, StepCodec(SECRET)), ops)
        return await write_raw(raw, ops)
    finally:
        await raw.aclose()


def _order(n: int) -> tuple[str, ...]:
    """Round ``n``'s order of the writers (each first in turn)."""
    return KINDS[n % len(KINDS) :] + KINDS[: n % len(KINDS)]


async def measure(db: str, sessions: int, per: int, rounds: int) -> RecorderCpu:
    """``rounds`` rounds of coach's recorder, raw, the floor and the rows by hand in
    SQLAlchemy on ``db`` (after a warm-up)."""
    result = RecorderCpu(db, sessions, per)
    if db == "sqlite":
        with sqlite_dir() as directory:
            for kind in KINDS:
                await _sqlite_round(kind, directory, 2, 10, -1)
            for n in range(rounds):
                for kind in _order(n):
                    _add(result, kind, await _sqlite_round(kind, directory, sessions, per, n))
                _log(result)
        return result
    async with pg_repo() as (repo, dsn, url):  # one database; new sessions every run
        raw, stack = RawAsyncpg(dsn), RawOverSQLAlchemy(url)
        await raw.open()
        await stack.open()
        try:
            floor = RawStore(raw, StepCodec(SECRET))
            for n in range(-1, rounds):
                for kind in _order(n):
                    ops = workload(await new_sessions(repo, sessions), per, seed=n)
                    found: tuple[float, ...]
                    if kind == "raw":
                        found = await write_raw(raw, ops)
                    elif kind == "stack":
                        found = await write_by_hand(stack, ops)
                    else:
                        found = await record(repo if kind == "coach" else floor, ops)
                    if n >= 0:
                        _add(result, kind, found)
                if n >= 0:
                    _log(result)
        finally:
            await stack.aclose()
            await raw.aclose()
    return result


def _add(result: RecorderCpu, kind: str, found: tuple[float, ...]) -> None:
    messages = 2 * result.sessions * result.turns
    if kind == "coach":
        result.coach_cpu.append(found[0] / messages)
        result.coach_wall.append(found[1] / messages)
        result.ops_per_commit.append(found[2])
    elif kind == "floor":
        result.floor_cpu.append(found[0] / messages)
    elif kind == "stack":
        result.stack_cpu.append(found[0] / messages)
    else:
        result.raw_cpu.append(found[0] / messages)
        result.raw_wall.append(found[1] / messages)
        result.encode_cpu.append(found[2] / messages)
        result.hand_cpu.append(found[3] / messages)


def _log(result: RecorderCpu) -> None:
    done = min(
        len(result.coach_cpu), len(result.raw_cpu), len(result.floor_cpu), len(result.stack_cpu)
    )
    if done:
        print(
            f"  [recorder cpu] {result.db} {result.name} round {done}: coach "
            f"{result.coach_cpu[done - 1] * 1e6:.0f} µs, raw {result.raw_cpu[done - 1] * 1e6:.0f}"
            f" µs, floor {result.floor_cpu[done - 1] * 1e6:.0f} µs, by hand in SQLAlchemy "
            f"{result.stack_cpu[done - 1] * 1e6:.0f} µs per message",
            flush=True,
        )


def report(results: Sequence[RecorderCpu]) -> str:
    """The table and the verdicts."""
    rows = []
    for r in results:
        ratios, floors, hands, stacks = r.ratios, r.floor_ratios, r.hand_ratios, r.stack_ratios
        mid, floor, hand, stack = (statistics.median(x) for x in (ratios, floors, hands, stacks))
        above = "; the floor is above it" if floor > TARGET else ""
        above += "; so is raw with the rows by hand" if hand > TARGET else ""
        above += "; so are the rows by hand in SQLAlchemy" if stack > TARGET else ""
        rows.append(
            [
                r.db,
                r.name,
                f"{statistics.median(r.coach_cpu) * 1e6:.0f}",
                f"{statistics.median(r.raw_cpu) * 1e6:.0f}",
                f"{statistics.median(r.encode_cpu) * 1e6:.0f} / "
                f"{statistics.median(r.hand_cpu) * 1e6:.0f}",
                f"**{mid:.2f}×** ({min(ratios):.2f}–{max(ratios):.2f})",
                f"{statistics.median(r.floor_cpu) * 1e6:.0f}",
                f"{floor:.2f}× ({min(floors):.2f}–{max(floors):.2f})",
                f"{hand:.2f}× ({min(hands):.2f}–{max(hands):.2f})",
                f"{statistics.median(r.stack_cpu) * 1e6:.0f}",
                f"{stack:.2f}× ({min(stacks):.2f}–{max(stacks):.2f})",
                f"{statistics.median(r.coach_wall) * 1e6:.0f} / "
                f"{statistics.median(r.raw_wall) * 1e6:.0f}",
                f"{statistics.median(r.ops_per_commit):.0f} / {BATCH}",
                f"{verdict(mid <= TARGET)} (≤ {TARGET:g}×){above}",
            ]
        )
    return table(
        [
            "database",
            "sessions × turns",
            "coach recorder: CPU per message (µs)",
            "raw, same rows: CPU per message (µs)",
            "encoding and signing them, not in raw: coach / by hand (µs)",
            "coach / raw (median of rounds, range)",
            "floor: coach's recorder over raw's writer, CPU per message (µs)",
            "floor / raw (median of rounds, range)",
            "by hand: raw + the rows encoded by hand / raw",
            "by hand in SQLAlchemy: the rows made by hand, raw's statements in SQLAlchemy, "
            "no recorder: CPU per message (µs)",
            "by hand in SQLAlchemy / raw (median of rounds, range)",
            "wall per message, coach / raw (µs)",
            "ops per commit, coach / raw",
            "target",
        ],
        rows,
        right=2,
    )


async def run(dbs: Sequence[str], rounds: int, turns_long: int, sessions: int) -> list[RecorderCpu]:
    """Both workloads on every database in ``dbs``."""
    found = []
    for db in dbs:
        found.append(await measure(db, 1, turns_long, rounds))
        found.append(await measure(db, sessions, max(1, turns_long // sessions), rounds))
    return found


def c_calls(ops: Sequence[Any]) -> Callable[[], None]:
    """The calls into C of turning ``ops`` into coach's rows (:func:`raw_batches`), alone:
    per message its text sealed (a nonce, AES-GCM); per memory step its envelope pickled
    (and compressed where coach tries to), signed (HMAC-SHA256) and sealed. The
    texts and envelopes are the ones :func:`raw_batches` sealed (opened again first), and
    the associated data and signed prefixes are made before, so only the calls into C
    and their loop remain."""
    sealer, aead, key = Sealer("raw", new_data_key()), AESGCM(new_data_key()), new_data_key()
    texts: list[tuple[bytes, bytes]] = []
    steps: list[tuple[object, bool, bytes, bytes]] = []
    for rows in raw_batches(ops, StepCodec(SECRET), BATCH, sealer):
        said = []
        for sid, role, content in rows.messages:
            bound = (sid, rows.now, role)
            said.append(sealer.open("session_conversations", "content", bound, content).encode())
            ad = associated("session_conversations", "content", bound)
            texts.append((b"s" + said[-1], ad))
        for (sid, seq, *_, sealed), link in zip(rows.steps, rows.links, strict=True):
            payload = sealer.open("agent_steps", "payload", (sid, seq), sealed)
            data, packed = pickled(payload)
            envelope = pickle.loads(data)
            # A step whose message is in the batch leaves its text out, and signs it.
            prefix = bytes(SIGNED_PREFIX) + (b"" if link is None else bytes(4) + said[link])
            ad = associated("agent_steps", "payload", (sid, seq))
            steps.append((envelope, packed, prefix, ad))

    def calls() -> None:
        for plain, ad in texts:
            aead.encrypt(os.urandom(12), plain, ad)
        for envelope, packed, prefix, ad in steps:
            data = pickle.dumps(envelope, protocol=PICKLE_PROTOCOL)
            if len(data) >= COMPRESS_FROM:  # coach tries, and keeps it when smaller
                packed_data = zlib.compress(data, 6)
                data = packed_data if packed else data
            hmac.digest(key, prefix + data, "sha256")
            aead.encrypt(os.urandom(12), b"b" + data, ad)

    return calls


def pickled(payload: bytes) -> tuple[bytes, bool]:
    """A stored memory step's pickle, and whether coach compressed it."""
    packed = payload[:1] == b"x"  # a zlib stream (a pickle starts with 0x80)
    return (zlib.decompress(payload) if packed else payload), packed


SIGNED_PREFIX = 90
"""What a step's signature covers besides its payload and text (domain, codec, version,
session, position): about this many bytes."""


def encode_parts(rounds: int, turns_of: int) -> dict[str, list[float]]:
    """Per message, each round: coach turning one session's ``turns_of`` turns into rows
    (:func:`raw_batches`: the ``encoding`` column of :func:`report`), and the calls into
    C of that work alone (:func:`c_calls`), in alternating order, CPU µs."""
    ops = workload(["0" * 32], turns_of, 7)
    messages = sum(isinstance(op, AddMessage) for op in ops)
    calls = c_calls(ops)
    runs: dict[str, Callable[[], object]] = {
        ENCODE: lambda: raw_batches(ops, StepCodec(SECRET), BATCH),
        CALLS: calls,
    }
    found: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in list(runs)[r % 2 :] + list(runs)[: r % 2]:
            gc.collect()
            cpu = time.process_time()
            runs[name]()
            found[name].append((time.process_time() - cpu) / messages * 1e6)
    return found


ENCODE = "coach's encoding of the rows, µs per message (`raw_batches`: sealing, pickling, signing)"
CALLS = "its calls into C alone, µs per message (AES-GCM and nonces, pickle, zlib, HMAC)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This measurement's flags."""
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds (9)")
    parser.add_argument("--turns", type=int, default=1000, help="turns per workload (1,000)")
    parser.add_argument("--sessions", type=int, default=50, help="sessions of the second (50)")
    parser.add_argument("--dbs", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument(
        "--encode-parts",
        action="store_true",
        help="instead: coach's encoding of the rows against its calls into C alone",
    )


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    print(
        f"{COMMAND} --rounds {args.rounds} --turns {args.turns} "
        + (
            "--encode-parts"
            if args.encode_parts
            else f"--sessions {args.sessions} --dbs {args.dbs}"
        )
    )
    if args.encode_parts:
        found = encode_parts(args.rounds, args.turns)
        print(
            table(
                ["part (1 session)", "median", "range"],
                [
                    [name, f"{statistics.median(v):.1f}", f"{min(v):.1f}–{max(v):.1f}"]
                    for name, v in found.items()
                ],
                right=2,
            )
        )
        return
    dbs = [db for db in args.dbs.split(",") if db]
    print(report(asyncio.run(run(dbs, args.rounds, args.turns, args.sessions))))


if __name__ == "__main__":
    main()
