"""One run of issue 25's bench: every target, its charts, and the results in the docs.

Run from the repository root (the ``bench`` extra installed; PostgreSQL as for
``bench.core``)::

    python -m bench.results            # the full run: rewrites the generated part of
                                       # docs/benchmarks.md and docs/bench/*.svg
    python -m bench.results --quick --doc /tmp/b.md --charts /tmp/charts   # a smoke run

It runs, in one process and one sitting: ``bench.storage_speed`` (a turn written —
``write_batch`` and the seed API — and the live resume at 2,000 turns, against
``SQLiteSession`` and raw ``sqlite3``; ``pool_pre_ping`` round trips on PostgreSQL),
``bench.recorder_cpu`` (the recorder's CPU per message against raw, SQLite and
PostgreSQL), ``bench.core``'s section 5 (4 recording processes on PostgreSQL next to raw
asyncpg from the same processes), ``bench.visit_storage`` (a real visit's storage),
``bench.scaling`` (resume and write cost against session length and sessions per
person), ``bench.profiles`` (where the time goes), ``bench.kept`` (what coach keeps
that the hand-written reference skips, timed alone) and ``bench.startup`` (CPU to the
greeting and of the other commands, fresh processes). The text between the markers
``<!-- bench.results: begin -->`` and ``<!-- bench.results: end -->`` in ``--doc`` is
replaced by the report: the command line, the machine and its load average at the
start and the end, the verdicts, the charts, every table. Nothing else is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import kept, profiles, recorder_cpu, scaling, storage_speed, visit_storage
from .charts import Bar, ratios_chart, scaling_chart
from .core import machine
from .measure import table, verdict
from .pgload import LoadResult, cpu_ratios, load_report, raw_ratios, section_load
from .profiles import Ladder
from .startup import STACK_COLUMN, TARGET, stack_verdict

COMMAND = "python -m bench.results"
BEGIN, END = "<!-- bench.results: begin -->", "<!-- bench.results: end -->"
ROOT = Path(__file__).resolve().parents[1]
NOT_AGENT = frozenset(
    "help bad-setting sessions-list sessions-show users-show db-upgrade keys-new token "
    "token-no-keys web-no-livekit chat-no-llm".split()
)
"""``bench.startup``'s commands that run no agent (``dev`` runs the worker's preflight)."""


@dataclass(frozen=True)
class Sizes:
    """Every measurement's sizes, full or ``--quick``."""

    rounds: int = 15
    turns: int = 1000
    resume_turns: int = 2000
    reads: int = 50
    pings: int = 300
    rec_rounds: int = 9
    rec_turns: int = 1000
    rec_sessions: int = 50
    pg_messages: int = 20_000
    pg_seconds: float = 20
    pg_reps: int = 3
    visit_turns: int = 200
    lengths: str = "100,1000,5000"
    people: str = "1,10,100"
    person_turns: int = 20
    scale_rounds: int = 7
    scale_ops: int = 30
    profile_writes: int = 500
    profile_reads: int = 200
    profile_recorder: int = 1000
    parts_rounds: int = 11
    parts_turns: int = 400
    pg_parts_turns: int = 20
    resume_parts_reads: int = 100
    kept_rounds: int = 11
    kept_count: int = 20_000
    startup_pairs: int = 5


QUICK = Sizes(3, 200, 500, 10, 50, 2, 200, 10, 1500, 3, 1, 30, "100,500", "1,10", 10, 2, 10)
QUICK = dataclasses.replace(
    QUICK,
    profile_writes=100,
    profile_reads=30,
    profile_recorder=200,
    parts_rounds=2,
    parts_turns=100,
    pg_parts_turns=4,
    resume_parts_reads=20,
    kept_rounds=2,
    kept_count=2000,
    startup_pairs=1,
)


@dataclass
class Results:
    """Everything one run measured."""

    writes: dict[str, list[storage_speed.Batch]]
    resume: dict[str, list[storage_speed.Batch]]
    pings: tuple[int, storage_speed.Batch]
    recorder: list[recorder_cpu.RecorderCpu]
    load: LoadResult
    visit: list[visit_storage.VisitStorage]
    scaling: scaling.Scaling
    profiles: list[profiles.ProfileResult]
    parts: Ladder
    pg_parts: Ladder
    resume_parts: Ladder
    ledgers: list[kept.Ledger]
    """What coach keeps that the reference skips, per path (``bench.kept``)."""
    startup: str
    """``bench.startup``'s table (markdown) and command line."""


def _log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


async def collect(z: Sizes) -> Results:
    """Run every measurement, one after the other."""
    _log("a turn written (storage_speed)")
    writes = await storage_speed.section_writes(z.rounds, z.turns)
    _log("the live resume (storage_speed)")
    resume = await storage_speed.section_resume(z.rounds, z.resume_turns, z.reads)
    _log("pool pings (PostgreSQL)")
    pings = await storage_speed.section_pings(z.pings)
    _log("recorder CPU per message against raw")
    rec = await recorder_cpu.run(("sqlite", "postgres"), z.rec_rounds, z.rec_turns, z.rec_sessions)
    _log("4 processes on PostgreSQL, coach and raw asyncpg")
    load = await section_load(4, 50, z.pg_messages, 2500, z.pg_seconds, z.pg_reps)
    _log("a real visit's storage")
    visit = await visit_storage.run(("sqlite", "postgres"), z.visit_turns)
    _log("scaling")
    lengths, people = scaling.ints(z.lengths), scaling.ints(z.people)
    scaled = await scaling.run(
        lengths, people, z.person_turns, z.scale_rounds, z.scale_ops, z.scale_ops
    )
    _log("profiles")
    found = await profiles.run(
        z.profile_writes, z.resume_turns, z.profile_reads, z.profile_recorder, 12
    )
    _log("a turn, layer by layer")
    parts = await profiles.turn_parts(z.parts_rounds, z.parts_turns)
    _log("a recorder's batch on PostgreSQL, layer by layer")
    pg_parts = await profiles.batch_parts_pg(z.parts_rounds, z.pg_parts_turns)
    _log("a live resume, layer by layer")
    resume_parts = await profiles.resume_parts(z.parts_rounds, z.resume_parts_reads, z.resume_turns)
    _log("what coach keeps that the reference skips, timed alone")
    shapes = ((1, z.rec_turns), (z.rec_sessions, max(1, z.rec_turns // z.rec_sessions)))
    ledgers = await kept.measure(shapes, z.kept_rounds, z.kept_count)
    _log("start-up (fresh processes)")
    startup = await asyncio.to_thread(_startup, z.startup_pairs)
    return Results(
        writes,
        resume,
        pings,
        rec,
        load,
        visit,
        scaled,
        found,
        parts,
        pg_parts,
        resume_parts,
        ledgers,
        startup,
    )


def _startup(pairs: int) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "bench.startup", "--pairs", str(pairs)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=3600,
    ).stdout
    return "\n".join(line for line in out.splitlines() if line.startswith(("|", "command:")))


@dataclass(frozen=True)
class Startup:
    """One command's row of ``bench.startup``'s table: medians, CPU seconds."""

    cpu: float
    stack: float | None
    """Its stack's imports alone (:data:`bench.startup.STACKS`), if it has one."""

    def row(self, label: str, target: float) -> list[str]:
        """A verdict row: the figure, its stack's beside it, and whether the stack alone
        puts the target out of reach on this machine."""
        figure = f"{self.cpu:.2f}"
        if self.stack is not None:
            figure += f" (its stack's imports alone: {self.stack:.2f})"
        said = stack_verdict(self.cpu, self.stack, target, missed=verdict(False))
        return [label, figure, f"≤ {target:g}", said]


def startup_rows(text: str) -> dict[str, Startup]:
    """``bench.startup``'s table, by command."""
    found: dict[str, Startup] = {}
    header: list[str] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "command":
            header = cells
        elif header and len(cells) == len(header) and not cells[0].startswith("---"):
            stack = cells[header.index(STACK_COLUMN)]
            found[cells[0]] = Startup(float(cells[1]), None if stack == "–" else float(stack))
    return found


def _ratio(
    batches: dict[str, list[storage_speed.Batch]], a: str, b: str
) -> tuple[float, float, float]:
    return storage_speed.ratio(batches, a, b)


WRITE, SEED, RESUME, FLEET = 1.5, 2.5, 3.0, 0.6
"""Issue 25's lines: a turn through ``write_batch`` and the seed API over the peer's, a
live resume over the peer's last-50 read (at most), 4 processes over raw asyncpg (at
least); the recorder's over raw is ``recorder_cpu.TARGET``."""


def bars(r: Results) -> list[Bar]:
    """Every paired ratio with a target (the chart's rows, the verdicts' figures)."""
    ss = storage_speed
    out = [
        Bar("write_batch / SQLiteSession", *_ratio(r.writes, ss.COACH, ss.PEER), WRITE),
        Bar("seed API / SQLiteSession", *_ratio(r.writes, ss.SEED, ss.PEER), SEED),
        Bar(
            "live resume @ 2,000 / SQLiteSession last 50",
            *_ratio(r.resume, ss.RESUME, ss.PEER),
            RESUME,
        ),
    ]
    for rec in r.recorder:
        ratios = rec.ratios
        mid = statistics.median(ratios)
        out.append(
            Bar(
                f"recorder / raw, {rec.db} {rec.name}",
                mid,
                min(ratios),
                max(ratios),
                recorder_cpu.TARGET,
            )
        )
    loads = raw_ratios(r.load)
    if loads:
        mid = statistics.median(loads)
        out.append(
            Bar("4 processes PG: coach / raw asyncpg", mid, min(loads), max(loads), FLEET, True)
        )
    return out


LEAST = (
    "by hand in SQLAlchemy + what coach keeps (`bench.kept`; an estimate across two measurements)"
)
SEED_LEAST = (
    "its three calls by hand in SQLAlchemy alone (the turn's ladder; what coach keeps "
    "would only add to it)"
)


def least(r: Results) -> list[Bar]:
    """The least coach can cost while it keeps every behaviour, for each storage target
    whose reference is measured in SQLAlchemy: that reference in each round, plus what
    coach keeps on that path (``bench.kept``), over the target's anchor in the same
    round. The seed API's is its reference alone (``bench.kept`` has no ledger of its
    three calls): a lower bound of its least. For the 4 processes, by the machine's CPU a
    message (the processes' and the server's), the reference's with the kept CPU added:
    flat out, the CPUs are the bound, and their time is steadier than the throughput."""
    kept_on = {ledger.key: ledger.total for ledger in r.ledgers}
    out = []

    def bar(
        label: str, values: list[float], target: float, at_least: bool = False, what: str = LEAST
    ) -> None:
        mid = statistics.median(values)
        out.append(Bar(f"{label}: {what}", mid, min(values), max(values), target, at_least))

    parts, turn = r.parts.parts, kept_on["turn"]
    bar(
        "write_batch / SQLiteSession",
        [
            (stack + turn) / peer
            for stack, peer in zip(parts[profiles.T_STACK], parts[profiles.T_PEER], strict=True)
        ],
        WRITE,
    )
    bar(
        "seed API / SQLiteSession",
        [
            seed / peer
            for seed, peer in zip(parts[profiles.T_SEED], parts[profiles.T_PEER], strict=True)
        ],
        SEED,
        what=SEED_LEAST,
    )
    ss, resume = storage_speed, kept_on["resume"] * 1e-6
    bar(
        "live resume / SQLiteSession last 50",
        [
            (hand.cpu_per_op + resume) / peer.cpu_per_op
            for hand, peer in zip(r.resume[ss.HAND_STACK], r.resume[ss.PEER], strict=True)
        ],
        RESUME,
    )
    for rec in r.recorder:
        message = kept_on[f"{rec.db} {rec.name}"] * 1e-6
        bar(
            f"recorder / raw, {rec.db} {rec.name}",
            [(s + message) / w for s, w in zip(rec.stack_cpu, rec.raw_cpu, strict=True)],
            recorder_cpu.TARGET,
        )
    fleet = [rec for rec in r.recorder if rec.db == "postgres" and rec.sessions > 1]
    if fleet and r.load.hand:
        bar(
            "4 processes PG / raw asyncpg, by CPU a message",
            cpu_ratios(r.load, r.load.hand, kept_on[f"postgres {fleet[0].name}"]),
            FLEET,
            True,
        )
    return out


def render(r: Results, command: str, started: datetime, seconds: float, loads: list[str]) -> str:
    """The generated part of the docs."""
    ss = storage_speed
    pings, _ = r.pings
    starts = startup_rows(r.startup)
    rows = [
        [
            b.label,
            f"{b.median:.2f}× ({b.low:.2f}–{b.high:.2f})",
            f"{'≥' if b.at_least else '≤'} {b.target:g}×",
            verdict(b.met),
        ]
        for b in bars(r)
    ]

    def plain(label: str, mid: float, low: float, high: float) -> None:
        rows.append([label, f"{mid:.2f}× ({low:.2f}–{high:.2f})", "–", "–"])

    for label, peer in ((ss.COACH, ss.RAW), (ss.SEED, ss.RAW)):
        plain(f"{label} / raw sqlite3 (coach's rows)", *_ratio(r.writes, label, peer))
    plain("live resume / raw sqlite3 (the same rows)", *_ratio(r.resume, ss.RESUME, ss.RAW))
    floor = "floor: coach's recorder over raw's writer / raw"
    floors = [(f"{floor}, {rec.db} {rec.name}", rec.floor_ratios) for rec in r.recorder]
    floors += [
        (
            "coach / raw asyncpg by CPU a message (raw's over coach's), 4 processes PG",
            cpu_ratios(r.load),
        ),
        (f"{floor}, 4 processes PG", raw_ratios(r.load, r.load.floor)),
        (
            "floor through SQLAlchemy: the same, raw's statements in SQLAlchemy / raw, "
            "4 processes PG",
            raw_ratios(r.load, r.load.sqlalchemy),
        ),
        (
            "by hand through SQLAlchemy: the rows made by hand in the timed loop, raw's "
            "statements in SQLAlchemy, no recorder / raw, 4 processes PG",
            raw_ratios(r.load, r.load.hand),
        ),
    ]
    by_hand = "by hand: raw + the rows encoded by hand (`bench.handwritten`) / raw"
    floors += [(f"{by_hand}, {rec.db} {rec.name}", rec.hand_ratios) for rec in r.recorder]
    in_stack = (
        "by hand in SQLAlchemy: the rows made by hand in the timed loop, raw's statements in "
        "SQLAlchemy, no recorder / raw"
    )
    floors += [(f"{in_stack}, {rec.db} {rec.name}", rec.stack_ratios) for rec in r.recorder]
    for label, found in floors:
        if found:
            plain(label, statistics.median(found), min(found), max(found))
    for what, batches in (("a turn", r.writes), ("a resume", r.resume)):
        label = f"floor in {what}: raw sqlite3 and coach's own work / SQLiteSession"
        plain(label, *_ratio(batches, ss.FLOOR, ss.PEER))
    plain(
        "by hand, a resume: raw sqlite3's read, then the contract's decode written by hand "
        "(`bench.handwritten`) / SQLiteSession",
        *_ratio(r.resume, ss.HAND, ss.PEER),
    )
    plain(
        "by hand in SQLAlchemy, a resume: the same read in SQLAlchemy's connection and "
        "transaction, then the same decode / SQLiteSession",
        *_ratio(r.resume, ss.HAND_STACK, ss.PEER),
    )
    for what, batches in (("a turn", r.writes), ("a resume", r.resume)):
        label = f"coach's own work in {what}, no database / SQLiteSession's whole {what[2:]}"
        plain(label, *_ratio(batches, ss.WORK, ss.PEER))
    for b in least(r):
        side = "above" if not b.at_least else "below"
        rows.append(
            [
                b.label,
                f"{b.median:.2f}× ({b.low:.2f}–{b.high:.2f})",
                f"{'≥' if b.at_least else '≤'} {b.target:g}×",
                "room left" if b.met else f"{side} the line: **cannot be met** keeping them",
            ]
        )
    rows.append(
        [
            f"`pool_pre_ping` round trips per PG transaction ({r.pings[1].count})",
            f"{pings / r.pings[1].count:.2f}",
            "0",
            verdict(pings == 0),
        ]
    )
    if "chat" in starts:
        rows.append(starts["chat"].row("`chat`: CPU to the greeting (s)", TARGET["chat"]))
    agentless = {k: v for k, v in starts.items() if k in NOT_AGENT}
    if agentless:
        worst = max(agentless, key=lambda k: agentless[k].cpu)
        rows.append(
            agentless[worst].row(
                f"commands without an agent: the slowest, `{worst}` (s)", TARGET["no agent"]
            )
        )
    rows.append(["`make test` wall time halved", "not measured by this command", "½", "–"])
    coach_visit = [v for v in r.visit if v.label.startswith("coach")]
    for v in coach_visit:
        rows.append(
            [f"storage of a real visit, {v.db} (stored / text)", f"{v.ratio:.2f}×", "–", "–"]
        )
    lines = [
        f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC in {seconds / 60:.0f} min.",
        "",
        f"Machine: {loads[0]}",
        "",
        f"Load average (1, 5, 15 min) at the start: {loads[1]}; at the end: {loads[2]}.",
        "",
        "### Verdicts",
        "",
        table(
            ["target", "measured (median of paired rounds, range)", "target", "verdict"],
            rows,
            right=1,
        ),
        "",
        "![The paired ratios against their targets](bench/ratios.svg)",
        "",
        "![Resume and write cost against session length and sessions per person]"
        "(bench/scaling.svg)",
        "",
        f"### A turn written and the live resume (SQLite, {len(r.writes[ss.COACH])} rounds)",
        "",
        f"A turn: {r.writes[ss.COACH][0].count:,} turns of one session per store and round.",
        "",
        ss.table(r.writes, ss.PEER, "turn"),
        "",
        f"The live resume at {r.resume[ss.RESUME][0].count} reads per store and round:",
        "",
        ss.table(r.resume, ss.PEER, "read"),
        "",
        "### The recorder's CPU per message against raw (same rows, same batching)",
        "",
        recorder_cpu.report(r.recorder),
        "",
        "### PostgreSQL: 4 recording processes, and raw asyncpg from the same processes",
        "",
        load_report(r.load),
        "",
        "### Storage of a real visit (tool calls, hand-offs, phase outputs, state)",
        "",
        visit_storage.report(r.visit),
        "",
        "### Scaling",
        "",
        scaling.report(r.scaling),
        "",
        "### Profiles (cProfile of every thread, CPU time)",
        "",
        profiles.report(r.profiles),
        "",
        "### A turn written, layer by layer (SQLite, no profiler, CPU of all threads)",
        "",
        profiles.parts_report(r.parts),
        "",
        "### A recorder's batch on PostgreSQL, layer by layer (no profiler, CPU of this process)",
        "",
        profiles.parts_report(r.pg_parts),
        "",
        "### A live resume, layer by layer (SQLite, no profiler, CPU of all threads)",
        "",
        profiles.parts_report(r.resume_parts),
        "",
        "### What coach keeps that the reference skips, timed alone (CPU, µs)",
        "",
        kept.report(r.ledgers),
        "",
        "### Start-up (fresh processes; CPU of all threads)",
        "",
        r.startup,
    ]
    return "\n".join(lines)


def write_into(doc: Path, body: str) -> None:
    """Replace what is between the markers in ``doc`` (appended, with them, if absent)."""
    text = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n\n{body}\n\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)


def _json(r: Results) -> dict[str, Any]:
    return {
        "ratios": [dataclasses.asdict(b) for b in bars(r)],
        "scaling": dataclasses.asdict(r.scaling),
        "recorder": [dataclasses.asdict(x) for x in r.recorder],
        "visit": [dataclasses.asdict(v) | {"workload": None} for v in r.visit],
        "startup": {n: dataclasses.asdict(s) for n, s in startup_rows(r.startup).items()},
        "turn_parts": r.parts.parts,
        "pg_batch_parts": r.pg_parts.parts,
        "resume_parts": r.resume_parts.parts,
        "kept": [dataclasses.asdict(ledger) for ledger in r.ledgers],
    }


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--charts", type=Path, default=ROOT / "docs" / "bench")
    args = parser.parse_args(argv)
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    z = QUICK if args.quick else Sizes()
    started, clock = datetime.now(UTC), time.perf_counter()

    def load() -> str:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"

    loads = [asyncio.run(machine()), load()]
    found = asyncio.run(collect(z))
    loads.append(load())
    seconds = time.perf_counter() - clock
    args.charts.mkdir(parents=True, exist_ok=True)
    ratios_chart(bars(found), args.charts / "ratios.svg")
    scaling_chart(found.scaling, args.charts / "scaling.svg")
    (args.charts / "results.json").write_text(json.dumps(_json(found), indent=1) + "\n")
    body = render(found, command, started, seconds, loads)
    if args.charts.resolve() != (args.doc.parent / "bench").resolve():
        rel = os.path.relpath(args.charts, args.doc.parent)
        body = body.replace("](bench/", f"]({rel}/")
    write_into(args.doc, body)
    _log(f"done in {seconds / 60:.1f} min: {args.doc}, {args.charts}")


if __name__ == "__main__":
    main()
