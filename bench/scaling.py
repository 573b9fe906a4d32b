"""How resume and write cost grow with the session's length and the person's sessions.

Run from the repository root::

    python -m bench.scaling                                    # the full sizes
    python -m bench.scaling --lengths 100,500 --people 1,10 --rounds 2   # a smoke run

A *point* is a person with ``K`` sessions of ``L`` turns each (on SQLite); everything is
measured on the newest session: the **resume** (``coach resume_session``;
openai-agents' ``SQLiteSession.get_items(limit=50)``; raw ``sqlite3`` reading the rows
a resume reads, undecoded) and a **turn written** (``coach write_batch``; ``add_items``;
raw ``sqlite3`` writing coach's rows for it, encoded before the timer: see
``bench.storage_speed``). The length axis is ``K = 1`` and ``L`` from ``--lengths``; the
sessions-per-person axis is ``L = --person-turns`` and ``K`` from ``--people``.

Every figure is process CPU of all threads per op (``time.process_time``), the median
over ``--rounds`` rounds; in a round every store runs its batch once, in a rotating
order, so the ratios (coach / peer, coach / raw) are paired.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends import AgentsSQLiteBackend, CoachBackend
from .measure import sqlite_dir, sqlite_url
from .storage_speed import PEER, RAW, RawCoachRows, measured, rotate
from .text import Turn, turns

COMMAND = "python -m bench.scaling"
COACH_WRITE = "coach write_batch"
COACH_RESUME = "coach resume_session"
LABELS = ("coach", PEER, RAW)


@dataclass
class Point:
    """One person of ``sessions`` sessions of ``turns`` turns: per store, per round, CPU
    seconds per resume read and per turn written."""

    sessions: int
    turns: int
    resume: dict[str, list[float]] = field(default_factory=dict)
    write: dict[str, list[float]] = field(default_factory=dict)

    def runs(self, kind: str) -> dict[str, list[float]]:
        """Per store, per round: ``kind`` is ``resume`` or ``write``."""
        return self.resume if kind == "resume" else self.write

    def median(self, kind: str, label: str) -> float:
        """Median CPU seconds per op of ``label``."""
        return statistics.median(self.runs(kind)[label])

    def ratio(self, kind: str, label: str, other: str) -> float:
        """Median over rounds of ``label`` / ``other``."""
        runs = self.runs(kind)
        return statistics.median(a / b for a, b in zip(runs[label], runs[other], strict=True))


@dataclass
class Scaling:
    """Both axes."""

    by_length: list[Point]
    by_sessions: list[Point]


async def _prepare(directory: Path, sessions: int, length: int) -> tuple[Any, ...]:
    """coach's file with the person's sessions, a copy of it for raw, the peer's file."""
    texts = turns(7, sessions * length)
    coach = CoachBackend(sqlite_url(directory / "c.db"))
    await coach.open()
    handles = []
    for s in range(sessions):
        handles.append(await coach.new_session(f"s{s}"))
        await coach.bulk_load(handles[-1], texts[s * length : (s + 1) * length])
    await coach.aclose()
    shutil.copy(directory / "c.db", directory / "r.db")
    peer = AgentsSQLiteBackend(directory / "a.db")
    await peer.open()
    peer_sessions = []
    for s in range(sessions):
        peer_sessions.append(await peer.new_session(f"s{s}"))
        await peer.bulk_load(peer_sessions[-1], texts[s * length : (s + 1) * length])
    await coach.open()  # the user exists: open finds it
    return coach, handles[-1], peer, peer_sessions[-1]


async def measure_point(sessions: int, length: int, rounds: int, reads: int, writes: int) -> Point:
    """``rounds`` rounds of resume reads and turn writes on the newest session."""
    point = Point(sessions, length)
    with sqlite_dir() as directory:
        coach, handle, peer, session = await _prepare(directory, sessions, length)
        raw = RawCoachRows(directory / "r.db")
        await raw.open(handle.id)
        raw_steps = len(handle.steps)
        extra = turns(11, rounds * writes + writes)
        try:
            readers: dict[str, Callable[[int], Awaitable[object]]] = {
                "coach": lambda _n: coach.live_resume(handle),
                PEER: lambda _n: peer.read_window(session),
                RAW: lambda _n: raw.read_resume(),
            }
            for read in readers.values():
                for n in range(3):
                    await read(n)
            for r in range(rounds):
                order = rotate(LABELS, r)
                for label in order:
                    batch = await measured(reads, readers[label])
                    point.resume.setdefault(label, []).append(batch.cpu_per_op)
                texts = extra[r * writes : (r + 1) * writes]
                for label in order:
                    if label == "coach":
                        op = _writes(coach, handle, [coach.items(handle, t) for t in texts])
                    elif label == PEER:
                        op = _writes(peer, session, [peer.items(session, t) for t in texts])
                    else:
                        rows = [raw.rows(raw_steps + 2 * n, t) for n, t in enumerate(texts)]
                        raw_steps += 2 * len(texts)
                        op = _raw_writes(raw, texts, rows)
                    batch = await measured(writes, op)
                    point.write.setdefault(label, []).append(batch.cpu_per_op)
        finally:
            await raw.aclose()
            await peer.aclose()
            await coach.aclose()
    print(
        f"  [scaling] {sessions} × {length}: resume coach/peer "
        f"{point.ratio('resume', 'coach', PEER):.2f}×, write coach/peer "
        f"{point.ratio('write', 'coach', PEER):.2f}×",
        flush=True,
    )
    return point


def _writes(backend: Any, handle: Any, items: list[Any]) -> Callable[[int], Awaitable[object]]:
    """Op ``n`` writes ``items[n]`` through ``backend``."""

    def op(n: int) -> Awaitable[object]:
        result: Awaitable[object] = backend.write_turn(handle, items[n])
        return result

    return op


def _raw_writes(
    raw: RawCoachRows, texts: Sequence[Turn], rows: list[Any]
) -> Callable[[int], Awaitable[object]]:
    """Op ``n`` writes turn ``n``'s prepared rows."""
    return lambda n: raw.write_turn(texts[n], rows[n])


async def run(
    lengths: Sequence[int],
    people: Sequence[int],
    person_turns: int,
    rounds: int,
    reads: int,
    writes: int,
) -> Scaling:
    """Both axes."""
    by_length = [await measure_point(1, n, rounds, reads, writes) for n in lengths]
    by_sessions = [await measure_point(k, person_turns, rounds, reads, writes) for k in people]
    return Scaling(by_length, by_sessions)


def report(scaling: Scaling) -> str:
    """Two tables: CPU per op (ms) and coach's paired ratios, along each axis."""
    out = []
    for title, points, axis in (
        ("session length (turns; one session)", scaling.by_length, "turns"),
        (
            "sessions per person (each of the same length; the newest read)",
            scaling.by_sessions,
            "sessions",
        ),
    ):
        header = (
            f"| {axis} | resume CPU (ms): coach / peer / raw | coach / peer | coach / raw "
            "| write CPU per turn (ms): coach / peer / raw | coach / peer | coach / raw |"
        )
        lines = [f"**Against {title}**", "", header, "|---:|---:|---:|---:|---:|---:|---:|"]
        for p in points:
            x = p.turns if axis == "turns" else p.sessions
            cells = [f"{x:,}"]
            for kind in ("resume", "write"):
                cpu = " / ".join(f"{p.median(kind, label) * 1e3:.3f}" for label in LABELS)
                cells += [
                    cpu,
                    f"{p.ratio(kind, 'coach', PEER):.2f}×",
                    f"{p.ratio(kind, 'coach', RAW):.2f}×",
                ]
            lines.append("| " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This measurement's flags."""
    parser.add_argument("--lengths", default="100,1000,5000", help="session lengths (turns)")
    parser.add_argument("--people", default="1,10,100", help="sessions per person")
    parser.add_argument("--person-turns", type=int, default=20, help="turns of each of those")
    parser.add_argument("--scale-rounds", type=int, default=7, help="paired rounds per point")
    parser.add_argument("--scale-reads", type=int, default=30, help="resume reads per batch")
    parser.add_argument("--scale-writes", type=int, default=30, help="turns written per batch")


def ints(text: str) -> list[int]:
    """``"1,10,100"`` -> ``[1, 10, 100]``."""
    return [int(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    a = parser.parse_args(argv)
    print(
        f"{COMMAND} --lengths {a.lengths} --people {a.people} --person-turns {a.person_turns} "
        f"--scale-rounds {a.scale_rounds} --scale-reads {a.scale_reads} "
        f"--scale-writes {a.scale_writes}"
    )
    scaling = asyncio.run(
        run(
            ints(a.lengths),
            ints(a.people),
            a.person_turns,
            a.scale_rounds,
            a.scale_reads,
            a.scale_writes,
        )
    )
    print(report(scaling))


if __name__ == "__main__":
    main()
