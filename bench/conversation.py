"""Section 6 of ``bench.core``: what recording costs the agent's event loop.

A scripted conversation (coach → strategist, with ``complete_phase`` calls sprinkled
in → evaluator → ``finish_session``) runs through a real ``AgentSession`` with the
scripted in-process model of ``coach.testing`` (it answers at once, so the loop does
nothing but the conversation and, when ON, recording). Runs alternate between recording
**ON** (the normal ``Runtime``: the session recorder queues every item and the
``Recorder`` commits from this loop) and **OFF** (same agents and database reads; a
recorder that discards every write).

Measured on the loop's thread (``time.thread_time``, so the driver's own threads —
aiosqlite's connection thread, the thread pool that pickles memory steps — do not
count):

* the CPU of the recorder's writer task, step by step: a task factory wraps the
  coroutine of ``Recorder._run`` so each resumption of it is timed (CPU and wall);
  its longest step is the longest time recording held the loop;
* the CPU of every ``Recorder.submit`` call (the handlers' enqueueing);
* the loop thread's whole CPU per run, ON minus OFF, paired: everything recording
  adds, the session recorder's event handlers and state writes included;
* loop stalls with a 1 ms ticker, and the process's resident memory (max of samples).
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import functools
import gc
import random
import statistics
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from .measure import (
    LoopMeter,
    Ratio,
    coach_keys,
    key_settings,
    pg_database,
    pg_url,
    sqlite_dir,
    sqlite_url,
    table,
    verdict,
)
from .text import TextGenerator

STALL_LIMIT_MS = 5.0


# --- metering the recorder's task ---------------------------------------------------------


@dataclass
class TaskMeter:
    """CPU and wall time of each step of the metered tasks."""

    cpu: float = 0.0
    steps: int = 0
    max_step_wall: float = 0.0
    steps_over_limit: int = 0

    def take(self) -> TaskMeter:
        """What was measured since the last ``take``; starts afresh."""
        taken = TaskMeter(self.cpu, self.steps, self.max_step_wall, self.steps_over_limit)
        self.cpu, self.steps, self.max_step_wall, self.steps_over_limit = 0.0, 0, 0.0, 0
        return taken

    def add(self, cpu: float, wall: float) -> None:
        """Account one step."""
        self.cpu += cpu
        self.steps += 1
        self.max_step_wall = max(self.max_step_wall, wall)
        if wall * 1000 > STALL_LIMIT_MS:
            self.steps_over_limit += 1


class _MeteredCoroutine(collections.abc.Coroutine[Any, Any, Any]):
    """Wraps a coroutine so that each ``send``/``throw`` (one task step) is timed."""

    def __init__(self, coro: collections.abc.Coroutine[Any, Any, Any], meter: TaskMeter) -> None:
        self._coro = coro
        self._meter = meter

    def send(self, value: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return self._coro.send(value)
        finally:
            self._meter.add(time.thread_time() - cpu, time.perf_counter() - wall)

    def throw(self, *args: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return self._coro.throw(*args)
        finally:
            self._meter.add(time.thread_time() - cpu, time.perf_counter() - wall)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()


def _is_recorder(coro: Any) -> bool:
    code = getattr(coro, "cr_code", None)
    return code is not None and code.co_qualname.startswith("Recorder.")


@contextlib.contextmanager
def meter_recorder_task(loop: asyncio.AbstractEventLoop) -> Iterator[TaskMeter]:
    """Meter every task started (by ``Recorder``) from a ``Recorder.*`` coroutine."""
    meter = TaskMeter()
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        if _is_recorder(coro):
            coro = _MeteredCoroutine(coro, meter)
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        yield meter
    finally:
        loop.set_task_factory(previous)


@dataclass
class SubmitMeter:
    """CPU of ``Recorder.submit`` calls."""

    calls: int = 0
    cpu: float = 0.0
    max_wall: float = 0.0

    def take(self) -> SubmitMeter:
        """What was measured since the last ``take``; starts afresh."""
        taken = SubmitMeter(self.calls, self.cpu, self.max_wall)
        self.calls, self.cpu, self.max_wall = 0, 0.0, 0.0
        return taken


@contextlib.contextmanager
def meter_submits(recorder_class: type[Any]) -> Iterator[SubmitMeter]:
    """Time every ``submit`` of ``recorder_class`` (and of its subclasses)."""
    meter = SubmitMeter()
    original = recorder_class.submit

    @functools.wraps(original)
    def submit(self: Any, op: Any) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            original(self, op)
        finally:
            meter.calls += 1
            meter.cpu += time.thread_time() - cpu
            meter.max_wall = max(meter.max_wall, time.perf_counter() - wall)

    recorder_class.submit = submit
    try:
        yield meter
    finally:
        recorder_class.submit = original


# --- the scripted conversation ------------------------------------------------------------


def build_script(turns: int, phases: int, seed: int = 7) -> list[tuple[str, list[Any]]]:
    """Per user turn: (what the user says, what the model replies to it).

    Turn 0 identifies the user, turn 1 captures the challenge and hands off to the
    strategist, ``phases`` evenly spaced turns call ``complete_phase``, the last three
    hand off to the evaluator, record the evaluation and finish. User turns are ~180
    characters and replies ~420, as in the other sections.
    """
    from coach.testing import call, say

    gen = TextGenerator(seed)
    rng = random.Random(seed)
    middle = range(2, turns - 3)
    phase_turns = {middle[(k + 1) * len(middle) // (phases + 1)] for k in range(phases)}
    script: list[tuple[str, list[Any]]] = [
        ("Hi, I'm Ada Bench.", [call("identify_user", name="Ada Bench"), say(gen.text(420))]),
        (
            "I want to redesign onboarding for a budgeting app.",
            [
                call("capture_design_challenge", challenge="Redesign budgeting app onboarding."),
                call("transfer_to_strategist"),
                say(gen.text(420)),
            ],
        ),
    ]
    for turn in middle:
        replies = [say(gen.text(420))]
        if turn in phase_turns:
            replies.insert(0, call("complete_phase", summary=gen.text(rng.randint(150, 300))))
        script.append((gen.text(180), replies))
    scores = {"desirability": 4, "feasibility": 3, "viability": 4}
    script += [
        ("Let's evaluate it.", [call("transfer_to_evaluator"), say(gen.text(420))]),
        ("Go ahead.", [call("record_evaluation", **scores, summary=gen.text(150)), say("Done.")]),
        ("Thanks, that's all.", [call("finish_session"), say("Goodbye!")]),
    ]
    return script


@dataclass
class Run:
    """One scripted conversation."""

    recording: bool
    turns: int
    seconds: float
    loop_cpu: float
    """CPU of the loop's thread over the conversation (and, ON, the flush after it)."""
    meter: LoopMeter
    task: TaskMeter
    submits: SubmitMeter
    commits: int
    session_id: str | None = None
    """The session recorded (ON), for reading back what was stored."""


@dataclass
class Meters:
    """The section's meters, installed before the runtime starts its writer task."""

    task: TaskMeter
    submits: SubmitMeter


async def converse(runtime: Any, meters: Meters, turns: int, *, recording: bool) -> Run:
    """One whole scripted conversation, with recording ON or OFF."""
    from livekit.agents import AgentSession

    from coach.conversation.live_state import LiveState
    from coach.conversation.recorder import Recorder
    from coach.testing import ScriptedLLM, say

    class DiscardingRecorder(Recorder):
        """Recording OFF: accepts every write and throws it away."""

        def submit(self, op: Any) -> None:
            pass

    phases = len(runtime.prompts.manifest.owned_by("strategist"))
    script = build_script(turns, phases)
    greeting = say("Hi! I'm your design coach. What's your name?")
    model = ScriptedLLM([greeting, *(r for _, replies in script for r in replies)], chunk_size=16)
    userdata = runtime.new_userdata()
    if recording:
        session = runtime.new_session(userdata, llm=model)
    else:  # nothing reaches the database: no messages, steps, phase outputs nor zones
        userdata.recorder = DiscardingRecorder(runtime.store)
        userdata.state = LiveState(userdata.recorder)
        session = AgentSession(userdata=userdata, llm=model)
    before = runtime.recorder.stats().batches
    meters.task.take()
    meters.submits.take()
    async with LoopMeter() as meter:
        start, cpu = time.perf_counter(), time.thread_time()
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        for user_input, _ in script:
            await session.run(user_input=user_input)
        await session.aclose()
        if recording:
            await asyncio.wait_for(runtime.recorder.flush(), 30)
        seconds = time.perf_counter() - start
        loop_cpu = time.thread_time() - cpu
    task, submits = meters.task.take(), meters.submits.take()
    if model.script.remaining or userdata.status != "completed":
        raise RuntimeError(f"conversation went off script: {model.script!r}, {userdata.status}")
    if recording and userdata.session_id is not None:
        stored = await runtime.store.get_session_conversation(userdata.session_id)
        if len(stored) < 2 * turns:
            raise RuntimeError(f"only {len(stored)} messages stored for {turns} turns")
    commits = runtime.recorder.stats().batches - before
    return Run(
        recording, turns, seconds, loop_cpu, meter, task, submits, commits, userdata.session_id
    )


@dataclass
class ConversationResult:
    """All runs of one database; ``on[i]`` and ``off[i]`` ran back to back."""

    db: str
    turns: int
    on: list[Run] = field(default_factory=list)
    off: list[Run] = field(default_factory=list)

    def per_turn_us(self, values: list[float]) -> float:
        """Median of ``values`` (seconds per run) as µs per turn."""
        return statistics.median(values) / self.turns * 1e6


async def section_conversation(db: str, turns: int, pairs: int) -> ConversationResult:
    """``pairs`` ON/OFF pairs of a ``turns``-turn conversation on ``db``."""
    from pydantic import SecretStr

    from coach.conversation.runtime import Runtime
    from coach.persistence import open_repository
    from coach.settings import Settings

    result = ConversationResult(db, turns)
    async with _database(db) as url:
        repo = await open_repository(url, **coach_keys(url), secret=b"x" * 32, create_schema=True)
        await repo.aclose()
        settings = Settings(
            database_url=url,
            **key_settings(url),
            secret_key=SecretStr("coach-bench-secret-0123456789abcdef"),
            llm_base_url="http://127.0.0.1:9/v1",
            _env_file=None,
        )
        from coach.conversation.recorder import Recorder

        loop = asyncio.get_running_loop()
        with meter_recorder_task(loop) as task, meter_submits(Recorder) as submits:
            runtime = await Runtime.open(settings)  # starts the writer task: metered
            meters = Meters(task, submits)
            try:
                await _pairs(runtime, meters, result, pairs)
            finally:
                await runtime.aclose()
        if not any(r.task.steps for r in result.on):
            raise RuntimeError("the recorder's writer task was not found (renamed?)")
    return result


async def _pairs(runtime: Any, meters: Meters, result: ConversationResult, pairs: int) -> None:
    for recording in (True, False):  # warm-up: imports, statement caches, pools
        await converse(runtime, meters, 20, recording=recording)
    for n in range(pairs):
        for recording in (True, False) if n % 2 == 0 else (False, True):
            gc.collect()
            run = await converse(runtime, meters, result.turns, recording=recording)
            (result.on if recording else result.off).append(run)
            _log(
                f"  [6] {result.db} pair {n + 1} recording {'ON ' if recording else 'OFF'} "
                f"{run.seconds:.2f} s, loop cpu {run.loop_cpu:.2f} s"
            )


@contextlib.asynccontextmanager
async def _database(db: str) -> Any:
    if db == "sqlite":
        with sqlite_dir() as directory:
            yield sqlite_url(directory / "conversation.db")
    else:
        async with pg_database("conversation") as name:
            yield pg_url(name)


def conversation_report(results: list[ConversationResult]) -> str:
    """Section 6's table and verdict."""
    rows = []
    verdicts = []
    for r in results:
        task_cpu = [x.task.cpu for x in r.on]
        submit_cpu = [x.submits.cpu for x in r.on]
        both = [a + b for a, b in zip(task_cpu, submit_cpu, strict=True)]
        diff = [a.loop_cpu - b.loop_cpu for a, b in zip(r.on, r.off, strict=True)]
        cpu_ratio = Ratio.of([x.loop_cpu for x in r.on], [x.loop_cpu for x in r.off])
        worst_step = max(x.task.max_step_wall for x in r.on) * 1000
        worst_submit = max(x.submits.max_wall for x in r.on) * 1000
        over = sum(x.task.steps_over_limit for x in r.on)
        stall_on = max(x.meter.max_ms for x in r.on)
        stall_off = max(x.meter.max_ms for x in r.off)
        rss_on = statistics.median(x.meter.rss_max for x in r.on) / 2**20
        rss_off = statistics.median(x.meter.rss_max for x in r.off) / 2**20
        commits = statistics.median(x.commits for x in r.on)
        rows.append(
            [
                r.db,
                f"{r.per_turn_us(task_cpu):.0f} + {r.per_turn_us(submit_cpu):.0f} "
                f"= {r.per_turn_us(both):.0f}",
                f"{r.per_turn_us(diff):.0f}",
                str(cpu_ratio),
                f"{worst_step:.1f} ({over} over {STALL_LIMIT_MS:.0f} ms)",
                f"{worst_submit:.2f}",
                f"{stall_on:.1f} / {stall_off:.1f}",
                f"{rss_on:.0f} / {rss_off:.0f}",
                f"{commits:.0f}",
            ]
        )
        verdicts.append(
            f"- {r.db}: longest step of the recorder's task **{worst_step:.1f} ms** "
            f"(target: none > {STALL_LIMIT_MS:.0f} ms): {verdict(over == 0 and worst_submit < 5)}"
        )
    pairs = len(results[0].on) if results else 0
    head = (
        f"{results[0].turns if results else 0}-turn scripted conversation, {pairs} ON/OFF "
        "pairs, interleaved; CPU is the loop thread's, per turn.\n\n"
    )
    return (
        head
        + table(
            [
                "DB",
                "recorder CPU per turn: writer task + submits (µs)",
                "loop CPU ON − OFF per turn, median of pairs (µs)",
                "loop CPU ON / OFF (median of pairs, range)",
                "longest writer-task step (ms)",
                "longest submit (ms)",
                "max loop stall ON / OFF (ms)",
                "RSS ON / OFF, median of run max (MiB)",
                "commits per conversation",
            ],
            rows,
        )
        + "\n\n"
        + "\n".join(verdicts)
    )


def _log(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)
