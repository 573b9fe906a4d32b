"""Does recording slow the voice turn? Recording on vs off, loop stalls, recorder throughput.

Run from the repository root::

    python -m bench.recording [--turns 200] [--runs 16] [--db sqlite|postgres|both]
                              [--writer process|inline|both]

1. A scripted conversation (coach → strategist → evaluator, ``--turns`` user turns)
   runs through ``AgentSession`` with recording ON (the normal ``Runtime``: a
   ``SessionRecorder`` on the session and the ``Recorder`` writing to the database,
   through its writer process or — ``--writer inline`` — from the event loop) and OFF
   (same agents and database reads, but no ``SessionRecorder`` and a recorder that
   discards every write), in ``--runs`` back-to-back pairs. Reported: the median of
   the pairs' ON/OFF ratios, of wall time and of the agent process's CPU time (a
   pair's two runs see the same machine; on a shared machine single runs vary by
   ±30 %).
2. During every run a ticker task sleeps 1 ms and records how late it wakes up: the
   event-loop stalls. One more ON run with asyncio debug mode names every callback
   slower than 5 ms, so stalls can be attributed to the recorder or not.
3. Sustained recorder throughput: ``--messages`` ``AddMessage`` ops (plus one
   ``AppendSteps`` with a real ``ChatMessage`` every 20 messages) over 4 sessions,
   submitted as fast as back-pressure allows, timed until flushed (through the
   writer process).

The results are printed as markdown and written into ``docs/benchmarks.md`` (between
markers; text outside them is kept).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from livekit.agents import AgentSession, llm
from sqlalchemy.engine import make_url
from tests.fakes import Reply, ScriptedLLM, call, say

from coach.live_state import LiveState
from coach.persistence import DEFAULT_PHASE_IDS, open_repository, upgrade
from coach.recording import Recorder, WriteOp
from coach.recording.writer_process import WriterConfig, WriterProcess
from coach.runtime import Runtime
from coach.settings import Settings

SECRET = "coach-bench-secret-0123456789abcdef"
PG_ADMIN_URL = os.environ.get(
    "COACH_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
DOCS = Path("docs/benchmarks.md")
BEGIN, END = "<!-- bench.recording:begin -->", "<!-- bench.recording:end -->"
STALL_LIMIT_MS = 5.0
RATIO_GOAL = 1.05


# --- databases --------------------------------------------------------------------------


def _pg_url(database: str, driver: str = "postgresql+asyncpg") -> str:
    url = make_url(PG_ADMIN_URL).set(drivername=driver, database=database)
    return url.render_as_string(hide_password=False)


async def _pg_admin(statement: str) -> str:
    conn = await asyncpg.connect(_pg_url("postgres", "postgresql"), timeout=10)
    try:
        return str(await conn.fetchval(statement) or "")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def database(kind: str) -> AsyncIterator[str]:
    """A fresh migrated database (a temporary SQLite file or a PostgreSQL database)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="coach-bench-") as tmp:
            url = f"sqlite+aiosqlite:///{tmp}/bench.db"
            await upgrade(url)
            yield url
        return
    name = f"coach_bench_{uuid.uuid4().hex[:12]}"
    await _pg_admin(f'CREATE DATABASE "{name}"')
    try:
        url = _pg_url(name)
        await upgrade(url)
        yield url
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- event-loop stalls -----------------------------------------------------------------


@dataclass
class StallMeter:
    """A task that sleeps ``period`` and records how late it wakes up, and full GC pauses.

    A tick whose wait contains a full (generation 2) garbage collection is counted as a
    GC stall: it is the whole process's heap being scanned, whoever allocated last.
    """

    period: float = 0.001
    ticks: list[tuple[float, float]] = field(default_factory=list)
    """(woke at, lateness in ms) per tick."""
    gc_pauses: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) of every full collection."""
    _task: asyncio.Task[None] | None = None
    _gc_start: float = 0.0

    async def _tick(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.period)
            now = time.perf_counter()
            self.ticks.append((now, (now - start - self.period) * 1000))

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._gc_start = time.perf_counter()
            else:
                self.gc_pauses.append((self._gc_start, time.perf_counter()))

    def lateness_ms(self, *, gc: bool) -> list[float]:
        """Lateness of every tick (``gc=True``) or of the ticks without a full GC."""
        if gc:
            return [late for _, late in self.ticks]
        return [
            late
            for woke, late in self.ticks
            if not any(woke - late / 1000 - self.period <= end <= woke for _, end in self.gc_pauses)
        ]

    async def __aenter__(self) -> StallMeter:
        gc.collect()  # every run starts from the same heap
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        gc.callbacks.remove(self._on_gc)


@dataclass(frozen=True)
class Stalls:
    max_ms: float
    p99_ms: float
    over_limit: int
    ticks: int

    @classmethod
    def of(cls, lateness_ms: list[float]) -> Stalls:
        ordered = sorted(lateness_ms) or [0.0]
        return cls(
            max_ms=ordered[-1],
            p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            over_limit=sum(1 for x in ordered if x > STALL_LIMIT_MS),
            ticks=len(lateness_ms),
        )

    def __str__(self) -> str:
        return f"{self.max_ms:.1f} / {self.p99_ms:.2f} / {self.over_limit}"


@contextlib.contextmanager
def slow_callbacks(loop: asyncio.AbstractEventLoop) -> Iterator[list[tuple[str, float]]]:
    """asyncio debug mode: collect ``(handle, seconds)`` of callbacks over the stall limit."""
    found: list[tuple[str, float]] = []
    pattern = re.compile(r"Executing (.*) took (\d+\.\d+) seconds", re.S)

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = pattern.match(record.getMessage())
            if match:
                found.append((match.group(1), float(match.group(2))))

    handler, asyncio_log = Catch(), logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    asyncio_log.propagate = False
    loop.set_debug(True)
    loop.slow_callback_duration = STALL_LIMIT_MS / 1000
    try:
        yield found
    finally:
        loop.set_debug(False)
        asyncio_log.propagate = True
        asyncio_log.removeHandler(handler)


def is_recording(handle: str) -> bool:
    """Whether a slow callback belongs to recording (the writer task or its DB calls)."""
    return any(key in handle for key in ("coach.recorder", "Recorder", "write_batch"))


# --- the scripted conversation ---------------------------------------------------------

WORDS = (
    "people users onboarding budget setup goal month spend save category account bank "
    "link trust worry friction step screen prompt reminder habit progress reward simple "
    "clear first week value because when they often feel lost and skip the rest so we "
    "could try a shorter path with one question at a time then show what changed"
).split()


def prose(rng: random.Random, low: int, high: int) -> str:
    """Filler text between ``low`` and ``high`` characters long."""
    target = rng.randint(low, high)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < target:
        words.append(rng.choice(WORDS))
    return " ".join(words).capitalize() + "."


def build_script(turns: int, phases: int, seed: int = 7) -> list[tuple[str, list[Reply]]]:
    """Per user turn: (what the user says, what the model replies to it).

    Turn 0 identifies the user, turn 1 captures the challenge and hands off to the
    strategist, ``phases`` evenly spaced turns call ``complete_phase``, the last three
    hand off to the evaluator, record the evaluation and finish. The rest is plain talk.
    """
    rng = random.Random(seed)
    reply = lambda: say(prose(rng, 200, 600))  # noqa: E731
    middle = range(2, turns - 3)
    phase_turns = {middle[(k + 1) * len(middle) // (phases + 1)] for k in range(phases)}
    script: list[tuple[str, list[Reply]]] = [
        ("Hi, I'm Ada Bench.", [call("identify_user", name="Ada Bench"), reply()]),
        (
            "I want to redesign onboarding for a budgeting app.",
            [
                call("capture_design_challenge", challenge="Redesign budgeting app onboarding."),
                call("transfer_to_strategist"),
                reply(),
            ],
        ),
    ]
    for turn in middle:
        replies = [reply()]
        if turn in phase_turns:
            replies.insert(0, call("complete_phase", summary=prose(rng, 150, 300)))
        script.append((prose(rng, 60, 250), replies))
    scores = {"desirability": 4, "feasibility": 3, "viability": 4}
    script += [
        ("Let's evaluate it.", [call("transfer_to_evaluator"), reply()]),
        ("Go ahead.", [call("record_evaluation", **scores, summary=prose(rng, 100, 200)), reply()]),
        ("Thanks, that's all.", [call("finish_session"), reply()]),
    ]
    return script


class DiscardingRecorder(Recorder):
    """Recording OFF: accepts every write and throws it away."""

    def submit(self, op: WriteOp) -> None:
        pass


class LatentLLM(ScriptedLLM):
    """The scripted model, waiting ``delay`` seconds before each reply (time to first token)."""

    def __init__(self, replies: list[Reply], *, delay: float) -> None:
        super().__init__(replies, chunk_size=16)
        self.delay = delay

    def chat(self, **kwargs: Any) -> Any:
        stream = super().chat(**kwargs)
        if self.delay:  # the stream's task has not started yet: delay its body
            body = stream._run

            async def delayed() -> None:
                await asyncio.sleep(self.delay)
                await body()

            stream._run = delayed  # type: ignore[method-assign]
        return stream


@dataclass(frozen=True)
class Run:
    recording: bool
    seconds: float
    cpu_seconds: float
    """CPU time of the agent's process (all its threads; not a writer process)."""
    flush_seconds: float
    meter: StallMeter
    writes: int
    commits: int


async def converse(runtime: Runtime, turns: int, *, recording: bool, delay: float = 0.0) -> Run:
    """One whole scripted conversation; returns its wall time and loop lateness."""
    phases = len(runtime.prompts.manifest.owned_by("strategist"))
    script = build_script(turns, phases)
    greeting = say("Hi! I'm your design coach. What's your name?")
    model = LatentLLM([greeting, *(r for _, replies in script for r in replies)], delay=delay)
    userdata = runtime.new_userdata()
    if recording:
        session = runtime.new_session(userdata, llm=model)
    else:  # nothing reaches the database: no messages, steps, phase outputs nor zones
        userdata.recorder = DiscardingRecorder(runtime.store)
        userdata.state = LiveState(userdata.recorder)
        session = AgentSession(userdata=userdata, llm=model)
    before = runtime.recorder.stats()
    async with StallMeter() as meter:
        start, cpu_start = time.perf_counter(), time.process_time()
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        for user_input, _ in script:
            await session.run(user_input=user_input)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        await session.aclose()
        flush_start = time.perf_counter()
        await asyncio.wait_for(runtime.recorder.flush(), 30)
        flush_seconds = time.perf_counter() - flush_start
    if model.script.remaining or userdata.status != "completed":
        raise RuntimeError(f"conversation went off script: {model.script!r}, {userdata.status}")
    if recording and userdata.session_id is not None:
        stored = await runtime.store.get_session_conversation(userdata.session_id)
        if len(stored) < 2 * turns:
            raise RuntimeError(f"only {len(stored)} messages stored for {turns} turns")
    after = runtime.recorder.stats()
    writes, commits = after.written - before.written, after.batches - before.batches
    flushed = flush_seconds if recording else 0.0
    return Run(recording, seconds, cpu, flushed, meter, writes, commits)


@dataclass(frozen=True)
class ConversationResult:
    db: str
    writer: str
    turns: int
    on: list[Run]
    off: list[Run]
    """Run ``n`` of each mode ran back to back: they form pair ``n``."""
    debug_slow: list[tuple[str, float]]

    def median(self, recording: bool) -> float:
        return statistics.median(r.seconds for r in (self.on if recording else self.off))

    def pair_ratios(self, *, cpu: bool = False) -> list[float]:
        """ON/OFF of each back-to-back pair: the machine's drift cancels within a pair."""
        if cpu:
            return [a.cpu_seconds / b.cpu_seconds for a, b in zip(self.on, self.off, strict=True)]
        return [a.seconds / b.seconds for a, b in zip(self.on, self.off, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.pair_ratios())

    def stalls(self, recording: bool, *, gc: bool = True) -> Stalls:
        runs = self.on if recording else self.off
        return Stalls.of([x for r in runs for x in r.meter.lateness_ms(gc=gc)])

    def gc_max_ms(self, recording: bool) -> float:
        runs = self.on if recording else self.off
        return max((e - s for r in runs for s, e in r.meter.gc_pauses), default=0.0) * 1000


async def compare(
    url: str, db: str, writer: str, turns: int, runs: int, delay: float
) -> ConversationResult:
    settings = Settings(
        database_url=url,
        secret_key=SECRET,  # type: ignore[arg-type]
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_process=writer == "process",
        _env_file=None,  # type: ignore[call-arg]
    )
    runtime = await Runtime.open(settings)
    try:
        for recording in (True, False):  # warm-up: imports, statement caches, pools
            await converse(runtime, 20, recording=recording)
        done: dict[bool, list[Run]] = {True: [], False: []}
        for n in range(runs):
            for recording in (True, False) if n % 2 == 0 else (False, True):
                run = await converse(runtime, turns, recording=recording, delay=delay)
                done[recording].append(run)
                mode = "on " if recording else "off"
                print(
                    f"  {db}/{writer} run {n + 1} recording {mode} {run.seconds:.2f} s "
                    f"(cpu {run.cpu_seconds:.2f} s)",
                    file=sys.stderr,
                )
        with slow_callbacks(asyncio.get_running_loop()) as slow:
            await converse(runtime, turns, recording=True, delay=delay)
        return ConversationResult(db, writer, turns, done[True], done[False], list(slow))
    finally:
        await runtime.aclose()


# --- recorder throughput ----------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    db: str
    messages: int
    steps: int
    seconds: float
    batches: int
    written: int
    meter: StallMeter

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds


async def throughput(url: str, db: str, messages: int, sessions: int = 4) -> Throughput:
    store = await open_repository(url, secret=SECRET.encode())
    try:
        user = await store.get_or_create_user(f"bench-{uuid.uuid4().hex[:8]}")
        ids = [(await store.create_session(user.id, f"Throughput {n}")).id for n in range(sessions)]
        rng = random.Random(3)
        texts = [prose(rng, 200, 600) for _ in range(64)]
        writer = WriterProcess(WriterConfig(url, SECRET.encode(), DEFAULT_PHASE_IDS))
        await writer.write_batch([])  # started: time the writing, not the child's imports
        recorder = Recorder(writer)
        recorder.start()
        next_step = dict.fromkeys(ids, 0)
        async with StallMeter() as meter:
            start = time.perf_counter()
            for n in range(messages):
                sid, role = ids[n % sessions], ("user", "assistant")[n // sessions % 2]
                recorder.message(sid, role, texts[n % len(texts)], phase_id="empathize")
                if n % 20 == 0:
                    step = llm.ChatMessage(role=role, content=[texts[n % len(texts)]])
                    recorder.steps(sid, next_step[sid], [step])
                    next_step[sid] += 1
                if n % 100 == 99:  # let the writer run, as live sessions would
                    await recorder.wait_for_capacity()
                    await asyncio.sleep(0)
            await recorder.flush()
            seconds = time.perf_counter() - start
        stats = recorder.stats()
        await recorder.aclose()
        await writer.aclose()
        stored = sum([len(await store.get_session_conversation(sid)) for sid in ids])
        steps = sum([await store.agent_step_count(sid) for sid in ids])
        if stats.errors or stored != messages or steps != sum(next_step.values()):
            raise RuntimeError(f"throughput run lost writes: {stats}, {stored=}, {steps=}")
        return Throughput(db, messages, steps, seconds, stats.batches, stats.written, meter)
    finally:
        await store.aclose()


# --- report ----------------------------------------------------------------------------


async def machine(dbs: list[str]) -> str:
    import sqlite3

    parts = [
        f"{os.cpu_count()} CPUs ({platform.machine()}, {platform.system()} {platform.release()})",
        f"Python {platform.python_version()}",
        f"SQLite {sqlite3.sqlite_version}",
    ]
    if "postgres" in dbs:
        parts.append(f"PostgreSQL {await _pg_admin('SHOW server_version')}")
    return ", ".join(parts)


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}"


def conversation_table(results: list[ConversationResult]) -> list[str]:
    first = results[0]
    lines = [
        f"### Scripted conversation: {first.turns} turns, {len(first.on)} runs of each mode, "
        "interleaved",
        "",
        "Writer `process`: the recorder writes through its child process (the default); "
        "`inline`: from the agent's event loop (`COACH_RECORDER_PROCESS=false`). CPU is the "
        "agent process's (all its threads, not the writer process). Loop stalls are "
        "`max / p99 / ticks over 5 ms` of a 1 ms ticker, over all runs of a mode; the "
        "second column leaves out ticks that contain a full (gen-2) GC.",
        "",
        "| DB | writer | recording | median wall (s) | median CPU (s) | runs (s) "
        "| flush after close (s) | writes / commits | stalls, all (ms) "
        "| stalls, no full GC (ms) | longest full GC (ms) |",
        "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in results:
        for recording, runs in ((False, c.off), (True, c.on)):
            walls = ", ".join(f"{r.seconds:.2f}" for r in runs)
            cpu = statistics.median(r.cpu_seconds for r in runs)
            flush = f"{max(r.flush_seconds for r in runs):.3f}" if recording else "–"
            writes = f"{runs[0].writes} / {runs[0].commits}" if recording else "–"
            lines.append(
                f"| {c.db} | {c.writer} | {'ON' if recording else 'OFF'} "
                f"| {c.median(recording):.2f} | {cpu:.2f} | {walls} | {flush} | {writes} "
                f"| {c.stalls(recording)} | {c.stalls(recording, gc=False)} "
                f"| {c.gc_max_ms(recording):.0f} |"
            )
    lines += [
        "",
        "Ratios are medians over the back-to-back pairs (range in brackets).",
        "",
        "| DB | writer | wall ratio ON/OFF (goal ≤ 1.05) | CPU ratio ON/OFF "
        "| ratio incl. flush to durable | stall max ON − OFF, no full GC (ms) "
        "| callbacks > 5 ms in a debug run: recorder / other |",
        "|---|---|---|---|---:|---:|---|",
    ]
    for c in results:
        walls, cpus = c.pair_ratios(), c.pair_ratios(cpu=True)
        ours = [s for h, s in c.debug_slow if is_recording(h)]
        worst = f" (worst {max(ours) * 1000:.0f} ms)" if ours else ""
        other = len(c.debug_slow) - len(ours)
        stall = c.stalls(True, gc=False).max_ms - c.stalls(False, gc=False).max_ms
        verdict = "met" if c.ratio <= RATIO_GOAL else "**not met**"
        durable = statistics.median(
            (a.seconds + a.flush_seconds) / b.seconds for a, b in zip(c.on, c.off, strict=True)
        )
        lines.append(
            f"| {c.db} | {c.writer} | {c.ratio:.3f} {verdict} ({_spread(walls)}) "
            f"| {statistics.median(cpus):.3f} ({_spread(cpus)}) | {durable:.3f} | {stall:+.1f} "
            f"| {len(ours)}{worst} / {other} |"
        )
    return lines


def throughput_table(rates: list[Throughput]) -> list[str]:
    lines = [
        "### Sustained recorder throughput",
        "",
        "| DB | messages + memory steps | time to flushed (s) | messages/s | batches "
        "| mean ops/batch | stalls, all (ms) | stalls, no full GC (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in rates:
        lines.append(
            f"| {t.db} | {t.messages} + {t.steps} | {t.seconds:.2f} | {t.per_second:,.0f} "
            f"| {t.batches} | {t.written / t.batches:.0f} "
            f"| {Stalls.of(t.meter.lateness_ms(gc=True))} "
            f"| {Stalls.of(t.meter.lateness_ms(gc=False))} |"
        )
    return lines


def report(
    command: str, host: str, conversations: list[ConversationResult], rates: list[Throughput]
) -> str:
    lines = [f"Command: `{command}`", "", f"Machine: {host}", ""]
    if conversations:
        lines += [*conversation_table(conversations), ""]
    if rates:
        lines += throughput_table(rates)
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> None:
    """Replace the generated section of ``docs/benchmarks.md`` (creating the file if needed)."""
    block = f"{BEGIN}\n{section}{END}"
    text = DOCS.read_text() if DOCS.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(head + block + tail)


async def main(args: argparse.Namespace) -> None:
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    conversations, rates = [], []
    writers = ["process", "inline"] if args.writer == "both" else [args.writer]
    for db in dbs:
        async with database(db) as url:
            delay = args.llm_delay_ms / 1000
            for writer in writers:
                result = await compare(url, db, writer, args.turns, args.runs, delay)
                conversations.append(result)
            if args.messages:
                rates.append(await throughput(url, db, args.messages))
    command = " ".join(["python -m bench.recording", *sys.argv[1:]])
    section = report(command, await machine(dbs), conversations, rates)
    print(section)
    if not args.no_write:
        write_docs(section)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.recording", description=__doc__)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=16, help="runs of each mode")
    parser.add_argument(
        "--writer",
        choices=["process", "inline", "both"],
        default="both",
        help="where the recorder writes from (process: the default writer process)",
    )
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--messages", type=int, default=20_000, help="0 skips throughput")
    parser.add_argument("--llm-delay-ms", type=float, default=0.0, help="model latency per reply")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args()
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    return args


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parse_args()))
