"""Sections 1-4 of ``bench.core``: writes, the recorder, resume reads and storage.

Every comparison is paired: a round runs every store once, in an order that rotates
from round to round, and coach's run of a round is divided by the anchor's run of the
same round; the report gives the median of those ratios with their range. Absolute
times are printed only next to the ratio they belong to.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coach.store import AddMessage, AppendSteps

from .backends import (
    AgentsSQLAlchemyBackend,
    AgentsSQLiteBackend,
    Backend,
    CoachBackend,
    LangGraphBackend,
    RawAiosqliteBackend,
    chat_items,
)
from .measure import (
    HandOffs,
    Ratio,
    count_hand_offs,
    percentile,
    pg_bytes,
    pg_database,
    pg_url,
    sqlite_bytes,
    sqlite_dir,
    sqlite_tables,
    sqlite_url,
    table,
    verdict,
)
from .text import Turn, turns

DB_FILE = "bench.db"
ANCHOR = AgentsSQLAlchemyBackend.label

MakeBackend = Callable[[Path], Backend]
"""Builds a backend whose database is ``DB_FILE`` in the given directory."""

SQLITE_BACKENDS: dict[str, MakeBackend] = {
    "coach seed API": lambda d: CoachBackend(sqlite_url(d / DB_FILE), "seed"),
    "coach write_batch": lambda d: CoachBackend(sqlite_url(d / DB_FILE), "batch"),
    AgentsSQLAlchemyBackend.label: lambda d: AgentsSQLAlchemyBackend(sqlite_url(d / DB_FILE)),
    AgentsSQLiteBackend.label: lambda d: AgentsSQLiteBackend(d / DB_FILE),
    LangGraphBackend.label: lambda d: LangGraphBackend(d / DB_FILE),
    RawAiosqliteBackend.label: lambda d: RawAiosqliteBackend(d / DB_FILE),
}


@dataclass(frozen=True)
class Workload:
    """``sessions`` conversations of ``turns`` turns each, written round-robin (turn 1 of
    every session, then turn 2, ...), as concurrent conversations would interleave."""

    sessions: int
    turns: int
    seed: int = 1

    @property
    def name(self) -> str:
        """E.g. ``200 sessions × 20 turns``."""
        noun = "session" if self.sessions == 1 else "sessions"
        return f"{self.sessions:,} {noun} × {self.turns:,} turns"

    def texts(self) -> list[Turn]:
        """The text of every turn, session-major (same seed, same text)."""
        return turns(self.seed, self.sessions * self.turns)

    def order(self, limit: int | None = None) -> list[tuple[int, int]]:
        """``(session, turn)`` in writing order; ``limit`` caps the turns per session."""
        last = self.turns if limit is None else min(limit, self.turns)
        return [(s, t) for t in range(last) for s in range(self.sessions)]


@dataclass
class WriteRun:
    """One backend writing one workload into a fresh database."""

    label: str
    turn_seconds: list[float]
    stored_bytes: int
    tables: dict[str, int] = field(default_factory=dict)

    @property
    def per_turn(self) -> float:
        """Mean seconds per committed turn."""
        return sum(self.turn_seconds) / len(self.turn_seconds)


async def write_run(
    label: str, workload: Workload, texts: Sequence[Turn], *, limit: int | None = None
) -> WriteRun:
    """Write ``workload`` with backend ``label`` into a fresh SQLite file and time each turn."""
    with sqlite_dir() as directory:
        backend = SQLITE_BACKENDS[label](directory)
        await backend.open()
        handles = [await backend.new_session(f"s{n}") for n in range(workload.sessions)]
        seconds: list[float] = []
        gc.collect()
        for s, t in workload.order(limit):
            items = backend.items(handles[s], texts[s * workload.turns + t])
            start = time.perf_counter()
            await backend.write_turn(handles[s], items)
            seconds.append(time.perf_counter() - start)
        await backend.aclose()
        size = sqlite_bytes(directory / DB_FILE)
        return WriteRun(label, seconds, size, sqlite_tables(directory / DB_FILE))


async def empty_bytes(label: str) -> tuple[int, dict[str, int]]:
    """Bytes of the backend's database with its schema and no conversation, and per table."""
    with sqlite_dir() as directory:
        backend = SQLITE_BACKENDS[label](directory)
        await backend.open()
        await backend.aclose()
        return sqlite_bytes(directory / DB_FILE), sqlite_tables(directory / DB_FILE)


def _minus(tables: dict[str, int], empty: dict[str, int]) -> dict[str, int]:
    return {name: size - empty.get(name, 0) for name, size in tables.items()}


async def hand_offs(label: str, turns_counted: int = 40) -> HandOffs:
    """Hand-offs per turn (x ``turns_counted``) of one session, after 10 turns of warm-up."""
    texts = turns(5, 10 + turns_counted)
    with sqlite_dir() as directory:
        backend = SQLITE_BACKENDS[label](directory)
        await backend.open()
        handle = await backend.new_session("h")
        for turn in texts[:10]:
            await backend.write_turn(handle, backend.items(handle, turn))
        with count_hand_offs(asyncio.get_running_loop()) as counts:
            for turn in texts[10:]:
                await backend.write_turn(handle, backend.items(handle, turn))
        await backend.aclose()
    return counts


# --- section 1: one turn committed per call ----------------------------------------------


@dataclass
class WriteResult:
    """All runs of section 1 for one workload (run ``i`` of every backend is rep ``i``)."""

    workload: Workload
    runs: dict[str, list[WriteRun]]
    limits: dict[str, int]
    hand_offs: dict[str, HandOffs]
    counted_turns: int

    def ratio(self, label: str, anchor: str = ANCHOR) -> Ratio:
        """Per-turn time of ``label`` / ``anchor``, paired by rep."""
        return Ratio.of(
            [r.per_turn for r in self.runs[label]], [r.per_turn for r in self.runs[anchor]]
        )


async def section_writes(
    workload: Workload, reps: int, labels: Sequence[str], langgraph_max_turns: int
) -> WriteResult:
    """Each rep writes the workload once with every backend, in a rotating order."""
    texts = workload.texts()
    limits = {LangGraphBackend.label: langgraph_max_turns}
    runs: dict[str, list[WriteRun]] = {label: [] for label in labels}
    small = Workload(2, 10, seed=9)
    for label in labels:  # warm-up: imports, first connections, statement caches
        await write_run(label, small, small.texts())
    for rep in range(reps):
        order = list(labels[rep % len(labels) :]) + list(labels[: rep % len(labels)])
        if rep % 2:
            order.reverse()
        for label in order:
            run = await write_run(label, workload, texts, limit=limits.get(label))
            runs[label].append(run)
            log(f"  [1] {workload.name} rep {rep + 1} {label}: {run.per_turn * 1000:.3f} ms/turn")
    counted = 40
    offs = {label: await hand_offs(label, counted) for label in labels}
    return WriteResult(workload, runs, limits, offs, counted)


def writes_report(results: Sequence[WriteResult]) -> str:
    """Section 1's tables and verdicts."""
    parts: list[str] = []
    for result in results:
        w = result.workload
        rows = []
        for label, runs in result.runs.items():
            limit = result.limits.get(label)
            note = f" (first {limit:,} turns)" if limit and limit < w.turns else ""
            pooled = [s for r in runs for s in r.turn_seconds]
            offs = result.hand_offs[label]
            rows.append(
                [
                    label + note,
                    f"{statistics.median(r.per_turn for r in runs) * 1000:.3f}",
                    f"{percentile(pooled, 0.95) * 1000:.3f}",
                    "1 (anchor)" if label == ANCHOR else str(result.ratio(label)),
                    f"{offs.aiosqlite / result.counted_turns:.1f}"
                    f" + {offs.executor / result.counted_turns:.1f}",
                ]
            )
        runs_count = len(next(iter(result.runs.values())))
        parts.append(
            f"**{w.name}** (SQLite, {runs_count} runs of each store, interleaved)\n\n"
            + table(
                [
                    "store",
                    "per turn, median run (ms)",
                    "p95 of one turn (ms)",
                    f"ratio to {ANCHOR} (median of pairs, range)",
                    "hand-offs per turn: aiosqlite + thread pool",
                ],
                rows,
            )
        )
        verdicts = []
        for label, goal in (("coach seed API", 0.5), ("coach write_batch", 0.25)):
            if label in result.runs and ANCHOR in result.runs:
                ratio = result.ratio(label)
                verdicts.append(
                    f"- {label} / {ANCHOR}: **{ratio.median:.3f}×** (target ≤ {goal}×): "
                    f"{verdict(ratio.median <= goal)}"
                )
        parts.append("\n".join(verdicts))
    return "\n\n".join(parts)


# --- section 2: the recorder under sustained load -----------------------------------------


@dataclass
class RecorderRun:
    """One recorder run: every turn submitted as fast as back-pressure allows, then flushed."""

    seconds: float
    turns: int
    batches: int
    written: int

    @property
    def per_turn(self) -> float:
        """Amortized seconds per turn, from the first submit until all is durable."""
        return self.seconds / self.turns


async def recorder_run(workload: Workload, texts: Sequence[Turn]) -> RecorderRun:
    """Submit every turn (two messages and their two memory steps) to a ``Recorder``."""
    with sqlite_dir() as directory:
        backend = CoachBackend(sqlite_url(directory / DB_FILE), "batch")
        await backend.open()
        handles = [await backend.new_session(f"s{n}") for n in range(workload.sessions)]
        steps = [chat_items(t) for t in texts]
        recorder = backend.recorder()
        gc.collect()
        start = time.perf_counter()
        for s, t in workload.order():
            turn, sid = texts[s * workload.turns + t], handles[s].id
            recorder.submit(AddMessage(sid, "user", turn.user))
            recorder.submit(AddMessage(sid, "assistant", turn.assistant))
            recorder.submit(AppendSteps(sid, 2 * t, tuple(steps[s * workload.turns + t])))
            if recorder.saturated:
                await recorder.wait_for_capacity()
            await asyncio.sleep(0)  # a conversation yields between turns
        await recorder.flush()
        seconds = time.perf_counter() - start
        stats = recorder.stats()
        await recorder.aclose()
        stored = await backend.repo.agent_step_count(handles[-1].id)
        await backend.aclose()
    if stats.errors or stats.dropped or stored != 2 * workload.turns:
        raise RuntimeError(f"recorder run lost writes: {stats}, {stored} steps stored")
    return RecorderRun(seconds, len(texts), stats.batches, stats.written)


async def raw_run(workload: Workload, texts: Sequence[Turn]) -> float:
    """Raw aiosqlite committing every turn; returns seconds per turn."""
    run = await write_run(RawAiosqliteBackend.label, workload, texts)
    return run.per_turn


@dataclass
class RecorderResult:
    """Section 2 for one workload."""

    workload: Workload
    recorder: list[RecorderRun]
    raw: list[float]

    @property
    def ratio(self) -> Ratio:
        """Recorder amortized per turn / raw aiosqlite per turn, paired."""
        return Ratio.of([r.per_turn for r in self.recorder], self.raw)


async def section_recorder(workload: Workload, reps: int) -> RecorderResult:
    """Alternate a recorder run and a raw aiosqlite run ``reps`` times."""
    texts = workload.texts()
    small = Workload(2, 10, seed=9)
    await recorder_run(small, small.texts())
    await raw_run(small, small.texts())
    rec: list[RecorderRun] = []
    raw: list[float] = []
    for rep in range(reps):
        for kind in ("recorder", "raw") if rep % 2 == 0 else ("raw", "recorder"):
            if kind == "recorder":
                rec.append(await recorder_run(workload, texts))
                value = rec[-1].per_turn
            else:
                raw.append(await raw_run(workload, texts))
                value = raw[-1]
            log(f"  [2] {workload.name} rep {rep + 1} {kind}: {value * 1000:.3f} ms/turn")
    return RecorderResult(workload, rec, raw)


def recorder_report(results: Sequence[RecorderResult]) -> str:
    """Section 2's table and verdict."""
    rows = []
    for r in results:
        ops = sum(x.written for x in r.recorder) / max(1, sum(x.batches for x in r.recorder))
        rows.append(
            [
                r.workload.name,
                f"{statistics.median(x.per_turn for x in r.recorder) * 1000:.3f}",
                f"{statistics.median(r.raw) * 1000:.3f}",
                str(r.ratio),
                f"{ops:.0f}",
                f"{verdict(r.ratio.median <= 2.0)} (≤ 2×)",
            ]
        )
    return table(
        [
            "workload (SQLite)",
            "recorder, amortized to durable per turn (ms)",
            "raw aiosqlite, commit per turn (ms)",
            "ratio (median of pairs, range)",
            "ops per commit",
            "target",
        ],
        rows,
    )


# --- section 3: resume reads ---------------------------------------------------------------


@dataclass
class ReadResult:
    """Read latencies per store and session size."""

    db: str
    sizes: list[int]
    seconds: dict[str, dict[int, list[float]]]

    def p(self, label: str, size: int, q: float) -> float:
        """The ``q`` quantile of one store's reads at one size, in ms."""
        return percentile(self.seconds[label][size], q) * 1000


UNBOUNDED = (LangGraphBackend.label, "coach load_agent_state (every step)")
"""Reads whose cost grows with the session: timed in a group of their own, so that the
allocations of a 500 ms read do not land on the next store's clock."""


async def _time_reads(
    stores: dict[str, tuple[Any, dict[int, Any]]], sizes: Sequence[int], reads: int
) -> dict[str, dict[int, list[float]]]:
    """Every read of every store and size, ``reads`` times over, in a shuffled order.

    The bounded reads are interleaved with each other and the unbounded ones with each
    other (``reads // 4`` times); each round reads every (store, size) once, in a
    seeded random order, so no read always follows the same one.
    """
    seconds: dict[str, dict[int, list[float]]] = {
        label: {size: [] for size in sizes} for label in stores
    }
    for backend, handles in stores.values():  # warm-up
        for size in sizes:
            await backend.read_window(handles[size])
    rng = random.Random(3)
    bounded = [label for label in stores if label not in UNBOUNDED]
    unbounded = [label for label in stores if label in UNBOUNDED]
    # One store's garbage must not be collected on another's clock: what is loaded is
    # frozen, and a collection runs before every timed read (outside the timing).
    gc.collect()
    gc.freeze()
    try:
        for group, rounds in ((bounded, reads), (unbounded, max(5, reads // 4))):
            pairs = [(label, size) for label in group for size in sizes]
            for _ in range(rounds):
                rng.shuffle(pairs)
                for label, size in pairs:
                    backend, handles = stores[label]
                    gc.collect()
                    start = time.perf_counter()
                    await backend.read_window(handles[size])
                    seconds[label][size].append(time.perf_counter() - start)
    finally:
        gc.unfreeze()
    return seconds


def _add_state_reader(stores: dict[str, tuple[Any, dict[int, Any]]], coach: Backend) -> None:
    assert isinstance(coach, CoachBackend)
    reader = CoachStateReader(coach)
    stores[reader.label] = (reader, stores[coach.label][1])


async def _load(backend: Backend, sizes: Sequence[int]) -> dict[int, Any]:
    handles = {}
    for size in sizes:
        handle = await backend.new_session(f"r{size}")
        await backend.bulk_load(handle, turns(size, size))
        handles[size] = handle
    return handles


class CoachStateReader:
    """Times ``load_agent_state`` (every memory step) on a loaded coach backend."""

    label = "coach load_agent_state (every step)"

    def __init__(self, coach: CoachBackend) -> None:
        self.coach = coach

    async def read_window(self, handle: Any) -> int:
        """All memory steps of the session, verified and unpickled."""
        return len(await self.coach.repo.load_agent_state(handle.id))


async def section_reads(db: str, sizes: list[int], reads: int, anchors: bool) -> ReadResult:
    """Build one session per size in every store, then time the reads interleaved."""
    if db == "sqlite":
        with sqlite_dir() as directory:
            backends: list[Backend] = [CoachBackend(sqlite_url(directory / "coach.db"))]
            if anchors:
                backends += [
                    AgentsSQLAlchemyBackend(sqlite_url(directory / "sa.db")),
                    AgentsSQLiteBackend(directory / "agents.db"),
                    LangGraphBackend(directory / "lg.db"),
                    RawAiosqliteBackend(directory / "raw.db"),
                ]
            return ReadResult(db, sizes, await _load_and_read(db, backends, sizes, reads))
    async with pg_database("coach") as coach_db, pg_database("agents") as agents_db:
        backends = [CoachBackend(pg_url(coach_db))]
        if anchors:
            backends.append(AgentsSQLAlchemyBackend(pg_url(agents_db)))
        return ReadResult(db, sizes, await _load_and_read(db, backends, sizes, reads))


async def _load_and_read(db: str, backends: Sequence[Any], sizes: Sequence[int], reads: int) -> Any:
    """Load every size into every backend, then time the reads (backends closed after)."""
    stores: dict[str, tuple[Any, dict[int, Any]]] = {}
    try:
        for backend in backends:
            await backend.open()
            stores[backend.label] = (backend, await _load(backend, sizes))
            log(f"  [3] {db}: {backend.label} loaded")
        _add_state_reader(stores, backends[0])
        return await _time_reads(stores, sizes, reads)
    finally:
        for backend in backends:
            await backend.aclose()


def reads_report(results: Sequence[ReadResult]) -> str:
    """Section 3's table and verdicts."""
    parts = []
    for r in results:
        small, large = r.sizes[0], r.sizes[-1]
        header = ["store"]
        for size in r.sizes:
            header += [f"p50 @ {size:,} (ms)", f"p95 @ {size:,} (ms)"]
        header.append(f"p50 @ {large:,} / p50 @ {small:,}")
        rows = []
        for label in r.seconds:
            row = [label + (" — resume_session" if label in CoachBackend.MODES.values() else "")]
            for size in r.sizes:
                row += [f"{r.p(label, size, 0.5):.2f}", f"{r.p(label, size, 0.95):.2f}"]
            row.append(f"{r.p(label, large, 0.5) / r.p(label, small, 0.5):.2f}×")
            rows.append(row)
        bounded = max(len(by_size[small]) for by_size in r.seconds.values())
        other = min(len(by_size[small]) for by_size in r.seconds.values())
        fewer = f"; {other} of each unbounded read" if other != bounded else ""
        parts.append(f"**{r.db}** ({bounded} reads per store and size{fewer}; shuffled)\n\n")
        parts[-1] += table(header, rows)
        coach = next(label for label in r.seconds if label in CoachBackend.MODES.values())
        lines = []
        if 2000 in r.sizes:
            p95 = r.p(coach, 2000, 0.95)
            lines.append(
                f"- {r.db}: resume p95 @ 2,000 turns **{p95:.2f} ms** (target ≤ 10 ms): "
                f"{verdict(p95 <= 10)}"
            )
        growth = r.p(coach, large, 0.5) / r.p(coach, small, 0.5)
        lines.append(
            f"- {r.db}: resume p50 @ {large:,} / p50 @ {small:,} **{growth:.2f}×** "
            f"(target ≤ 1.5×): {verdict(growth <= 1.5)}"
        )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


# --- section 4: storage --------------------------------------------------------------------


@dataclass(frozen=True)
class Storage:
    """Bytes a store used for a workload, beyond its empty schema."""

    label: str
    db: str
    workload: Workload
    turns: int
    stored: int
    text: int
    tables: dict[str, int]

    @property
    def ratio(self) -> float:
        """Stored bytes / message text bytes."""
        return self.stored / self.text


def storage_of(
    run: WriteRun, empty: tuple[int, dict[str, int]], workload: Workload, texts: Sequence[Turn]
) -> Storage:
    """The storage figure of a section 1 run (SQLite), less the empty schema's."""
    counted = {(s, t) for s, t in workload.order(len(run.turn_seconds) // workload.sessions)}
    text = sum(texts[s * workload.turns + t].text_bytes for s, t in counted)
    stored, tables = run.stored_bytes - empty[0], _minus(run.tables, empty[1])
    return Storage(run.label, "sqlite", workload, len(counted), stored, text, tables)


async def sqlite_storage(
    workload: Workload, labels: Sequence[str], done: dict[str, WriteRun], limits: dict[str, int]
) -> list[Storage]:
    """SQLite storage of every store (reusing section 1's first runs when there are some)."""
    texts = workload.texts()
    found = []
    for label in labels:
        run = done.get(label) or await write_run(label, workload, texts, limit=limits.get(label))
        found.append(storage_of(run, await empty_bytes(label), workload, texts))
    return found


async def pg_storage(workload: Workload) -> list[Storage]:
    """coach (``write_batch``) and the SQLAlchemySession anchor on PostgreSQL."""
    texts = workload.texts()
    text = sum(t.text_bytes for t in texts)
    found = []
    for make in (
        lambda db: CoachBackend(pg_url(db), "batch"),
        lambda db: AgentsSQLAlchemyBackend(pg_url(db)),
    ):
        async with pg_database("storage") as db:
            backend: Backend = make(db)
            await backend.open()
            empty = await pg_bytes(db)
            handles = [await backend.new_session(f"s{n}") for n in range(workload.sessions)]
            for s, t in workload.order():
                items = backend.items(handles[s], texts[s * workload.turns + t])
                await backend.write_turn(handles[s], items)
            await backend.aclose()
            tables = await pg_bytes(db)
        found.append(
            Storage(
                backend.label,
                "postgres",
                workload,
                len(texts),
                sum(tables.values()) - sum(empty.values()),
                text,
                _minus(tables, empty),
            )
        )
    return found


def storage_report(found: Sequence[Storage]) -> str:
    """Section 4's table, verdicts and coach's per-table split."""
    rows = []
    for s in found:
        coach = s.label.startswith("coach")
        target = f"{verdict(s.ratio <= 2.5)} (≤ 2.5×)" if coach else "–"
        note = (
            f" (first {s.turns // s.workload.sessions:,} turns)"
            if s.turns < (s.workload.sessions * s.workload.turns)
            else ""
        )
        rows.append(
            [
                s.label + note,
                s.db,
                s.workload.name,
                f"{s.stored / s.turns:,.0f}",
                f"{s.text / s.turns:,.0f}",
                f"{s.ratio:.2f}×",
                target,
            ]
        )
    out = table(
        [
            "store",
            "DB",
            "workload",
            "stored bytes per turn",
            "text bytes per turn",
            "stored / text",
            "target",
        ],
        rows,
        right=3,
    )
    splits = []
    for s in found:
        if s.label.startswith("coach") and s.tables:
            parts = sorted(s.tables.items(), key=lambda kv: -kv[1])
            shown = ", ".join(
                f"`{name}` {size / s.turns:,.0f}" for name, size in parts[:4] if size > 0
            )
            splits.append(f"- {s.label}, {s.db}, {s.workload.name}: {shown} bytes per turn")
    if splits:
        out += "\n\nWhere coach's bytes go (largest tables, indexes included):\n\n"
        out += "\n".join(splits)
    return out


def log(message: str) -> None:
    """Progress on stderr (the report goes to stdout)."""
    import sys

    print(message, file=sys.stderr, flush=True)
