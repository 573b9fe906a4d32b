"""coach's persistence core next to its anchors, side by side in one run.

Run from the repository root (the anchors come with the ``bench`` extra:
``pip install -e '.[dev,bench]'``)::

    python -m bench.core            # the full run behind docs/benchmarks.md (~30-40 min)
    python -m bench.core --quick    # a smoke run of every section, under about a minute
    python -m bench.core --sections 1,4 --reps 3   # some sections, other sizes

Sections (each prints its table and the exact command that reproduces it):

1. Writes through the seed API (three calls per turn) and one-turn ``write_batch`` vs
   openai-agents ``SQLAlchemySession`` / ``SQLiteSession``, LangGraph
   ``AsyncSqliteSaver`` and raw aiosqlite, each committing every turn, on SQLite; and
   the hand-offs to other threads per turn.
2. The ``Recorder`` under sustained load: amortized time to durable per turn vs raw
   aiosqlite committing every turn.
3. ``resume_session`` latency at several session lengths, SQLite and PostgreSQL, next
   to the anchors reading their newest 25 pairs.
4. Storage per turn over message text bytes, SQLite and PostgreSQL.
5. PostgreSQL with several recording processes: flat-out messages/s, and enqueue →
   commit latency at a fixed offered rate.
6. Recording's CPU and stalls on the agent's event loop, and the process RSS, over a
   scripted ``AgentSession`` conversation.

Comparisons are medians of paired runs (coach and an anchor back to back, alternating
order); a lone absolute time is never the result. PostgreSQL: the server of
``COACH_BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
each section creates its own ``coach_bench_*`` database and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import multiprocessing
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .backends import LangGraphBackend
from .measure import pg_fetchval
from .text import corpus_stats, turns

COMMAND = "python -m bench.core"


@dataclass(frozen=True)
class Profile:
    """Default sizes of a full run or of ``--quick``."""

    reps: int
    long_turns: int
    sessions: int
    session_turns: int
    langgraph_max_turns: int
    resume_sizes: str
    resume_reads: int
    pg_processes: int
    pg_sessions: int
    pg_messages: int
    pg_rate: float
    pg_seconds: float
    pg_reps: int
    conv_turns: int
    conv_pairs: int
    conv_dbs: str


FULL = Profile(
    reps=6,
    long_turns=2000,
    sessions=200,
    session_turns=20,
    langgraph_max_turns=300,
    resume_sizes="100,2000,10000",
    resume_reads=200,
    pg_processes=4,
    pg_sessions=50,
    pg_messages=20_000,
    pg_rate=2500,
    pg_seconds=20,
    pg_reps=3,
    conv_turns=200,
    conv_pairs=12,
    conv_dbs="sqlite,postgres",
)
QUICK = Profile(
    reps=1,
    long_turns=150,
    sessions=20,
    session_turns=8,
    langgraph_max_turns=100,
    resume_sizes="100,500,2000",
    resume_reads=15,
    pg_processes=4,
    pg_sessions=50,
    pg_messages=1500,
    pg_rate=2500,
    pg_seconds=3,
    pg_reps=1,
    conv_turns=25,
    conv_pairs=1,
    conv_dbs="sqlite",
)

SECTION_FLAGS: dict[int, tuple[str, ...]] = {
    1: ("reps", "long_turns", "sessions", "session_turns", "langgraph_max_turns"),
    2: ("reps", "long_turns", "sessions", "session_turns"),
    3: ("resume_sizes", "resume_reads", "dbs"),
    4: ("long_turns", "sessions", "session_turns", "langgraph_max_turns", "dbs"),
    5: ("pg_processes", "pg_sessions", "pg_messages", "pg_rate", "pg_seconds", "pg_reps"),
    6: ("conv_turns", "conv_pairs", "conv_dbs"),
}
TITLES = {
    1: "Writes, one turn committed per call (SQLite)",
    2: "The recorder under sustained load (SQLite)",
    3: "Resume reads",
    4: "Storage per turn",
    5: "PostgreSQL: several recording processes",
    6: "Recording on the agent's event loop",
}


def section_command(section: int, args: argparse.Namespace) -> str:
    """The command that reruns ``section`` with the sizes used here."""
    flags = [f"--sections {section}"]
    for name in SECTION_FLAGS[section]:
        value = getattr(args, name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, list):
            value = ",".join(value)
        flags.append(f"--{name.replace('_', '-')} {value}")
    return f"{COMMAND} {' '.join(flags)}"


async def machine() -> str:
    """One line about the machine and the versions compared."""
    versions = []
    for package in (
        "SQLAlchemy",
        "aiosqlite",
        "asyncpg",
        "livekit-agents",
        "openai-agents",
        "langgraph",
        "langgraph-checkpoint-sqlite",
    ):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    try:
        server = f"PostgreSQL {str(await pg_fetchval('SHOW server_version')).split()[0]}"
    except (OSError, Exception):
        server = "PostgreSQL unreachable"
    return (
        f"{os.cpu_count()} CPUs ({platform.machine()}, {platform.system()} "
        f"{platform.release()}), Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, {server}; {', '.join(versions)}"
    )


async def run(args: argparse.Namespace) -> str:
    """Run the selected sections; return the report (markdown)."""
    from . import sections as s

    chosen = sorted({int(x) for x in args.sections.split(",")})
    long = s.Workload(1, args.long_turns)
    many = s.Workload(args.sessions, args.session_turns)
    stats = corpus_stats(turns(1, 2000))
    out = [
        f"Run: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC — "
        f"`{COMMAND} {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        f"Machine: {await machine()}",
        "",
        f"Text: user messages {stats.mean_user_chars:.0f} characters on average, replies "
        f"{stats.mean_assistant_chars:.0f}; zlib compresses one message "
        f"{stats.zlib_ratio_per_message:.2f}× and all of them together "
        f"{stats.zlib_ratio_whole:.2f}× (English prose: about 2.5–3×).",
    ]
    out += [
        "",
        "Load average at the start (1, 5, 15 min): "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
        + f" on {os.cpu_count()} CPUs.",
    ]
    print("\n".join(out) + "\n", flush=True)
    results: dict[int, str] = {}
    first_runs: dict[tuple[str, str], s.WriteRun] = {}
    labels = list(s.SQLITE_BACKENDS)
    limits = {LangGraphBackend.label: args.langgraph_max_turns}
    started = time.perf_counter()

    def done(section: int, body: str) -> None:
        command = section_command(section, args)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        body += f"\n\nLoad average when it ended (1, 5, 15 min): {load}."
        results[section] = body
        print(f"### {section}. {TITLES[section]}\n\n{body}\n\nCommand: `{command}`\n", flush=True)
        s.log(f"[{section}] done after {time.perf_counter() - started:.0f} s")

    if 1 in chosen:
        found = [
            await s.section_writes(w, args.reps, labels, args.langgraph_max_turns)
            for w in (long, many)
        ]
        for result in found:
            for label, runs in result.runs.items():
                first_runs[(result.workload.name, label)] = runs[0]
        done(1, s.writes_report(found))
    if 2 in chosen:
        done(2, s.recorder_report([await s.section_recorder(w, args.reps) for w in (long, many)]))
    if 3 in chosen:
        sizes = [int(x) for x in args.resume_sizes.split(",")]
        reads = [await s.section_reads(db, sizes, args.resume_reads, True) for db in args.dbs]
        done(3, s.reads_report(reads))
    if 4 in chosen:
        storage: list[s.Storage] = []
        for w in (long, many):
            previous = {
                label: first_runs[(w.name, label)]
                for label in labels
                if (w.name, label) in first_runs
            }
            storage += await s.sqlite_storage(w, labels, previous, limits)
        if "postgres" in args.dbs:
            for w in (long, many):
                storage += await s.pg_storage(w)
        done(4, s.storage_report(storage))
    if 5 in chosen:
        from .pgload import load_report, section_load

        load = await section_load(
            args.pg_processes,
            args.pg_sessions,
            args.pg_messages,
            args.pg_rate,
            args.pg_seconds,
            args.pg_reps,
        )
        done(5, load_report(load))
    if 6 in chosen:
        from .conversation import conversation_report, section_conversation

        conversations = [
            await _in_child_process(section_conversation, db, args.conv_turns, args.conv_pairs)
            for db in args.conv_dbs.split(",")
        ]
        done(6, conversation_report(conversations))
    for section in chosen:
        out += ["", f"### {section}. {TITLES[section]}", "", results[section], ""]
        out.append(f"Command: `{section_command(section, args)}`")
    return "\n".join(out) + "\n"


async def _in_child_process(function: Callable[..., Any], *args: Any) -> Any:
    """``await function(*args)`` in a fresh Python process (spawned), and its result.

    Section 6 measures the memory of a process that runs a conversation: a fresh one
    has loaded coach and LiveKit, not the anchors and data of the other sections.
    """
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, _run_coroutine, function, args)


def _run_coroutine(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(function(*args))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Flags; sizes left out take the full run's defaults, or ``--quick``'s."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--sections", default="1,2,3,4,5,6", help="comma-separated, 1-6")
    parser.add_argument(
        "--dbs", default="sqlite,postgres", help="databases of sections 3 and 4 (sqlite,postgres)"
    )
    parser.add_argument("--output", type=Path, help="also write the report to this file")
    described: dict[str, tuple[Callable[[str], object], str]] = {
        "reps": (int, "runs of each store per workload (sections 1, 2)"),
        "long_turns": (int, "turns of the one long session"),
        "sessions": (int, "sessions of the many-sessions workload"),
        "session_turns": (int, "turns of each of those sessions"),
        "langgraph_max_turns": (int, "LangGraph stops after this many turns per session"),
        "resume_sizes": (str, "session lengths (turns) whose resume is timed"),
        "resume_reads": (int, "reads per store and size"),
        "pg_processes": (int, "recording processes (section 5)"),
        "pg_sessions": (int, "sessions per process"),
        "pg_messages": (int, "messages per process, flat out"),
        "pg_rate": (float, "messages/s offered in total, paced"),
        "pg_seconds": (float, "duration of a paced run"),
        "pg_reps": (int, "flat-out and paced runs"),
        "conv_turns": (int, "turns of the scripted conversation (section 6)"),
        "conv_pairs": (int, "ON/OFF pairs of it"),
        "conv_dbs": (str, "databases of section 6 (sqlite,postgres)"),
    }
    for name, (kind, text) in described.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, help=text)
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else FULL
    for name in described:
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
    args.dbs = [db for db in args.dbs.split(",") if db]
    unknown = {int(x) for x in args.sections.split(",")} - set(TITLES)
    if unknown:
        parser.error(f"no section {sorted(unknown)}")
    return args


def main() -> None:
    """Entry point."""
    logging.basicConfig(level=logging.WARNING)
    args = parse_args()
    report = asyncio.run(run(args))
    if args.output:
        args.output.write_text(report)


if __name__ == "__main__":
    main()
