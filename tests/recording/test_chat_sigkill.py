"""``python -m coach chat`` killed with SIGKILL at a random moment loses at most its commit window.

The recording contract (docs/operations.md): a SIGKILL loses at most the writes of the
current commit window (``COACH_RECORDER_COMMIT_INTERVAL``, 50 ms by default). This checks
it from the user's side, on the real command: ``python -m coach chat --user <unique>`` as a
subprocess, the real openai plugin talking to the fake OpenAI server
(``tests/fixtures/chat_visit.yaml``: 14 user turns, coach → strategist → evaluator), a
SQLite file and a PostgreSQL database. The test types one line whenever the previous reply
has been printed (full speed, no sleeps), stamps every ``coach>`` line and every tool line
with ``time.time()`` when it arrives, and kills the process with SIGKILL at a random moment:
half of the kills within the first seconds of the conversation (after the greeting — where
a recorder that is still starting up loses turns), half anywhere from spawn to a little
after the last reply. The seed is printed, and ``COACH_TEST_SIGKILL_SEED`` replays it.

After each kill (and after every process of the chat's process group has exited) the
database is read back through the repository, and for the user's session:

1. **The bound.** A reply printed at ``t`` is owed once it has been queued for longer than
   ``SLACK`` before the kill: ``max(t, session created) < t_kill - SLACK`` (what is said
   before the session exists is held in memory and queued when it is created). Every owed
   reply must be stored — in the conversation and in the memory steps — and every phase
   whose completing tool (``capture_design_challenge``, ``complete_phase``,
   ``record_evaluation``) printed its line by then must be stored as completed.
2. **Integrity.** The stored conversation, and the user/assistant messages among the memory
   steps, are each a prefix of what was said, in order (nothing invented, nothing twice);
   memory steps are numbered ``0..n-1`` and all of them load (``load_agent_state`` does not
   fall back to ``[]``); completed phases are a prefix of the manifest; the zoned state's
   deltas are numbered ``1..step``; no tool failed before the kill.
3. **Every listed session can be continued**, or says why not with one of the documented
   errors (``NothingToResume``, ``SessionCompleted``, ``SessionFailed``) — and a session
   owed a completed phase must resume, with all of its memory steps.

One clean run per backend comes first: it checks the harness (the whole script plays, the
process exits 0, everything is stored) and measures how long a visit takes. Linux only
(``/proc`` and pidfds, to wait for the killed process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import re
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import yaml
from livekit.agents import llm

from coach.errors import NothingToResume, SessionCompleted, SessionFailed
from coach.persistence import Repository, open_repository
from coach.prompts import load_prompts
from coach.testing import FakeOpenAIServer, Reply, parse_script
from tests.support import MEMORY_SECRET, keys_of

from .chat_process import spawn_chat
from .process_group import kill_group, wait_for_group
from .test_sigkill import stored_seqs

ROOT = Path(__file__).resolve().parents[2]
VISIT = ROOT / "tests" / "fixtures" / "chat_visit.yaml"

SLACK = 1.0
"""Seconds a queued write may still be uncommitted at the kill. The contract allows one
commit window (50 ms); the rest is margin for a loaded 2-core CI machine: a commit that
waits for the CPU or for SQLite's lock, the scheduling of this test's own event loop
(which stamps the lines), and the session's ``created_at`` being taken just before its
INSERT commits. A recorder that is still starting up loses seconds, so this still sees it."""
KILLS = 6
"""SIGKILLs per backend (each costs a start-up of the real command, ~3-5 s)."""
EARLY = 3.0
"""Half of the kills land within this many seconds after the greeting is printed: the
first seconds of the conversation, where a recorder that is still starting up (a writer
child booting) loses turns. Counted from the greeting, not from spawn: the command takes
~2.5-3.5 s to import and greet, and a kill before that has nothing it could lose."""
IDLE_TAIL = 2.0
"""The other half land anywhere from spawn to this long after the clean run's last reply
(the user reading it: the process idles, waiting for input)."""
STARTUP_TIMEOUT = 60.0
"""Seconds the command may take to print its greeting."""
EXIT_TIMEOUT = 15.0
"""Seconds a killed process (and what it left running) may take to be gone."""
CLEAN_TIMEOUT = 120.0
"""Seconds the clean run may take, start-up and shutdown included."""
VERIFY_TIMEOUT = 60.0
"""Seconds reading one run's results back from the database may take."""
RESUME_MAX_STEPS = 500
"""``resume_session`` loads at most this many of the newest memory steps (its default)."""
PHASE_TOOLS = frozenset({"capture_design_challenge", "complete_phase", "record_evaluation"})
"""Tools that complete a phase: once their line is printed, the phase output is queued."""
TOOL_LINE = re.compile(r"^\s+⚙ (?P<name>\w+)\(.*\) → (?P<status>ok|error)$")


@dataclass(frozen=True)
class Visit:
    """The scripted conversation: the greeting, then (user line, model replies) per turn."""

    greeting: list[Reply]
    turns: list[tuple[str, list[Reply]]]

    @property
    def script(self) -> list[Reply]:
        """Every reply the fake server plays, in order."""
        return self.greeting + [reply for _, replies in self.turns for reply in replies]

    @property
    def said(self) -> list[tuple[str, str]]:
        """The whole conversation as ``(role, text)``, as it is printed and typed."""
        said = [("assistant", self.greeting[-1].text)]
        for line, replies in self.turns:
            said += [("user", line), ("assistant", replies[-1].text)]
        return said


def load_visit(path: Path) -> Visit:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    visit = Visit(
        greeting=parse_script(document["greeting"]),
        turns=[(turn["user"], parse_script(turn["model"])) for turn in document["turns"]],
    )
    for replies in [visit.greeting, *(replies for _, replies in visit.turns)]:
        # One `coach>` line per turn: the pacing (answer each reply) depends on it.
        assert [bool(r.text) for r in replies] == [False] * (len(replies) - 1) + [True], replies
        assert not replies[-1].tool_calls, replies
    return visit


@dataclass(frozen=True)
class Said:
    """A line of the conversation as the test saw it: read (assistant) or typed (user)."""

    role: Literal["user", "assistant"]
    text: str
    at: float
    """``time.time()`` when the line was read from stdout, or written to stdin."""


@dataclass(frozen=True)
class ToolLine:
    """A ``⚙ tool(...) → ok`` line: the tool has run, its writes are queued."""

    name: str
    ok: bool
    at: float


@dataclass(frozen=True)
class Kill:
    """When to SIGKILL: ``offset`` seconds after the process is spawned or greets."""

    anchor: Literal["spawn", "greeting"]
    offset: float

    def __str__(self) -> str:
        return f"SIGKILL {self.offset:.3f} s after {self.anchor}"


@dataclass
class ChatRun:
    """One ``python -m coach chat`` process, typed at one line per reply."""

    proc: asyncio.subprocess.Process
    stderr: Path
    lines: deque[str]
    close_at_end: bool
    spawned: float = field(default_factory=time.time)
    transcript: list[Said] = field(default_factory=list)
    tools: list[ToolLine] = field(default_factory=list)
    greeted: asyncio.Event = field(default_factory=asyncio.Event)
    killed_at: float | None = None

    @property
    def replies(self) -> list[Said]:
        return [s for s in self.transcript if s.role == "assistant"]

    async def drive(self) -> None:
        """Read stdout to its end; answer every reply with the next user line."""
        assert self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            now = time.time()
            if not raw.endswith(b"\n"):
                return  # cut short by the kill: that line was never printed whole
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith("coach> "):
                self.transcript.append(Said("assistant", line.removeprefix("coach> "), now))
                self.greeted.set()
                await self._answer()
            elif match := TOOL_LINE.match(line):
                self.tools.append(ToolLine(match["name"], match["status"] == "ok", now))

    async def _answer(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        if self.killed_at is not None:
            return
        try:
            if self.lines:
                line = self.lines.popleft()
                self.transcript.append(Said("user", line, time.time()))
                stdin.write(f"{line}\n".encode())
                await stdin.drain()
            elif self.close_at_end:
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            if self.killed_at is None:
                raise

    def stderr_tail(self) -> str:
        return _tail(self.stderr)


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


async def spawn_chat_run(
    visit: Visit, database_url: str, identity: str, home: Path, *, close_at_end: bool
) -> tuple[ChatRun, FakeOpenAIServer]:
    """Start a fake server playing ``visit`` and ``python -m coach chat`` against it."""
    proc, server, stderr = await spawn_chat(
        identity, visit.script, database_url=database_url, home=home
    )
    lines = deque(line for line, _ in visit.turns)
    return ChatRun(proc, stderr, lines, close_at_end), server


async def reap(run: ChatRun, driver: asyncio.Task[None], server: FakeOpenAIServer) -> None:
    """However the run ended: no process, task or server is left behind."""
    try:
        if run.proc.returncode is None:
            run.proc.kill()
            await asyncio.wait_for(run.proc.wait(), EXIT_TIMEOUT)
        kill_group(run.proc.pid)
    finally:
        if not driver.done():
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
        elif not driver.cancelled():
            driver.exception()  # retrieved: a failure is reported by whoever saw it first
        await server.stop()


async def clean_run(visit: Visit, database_url: str, identity: str, home: Path) -> ChatRun:
    """The whole visit, then end of input: the process must exit 0 by itself."""
    run, server = await spawn_chat_run(visit, database_url, identity, home, close_at_end=True)
    driver = asyncio.create_task(run.drive())
    try:
        async with asyncio.timeout(CLEAN_TIMEOUT):
            await driver
            code = await run.proc.wait()
        assert code == 0, f"the clean run exited with {code}:\n{run.stderr_tail()}"
        assert server.script.remaining == 0, f"{server.script}:\n{run.stderr_tail()}"
        assert [(s.role, s.text) for s in run.transcript] == visit.said, run.stderr_tail()
        assert run.tools and all(t.ok for t in run.tools), run.tools
    finally:
        await reap(run, driver, server)
    return run


async def killed_run(
    visit: Visit, database_url: str, identity: str, home: Path, kill: Kill
) -> ChatRun:
    """The visit, killed with SIGKILL at ``kill``; returns once every process is gone."""
    run, server = await spawn_chat_run(visit, database_url, identity, home, close_at_end=False)
    driver = asyncio.create_task(run.drive())
    try:
        base = run.spawned
        if kill.anchor == "greeting":
            greeted = asyncio.create_task(run.greeted.wait())
            try:
                await asyncio.wait(
                    {greeted, driver}, timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                greeted.cancel()
            assert run.replies, f"no greeting within {STARTUP_TIMEOUT} s:\n{run.stderr_tail()}"
            base = run.replies[0].at
        # The random delay is the thing under test, not a wait for a condition. (With stdin
        # left open the chat idles after its last reply; it only ends here if it crashed.)
        await asyncio.wait({driver}, timeout=max(0.0, base + kill.offset - time.time()))
        assert not driver.done(), f"chat ended before the kill:\n{run.stderr_tail()}"
        run.killed_at = time.time()
        os.kill(run.proc.pid, signal.SIGKILL)
        code = await asyncio.wait_for(run.proc.wait(), EXIT_TIMEOUT)
        assert code == -signal.SIGKILL, code
        # Whatever it started (a writer child, orphaned by the kill, may still commit what
        # it was handed) must be gone before the database is read.
        await wait_for_group(run.proc.pid)
        await asyncio.wait_for(driver, EXIT_TIMEOUT)  # stdout read to its end
    finally:
        await reap(run, driver, server)
    return run


def _first_difference(stored: list[tuple[str, str]], said: list[tuple[str, str]]) -> str:
    for index, (got, expected) in enumerate(zip(stored, said, strict=False)):
        if got != expected:
            return f"#{index}: stored {got!r}, said {expected!r}"
    return f"stored {len(stored)} messages, only {len(said)} were said"


async def verify(
    repo: Repository, run: ChatRun, identity: str, phase_ids: tuple[str, ...], label: str
) -> tuple[list[str], str]:
    """Check what the killed (or cleanly ended) run left stored: (problems, summary)."""
    killed_at = run.killed_at if run.killed_at is not None else math.inf
    problems: list[str] = []

    def expect(condition: bool, message: str) -> None:
        if not condition:
            problems.append(f"{label}: {message}")

    user = await repo.find_user(identity)
    sessions = await repo.get_user_sessions(user.id) if user is not None else []
    captured = [t for t in run.tools if t.name == "capture_design_challenge" and t.ok]
    if captured and captured[0].at < killed_at - SLACK:
        expect(
            len(sessions) == 1,
            f"capture_design_challenge ran {killed_at - captured[0].at:.2f} s before the kill, "
            f"but {len(sessions)} sessions are listed for the user",
        )
    expect(len(sessions) <= 1, f"one chat, yet {len(sessions)} sessions: {sessions}")

    # 3: every listed session resumes, or refuses with a documented reason.
    resumed: dict[str, int | str] = {}
    for listed in sessions:
        assert user is not None
        try:
            result = await repo.resume_session(listed.id, user_id=user.id)
        except (NothingToResume, SessionCompleted, SessionFailed) as exc:
            resumed[listed.id] = type(exc).__name__
        except Exception as exc:  # anything else is a broken session
            resumed[listed.id] = repr(exc)
            problems.append(
                f"{label}: listed session {listed.id} neither resumes nor raises a documented "
                f"ResumeError: {exc!r}"
            )
        else:
            resumed[listed.id] = len(result.memory)  # the memory steps it loaded
    failed = [t.name for t in run.tools if not t.ok]
    expect(not failed, f"tools failed during the conversation: {failed}")
    if not sessions:
        return problems, f"{len(run.replies)} replies printed, no session stored"

    session = sessions[0]
    sid = session.id
    created = session.created_at.timestamp()

    def owed(at: float) -> bool:
        return max(at, created) < killed_at - SLACK

    said: list[tuple[str, str]] = [(s.role, s.text) for s in run.transcript]
    owed_replies = [i for i, s in enumerate(run.transcript) if s.role == "assistant" and owed(s.at)]
    needed = owed_replies[-1] + 1 if owed_replies else 0

    # 1 + 2: the conversation is a prefix of what was said, holding every owed reply.
    conversation = [(m.role, m.content) for m in await repo.get_session_conversation(sid)]
    expect(
        conversation == said[: len(conversation)],
        "the stored conversation is not a prefix of what was said: "
        + _first_difference(conversation, said),
    )
    if len(conversation) < needed:
        lost = [run.transcript[i] for i in owed_replies if i >= len(conversation)]
        problems.append(
            f"{label}: {len(lost)} of {len(owed_replies)} owed replies are not stored "
            f"(stored {len(conversation)} of the {needed} messages said by then). The oldest "
            f"lost, {lost[0].text!r}, was printed {killed_at - lost[0].at:.2f} s before the "
            f"kill; the session was created {killed_at - created:.2f} s before it. The "
            f"contract allows losing only the last commit window (+{SLACK} s slack)."
        )

    # 2: memory steps are whole, numbered 0..n-1, all load, and their messages are a prefix.
    seqs = await stored_seqs(repo, sid)
    expect(seqs == list(range(len(seqs))), f"memory step seqs are not 0..n-1: {seqs}")
    steps = await repo.load_agent_state(sid)
    expect(
        len(steps) == len(seqs),
        f"load_agent_state returned {len(steps)} of {len(seqs)} stored memory steps",
    )
    remembered = [
        (str(step.role), step.text_content or "")
        for step in steps
        if isinstance(step, llm.ChatMessage)
        and step.role in ("user", "assistant")
        and step.text_content
    ]
    expect(
        remembered == said[: len(remembered)],
        "the messages among the memory steps are not a prefix of what was said: "
        + _first_difference(remembered, said),
    )
    expect(
        len(remembered) >= needed,
        f"the memory steps hold {len(remembered)} of the {needed} messages said before the "
        "last owed reply",
    )

    # 1 + 2: completed phases are a prefix of the manifest, holding every owed one.
    outputs = await repo.get_phase_outputs(sid)
    completed = {o.phase_id for o in outputs if o.status == "completed"}
    done = [p for p in phase_ids if p in completed]
    expect(
        done == list(phase_ids[: len(done)]) and completed == set(done),
        f"completed phases are not a prefix of the manifest: {sorted(completed)}",
    )
    owed_phases = [t for t in run.tools if t.name in PHASE_TOOLS and t.ok and owed(t.at)]
    expect(
        len(done) >= len(owed_phases),
        f"{len(owed_phases)} phases were completed at least {SLACK} s before the kill "
        f"(the last by {owed_phases[-1].name if owed_phases else '-'}), "
        f"but only {done} are stored as completed",
    )
    outcome = resumed[sid]
    if owed_phases:
        expect(
            isinstance(outcome, int),
            f"the listed session cannot be resumed ({outcome}) although "
            f"{owed_phases[0].name} finished {killed_at - owed_phases[0].at:.2f} s before the kill",
        )
    if isinstance(outcome, int):
        expect(
            outcome == min(len(seqs), RESUME_MAX_STEPS),
            f"resume_session loaded {outcome} memory steps of {len(seqs)} stored",
        )

    # 2: the zoned state's deltas are numbered 1..step.
    state = await repo.get_state(sid)
    deltas = await repo.get_deltas(sid)
    expect(
        [d.step for d in deltas] == list(range(1, state.step + 1)),
        f"deltas {[d.step for d in deltas]} do not number 1..{state.step}",
    )

    summary = (
        f"{len(run.replies)} replies printed, {len(owed_replies)} owed; stored "
        f"{len(conversation)} messages, {len(seqs)} steps, phases {done}, state step "
        f"{state.step}; resume: "
        + (f"ok, {outcome} memory steps" if isinstance(outcome, int) else outcome)
    )
    return problems, summary


def spread(rng: random.Random, count: int, low: float, high: float) -> list[float]:
    """``count`` moments uniform over ``[low, high]``, one in each of ``count`` equal slices
    (stratified: still uniform overall, but no stretch of the range goes untested by chance)."""
    width = (high - low) / count
    return [rng.uniform(low + i * width, low + (i + 1) * width) for i in range(count)]


def plan_kills(rng: random.Random, visit_length: float) -> list[Kill]:
    """Half early in the conversation, half anywhere from spawn to after the last reply."""
    early = KILLS // 2
    kills = [Kill("greeting", t) for t in spread(rng, early, 0.0, EARLY)] + [
        Kill("spawn", t) for t in spread(rng, KILLS - early, 0.0, visit_length + IDLE_TAIL)
    ]
    rng.shuffle(kills)
    return kills


@pytest.mark.slow
async def test_sigkill_of_chat_loses_at_most_the_commit_window(
    database_url: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("COACH_TEST_SIGKILL_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    replay = f"seed {seed} (replay: COACH_TEST_SIGKILL_SEED={seed})"
    print(f"\n{replay}")
    visit = load_visit(VISIT)
    phase_ids = load_prompts().manifest.ids
    backend = database_url.split(":", 1)[0]

    repo = await open_repository(
        database_url, **keys_of(database_url), secret=MEMORY_SECRET, create_schema=False
    )
    try:
        identity = f"clean-{uuid.uuid4().hex[:8]}"
        clean = await clean_run(visit, database_url, identity, tmp_path / "clean")
        async with asyncio.timeout(VERIFY_TIMEOUT):
            problems, summary = await verify(repo, clean, identity, phase_ids, "clean run")
        # Nothing was killed: every line is owed, so all of the visit must be stored.
        assert not problems, "\n".join(problems)
        visit_length = clean.replies[-1].at - clean.spawned
        print(
            f"[{backend}] clean run: greeting {clean.replies[0].at - clean.spawned:.2f} s, "
            f"last reply {visit_length:.2f} s after spawn; {summary}"
        )

        failures: list[str] = []
        for number, kill in enumerate(plan_kills(rng, visit_length), 1):
            identity = f"kill{number}-{uuid.uuid4().hex[:8]}"
            run = await killed_run(visit, database_url, identity, tmp_path / identity, kill)
            assert run.killed_at is not None
            label = f"kill #{number} ({kill}"
            if kill.anchor != "spawn":
                label += f", {run.killed_at - run.spawned:.2f} s after spawn"
            label += ")"
            async with asyncio.timeout(VERIFY_TIMEOUT):
                problems, summary = await verify(repo, run, identity, phase_ids, label)
            print(f"[{backend}] {label}: {summary}" + (" FAILED" if problems else ""))
            failures += problems
    finally:
        await repo.aclose()
    if failures:
        pytest.fail(f"{replay}, {backend}:\n" + "\n".join(failures), pytrace=False)
