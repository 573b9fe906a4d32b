"""The fleet drill: three workers on one PostgreSQL through a rolling deploy and two failures.

Three worker processes — ``python -m coach chat --user NAME``, each a separate OS process
with its own runtime and its own scripted model (:mod:`.chat_worker`) — serve Ada, Ben
and Cy on one fresh PostgreSQL database. Then, in order:

1. **Rolling deploy.** While all three keep conversing, turn after turn, the next release
   (this code plus an additive migration, :mod:`.release`) runs the real
   ``python -m coach db upgrade``. None of them is disturbed: every turn is answered as
   scripted, and once the upgrade is done each one's whole conversation gets stored.
2. **SIGTERM.** Ada's worker is sent SIGTERM as her reply is printed: it drains and exits
   0, and everything said to it is stored.
3. **SIGKILL.** Ben's worker is killed with SIGKILL as his reply is printed: what the
   database had already stored before that turn (observed by the test, the only
   acknowledgement a chat gives) is there; what is stored beyond it is a prefix of that
   last turn; no half-written step (memory steps ``0..n-1``, all of them load; deltas
   ``1..step``).
4. **Resume elsewhere.** Ada comes back on a new process of the next release, Ben on a
   new process of the deployed one — which starts on the database the next release
   migrated, because that migration was additive — and each says "continue": the model
   is shown their current phase and the newest of their earlier conversation (the resume
   window) up to its last message, their board goes on from where it was, and
   everything is stored once — the earlier messages followed by the new ones, memory
   steps and deltas numbered without a gap.
5. **Undisturbed.** Meanwhile Cy finishes her whole session on the first worker.

The workers are the ``chat`` surface rather than the LiveKit worker: the same ``Runtime``,
agents and recorder, but a real OS process whose SIGTERM drain is coach's own — a LiveKit
worker's drain is run by LiveKit's job process, which needs a LiveKit server (none can be
installed here; ``tests/surfaces/test_worker_entrypoint.py`` runs the entrypoint itself).

With ``-s`` the drill prints its figures (``[fleet] ...``); ``docs/fleet.md`` records one
run's. Run it with::

    .venv/bin/python -m pytest tests/fleet -s
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import llm
from sqlalchemy import text

from coach.persistence import Repository, current_revision, open_repository
from coach.settings import Settings
from coach.testing import Reply, call, say
from tests.recording.chat_process import chat_env, workplace
from tests.recording.test_sigkill import stored_seqs
from tests.support import MEMORY_SECRET, keys_of, raw_sql

from .chat_worker import EXIT_TIMEOUT, ChatWorker, Line
from .release import COLUMN, INDEX, REVISION, next_release

Turn = tuple[str, list[Reply]]

USERS = ("ada", "ben", "cy")
ACK_TIMEOUT = 20.0
"""Seconds a worker's conversation may take to be stored once it was said."""
POLL = 0.02
COMMIT_WINDOW = Settings.model_fields["recorder_commit_interval"].default


def name(user: str) -> str:
    return user.capitalize()


def challenge(user: str) -> str:
    return f"Redesign the onboarding of {name(user)}'s budgeting app so new users finish it."


def greeting(user: str) -> list[Reply]:
    return [say(f"Hi {name(user)}! What would you like to design?")]


def insight(user: str, text: str) -> Turn:
    """A turn that puts one insight on the board (a data delta, a render)."""
    return (
        f"{name(user)}: {text}",
        [call("add_insight", text=f"{name(user)}: {text}."), say(f"Noted, {text}.")],
    )


def opening(user: str) -> list[Turn]:
    """Challenge captured, the strategist takes over, Empathize done: now in Define."""
    return [
        (
            "The onboarding of my budgeting app",
            [
                call("capture_design_challenge", challenge=challenge(user)),
                call("transfer_to_strategist"),
                say(f"Strategist here, {name(user)}. Who gives up, and where?"),
            ],
        ),
        insight(user, "new users quit at bank linking"),
        (
            "That is all for empathize",
            [
                call("complete_phase", summary=f"{name(user)}'s users quit at bank linking."),
                say(f"Empathize is done, {name(user)}. How might we phrase the problem?"),
            ],
        ),
    ]


def finale(user: str) -> list[Turn]:
    """Cy's rest: the strategist's phases, then the evaluator, then goodbye."""
    turns: list[Turn] = []
    for phase in ("define", "ideate", "strategy"):
        turns.append(insight(user, f"a last thought on {phase}"))
        turns.append(
            (
                f"done with {phase}",
                [call("complete_phase", summary=f"{phase} decided"), say(f"{phase} recorded.")],
            )
        )
    turns += [
        ("evaluate please", [call("transfer_to_evaluator"), say("Evaluator here.")]),
        (
            "score it",
            [
                call(
                    "record_evaluation",
                    desirability=4,
                    feasibility=4,
                    viability=3,
                    summary="Good.",
                ),
                say("Scores are in."),
            ],
        ),
        ("bye", [call("finish_session"), say(f"Goodbye, {name(user)}!")]),
    ]
    return turns


def return_visit(user: str) -> tuple[list[Reply], list[Turn]]:
    """A returning user on another process: the coach offers the stored session (its id
    read from the request, as a model reads it), "continue" loads it, and the strategist's
    first words name the phase it was given."""
    offer = Reply(
        text=f"Welcome back, {name(user)}! Shall we resume your onboarding redesign?",
        from_request=(
            ("session_id", rf'session_id ([0-9a-f]{{32}}): "{re.escape(challenge(user))}"'),
        ),
    )
    welcome = Reply(
        text="Welcome back. We are in ${phase}.",
        from_request=(("phase", r"Current phase: (\w+)\."),),
    )
    turns: list[Turn] = [
        (
            "Let's continue my onboarding redesign",
            [call("select_session_to_load", session_id="${session_id}"), say("Say continue.")],
        ),
        ("continue", [call("load_selected_session"), welcome]),
        insight(user, "after the interruption, trust is still the issue"),
    ]
    return [offer], turns


def insights_said(worker: ChatWorker) -> list[str]:
    """The insights the model was told to add, in the order the turns were typed."""
    mine = f"{name(worker.user)}: "
    return [f"{line.text}." for line in worker.lines if line.role == "user" and mine in line.text]


@dataclass
class Stored:
    """One user's session as the database holds it."""

    session_id: str
    conversation: list[tuple[str, str]]
    remembered: list[tuple[str, str]]
    """User and assistant messages among the memory steps, in order."""
    steps: int
    step: int
    insights: list[str]
    phase: str | None
    status: str


class Database:
    """The test's own view of the shared database (this checkout's repository)."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    async def session_id(self, user: str) -> str | None:
        found = await self.repo.find_user(user)
        sessions = await self.repo.get_user_sessions(found.id) if found is not None else []
        assert len(sessions) <= 1, f"{user} has {len(sessions)} sessions"
        return sessions[0].id if sessions else None

    async def conversation(self, session_id: str) -> list[tuple[str, str]]:
        messages = await self.repo.get_session_conversation(session_id)
        return [(m.role, m.content) for m in messages]

    async def read(self, user: str) -> Stored:
        """The user's one session; its memory steps and deltas are whole or this fails."""
        session_id = await self.session_id(user)
        assert session_id is not None, f"{user} has no stored session"
        seqs = await stored_seqs(self.repo, session_id)
        assert seqs == list(range(len(seqs))), f"{user}: memory steps {seqs}"
        memory = await self.repo.load_agent_state(session_id)
        assert len(memory) == len(seqs) > 0, f"{user}: {len(memory)} of {len(seqs)} steps load"
        state = await self.repo.get_state(session_id)
        deltas = await self.repo.get_deltas(session_id)
        assert [d.step for d in deltas] == list(range(1, state.step + 1)), f"{user}: deltas"
        session = await self.repo.get_session(session_id)
        assert session is not None
        return Stored(
            session_id=session_id,
            conversation=await self.conversation(session_id),
            remembered=remembered(memory),
            steps=len(seqs),
            step=state.step,
            insights=[i["text"] for i in state.data.get("insights", [])],
            phase=session.current_phase_id,
            status=session.status,
        )

    async def resume_window(self, user: str) -> list[tuple[str, str]]:
        """The earlier messages a resume shows the model: those among the memory steps the
        repository loads to resume the session (its newest window), from a user message on."""
        found = await self.repo.find_user(user)
        session_id = await self.session_id(user)
        assert found is not None and session_id is not None
        result = await self.repo.resume_session(session_id, user_id=found.id)
        messages = remembered(result.memory)
        first_user = next(n for n, (role, _) in enumerate(messages) if role == "user")
        return messages[first_user:]

    async def until_stored(self, worker: ChatWorker) -> float:
        """Wait until everything ``worker`` said so far is stored; returns the seconds.

        A poll, because nothing else can tell: a chat prints nothing when its recorder
        commits, and the commit happens in another process — the database is the only
        witness. Every 20 ms, for at most ``ACK_TIMEOUT``.
        """
        said, started = worker.said, time.monotonic()
        async with asyncio.timeout(ACK_TIMEOUT):
            while True:
                session_id = await self.session_id(worker.user)
                if session_id is not None and await self.conversation(session_id) == said:
                    return time.monotonic() - started
                await asyncio.sleep(POLL)


def remembered(memory: list[Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of the user and assistant messages among memory steps."""
    return [
        (str(item.role), item.text_content or "")
        for item in memory
        if isinstance(item, llm.ChatMessage)
        and item.role in ("user", "assistant")
        and item.text_content
    ]


def is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    remaining = iter(whole)
    return all(item in remaining for item in part)


def request_messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of the user and assistant messages of a chat-completions request."""
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if message.get("role") in ("user", "assistant") and content:
            found.append((message["role"], content))
    return found


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content"))
        for m in body.get("messages", [])
        if m.get("role") in ("system", "developer")
    )


def exchanges(worker: ChatWorker) -> list[tuple[Line, Line]]:
    """Each typed line with the reply it got."""
    return [
        (typed, reply)
        for typed, reply in zip(worker.lines, worker.lines[1:], strict=False)
        if typed.role == "user" and reply.role == "assistant"
    ]


def figure(text: str) -> None:
    print(f"[fleet] {text}", flush=True)


@dataclass
class Upgrade:
    """One ``python -m coach db upgrade`` run, as seen from outside (``time.time()``)."""

    started: float
    exited: float
    migrating: float
    """When it logged "Running upgrade ... -> REVISION": its transaction is under way."""
    done: float
    """When its last line, "database is up to date" (printed after the commit), arrived."""
    output: list[str]


MIGRATING = re.compile(
    rf"^(\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}) .*Running upgrade \S* -> {REVISION}\b"
)


async def db_upgrade(release: Path, database_url: str, home: Path) -> Upgrade:
    """Run ``python -m coach db upgrade`` of ``release``, reading its output as it comes."""
    env = chat_env(workplace(home), database_url, "http://127.0.0.1:9/v1", release)
    started = time.time()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coach",
        "db",
        "upgrade",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=home,
    )
    assert proc.stdout is not None
    output: list[tuple[float, str]] = []
    try:
        async with asyncio.timeout(60):
            while raw := await proc.stdout.readline():
                output.append((time.time(), raw.decode(errors="replace").rstrip("\n")))
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    exited = time.time()
    lines = [line for _, line in output]
    assert code == 0, "\n".join(lines)
    assert lines[-1] == "database is up to date", lines
    logged = [found for line in lines if (found := MIGRATING.match(line))]
    assert len(logged) == 1, lines  # the next release's migration, and only it, ran
    migrating = datetime.strptime(logged[0].group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return Upgrade(started, exited, migrating, output[-1][0], lines)


async def keep_talking(worker: ChatWorker, upgraded: asyncio.Event) -> list[Line]:
    """Turn after turn until one has started after ``upgraded``; returns the replies."""
    replies, number = [], 0
    while True:
        after = upgraded.is_set()
        number += 1
        text, script = insight(worker.user, f"define note {number}")
        reply = await worker.turn(text, script)
        assert reply.text == script[-1].text, f"{worker.user}: {reply.text!r}{worker.why()}"
        replies.append(reply)
        if after:
            return replies


@pytest.mark.slow
@pytest.mark.postgres
async def test_rolling_deploy_sigterm_sigkill_and_resume_elsewhere(
    postgres_url: str, tmp_path: Path
) -> None:
    drill_started = time.time()
    release = next_release(tmp_path)
    repo = await open_repository(postgres_url, **keys_of(postgres_url), secret=MEMORY_SECRET)
    db = Database(repo)
    workers: dict[str, ChatWorker] = {}
    tasks: list[asyncio.Task[Any]] = []
    try:
        # --- three workers of the deployed release, mid-conversation ---------------------
        started = await asyncio.gather(
            *(
                ChatWorker.start(
                    user, greeting(user), database_url=postgres_url, home=tmp_path / user
                )
                for user in USERS
            )
        )
        workers = dict(zip(USERS, started, strict=True))
        ada, ben, cy = (workers[user] for user in USERS)

        async def open_conversation(worker: ChatWorker) -> float:
            first = await worker.reply()
            assert first.text == greeting(worker.user)[0].text, worker.why()
            for text, script in opening(worker.user):
                reply = await worker.turn(text, script)
                assert reply.text == script[-1].text, f"{reply.text!r}{worker.why()}"
            return first.at - worker.spawned

        greeted = await asyncio.gather(*(open_conversation(w) for w in started))
        figure(
            "start-up (spawn to greeting, three at once): "
            + ", ".join(f"{u} {t:.1f} s" for u, t in zip(USERS, greeted, strict=True))
        )

        # --- 1. the next release migrates the database while all three keep talking -----
        upgraded = asyncio.Event()
        talking = [asyncio.create_task(keep_talking(w, upgraded)) for w in started]
        tasks += talking
        try:
            upgrade = await db_upgrade(release, postgres_url, tmp_path / "deploy")
        finally:
            upgraded.set()
        during = await asyncio.gather(*talking)
        assert await current_revision(postgres_url) == REVISION
        async with raw_sql(repo) as conn:
            index = await conn.scalar(
                text("SELECT count(*) FROM pg_indexes WHERE indexname = :name"), {"name": INDEX}
            )
            column = await conn.scalar(
                text(
                    "SELECT count(*) FROM information_schema.columns "
                    "WHERE table_name = 'sessions' AND column_name = :name"
                ),
                {"name": COLUMN},
            )
        assert (index, column) == (1, 1)
        # Every turn was answered as scripted (keep_talking checks each reply); each worker
        # answered turns while the upgrade ran, and one begun after it.
        turns = {w.user: exchanges(w) for w in started}
        meanwhile = {
            user: [(t, r) for t, r in pairs if t.at < upgrade.exited and r.at > upgrade.started]
            for user, pairs in turns.items()
        }
        assert all(meanwhile.values()), meanwhile
        assert all(len(replies) >= 2 for replies in during)
        in_flight = sum(
            1 for pairs in turns.values() for t, r in pairs if t.at <= upgrade.migrating <= r.at
        )
        # ... and all of it is stored, also what was said during and after the migration.
        acked = await asyncio.gather(*(db.until_stored(w) for w in started))
        slowest = max(r.at - t.at for pairs in meanwhile.values() for t, r in pairs)
        usual = max(r.at - t.at for pairs in turns.values() for t, r in pairs[: len(opening("cy"))])
        figure(
            f"db upgrade of the next release ({REVISION}: a column and an index on sessions): "
            f"{upgrade.exited - upgrade.started:.2f} s as a process; its migration started "
            f"{upgrade.migrating - upgrade.started:.2f} s in and was committed within "
            f"{upgrade.done - upgrade.migrating:.3f} s, with {in_flight} of 3 workers mid-turn"
        )
        figure(
            "meanwhile "
            + ", ".join(f"{u} answered {len(pairs)} turns" for u, pairs in meanwhile.items())
            + f"; slowest reply then {slowest:.2f} s (slowest before it {usual:.2f} s); "
            f"every worker's conversation stored within {max(acked):.2f} s after"
        )

        # --- 5. (meanwhile) Cy finishes her session on the same worker -------------------
        async def cy_finishes() -> int:
            for text, script in finale("cy"):
                reply = await cy.turn(text, script)
                assert reply.text == script[-1].text, f"{reply.text!r}{cy.why()}"
            return await cy.finish()

        cy_done = asyncio.create_task(cy_finishes())
        tasks.append(cy_done)

        # --- 2. SIGTERM (Ada) and 3. SIGKILL (Ben), each as a reply is printed ------------
        ben_acked = list(ben.said)
        ben_acked_steps = (await db.read("ben")).steps

        async def ada_is_stopped() -> tuple[int, float, float, Line]:
            reply = await ada.turn(*insight("ada", "the last words before SIGTERM"))
            assert reply.text.startswith("Noted"), ada.why()
            return (*await ada.terminate(), reply)

        async def ben_is_killed() -> tuple[float, Line, Line]:
            text, script = insight("ben", "the last words before SIGKILL")
            reply = await ben.turn(text, script)
            killed_at = await ben.kill()
            return killed_at, ben.lines[-2], reply

        (code, termed_at, exited_at, ada_last), (killed_at, typed, printed) = await asyncio.gather(
            ada_is_stopped(), ben_is_killed()
        )
        assert code == 0, f"SIGTERM: exit {code}{ada.why()}"
        figure(
            f"SIGTERM ({(termed_at - ada_last.at) * 1000:.0f} ms after Ada's reply was printed): "
            f"her worker drained and exited 0 in {exited_at - termed_at:.2f} s, "
            "everything said to it stored"
        )

        ada_stored = await db.read("ada")
        assert ada_stored.conversation == ada.said  # everything said to it
        assert ada_stored.remembered == ada.said
        assert ada_stored.insights == insights_said(ada)

        ben_stored = await db.read("ben")
        assert ben_stored.conversation[: len(ben_acked)] == ben_acked  # acknowledged
        assert ben_stored.conversation == ben.said[: len(ben_stored.conversation)]  # prefix
        assert ben_stored.remembered == ben.said[: len(ben_stored.remembered)]
        assert ben_stored.steps >= ben_acked_steps
        assert ben_stored.insights == insights_said(ben)[: len(ben_stored.insights)]
        lost = len(ben.said) - len(ben_stored.conversation)
        figure(
            f"SIGKILL: Ben's worker lost {lost} of its last turn's 2 messages "
            f"(stored {ben_stored.steps - ben_acked_steps} memory steps of that turn); "
            f"the kill came {(killed_at - typed.at) * 1000:.0f} ms after the line was typed "
            f"and {(killed_at - printed.at) * 1000:.0f} ms after the reply was printed; "
            f"commit window {COMMIT_WINDOW * 1000:.0f} ms"
        )

        # --- 4. Ada resumes on the next release, Ben on a new process of the deployed one --
        interrupted = {"ada": ada_stored, "ben": ben_stored}
        windows = {user: await db.resume_window(user) for user in interrupted}

        releases = {"ada": release, "ben": None}  # None: this checkout, the deployed one
        deployed = {"ada": "the next release", "ben": "the deployed release"}

        async def resume(user: str) -> tuple[ChatWorker, float, float]:
            """Returns the worker, seconds from spawn to greeting, and from "continue"
            typed to the strategist's first words (the session loaded)."""
            offer, turns = return_visit(user)
            worker = await ChatWorker.start(
                user,
                offer,
                database_url=postgres_url,
                home=tmp_path / f"{user}-again",
                release=releases[user],
            )
            workers[f"{user}-again"] = worker
            first = await worker.reply()
            assert first.text == offer[0].text, worker.why()
            replies = [await worker.turn(text, script) for text, script in turns]
            said_continue, loaded = exchanges(worker)[1]  # the strategist speaks: loaded
            assert said_continue.text == "continue" and loaded == replies[1]
            assert loaded.text == "Welcome back. We are in Define.", worker.why()
            code = await worker.finish()
            assert code == 0, f"{user} again: exit {code}{worker.why()}"
            return worker, first.at - worker.spawned, loaded.at - said_continue.at

        resumed = await asyncio.gather(resume("ada"), resume("ben"))
        for user, (worker, to_greeting, loading) in zip(("ada", "ben"), resumed, strict=True):
            earlier = interrupted[user]
            assert worker.server.script.values["session_id"] == earlier.session_id
            shown = next(r for r in worker.server.requests if "Current phase:" in system_text(r))
            assert "Current phase: Define." in system_text(shown)
            # The model is shown the resume window: the newest of the earlier conversation,
            # up to its last message, in order — nothing of the seam lost, nothing twice.
            window, messages = windows[user], request_messages(shown)
            assert window and window[-1] == earlier.conversation[-1], user
            assert is_subsequence(window, messages), user
            earlier_shown = [m for m in messages if m in set(earlier.conversation)]
            tail = earlier.conversation[len(earlier.conversation) - len(earlier_shown) :]
            assert earlier_shown == tail, user
            now = await db.read(user)  # memory steps and deltas whole, one session
            assert now.session_id == earlier.session_id
            assert now.conversation == earlier.conversation + worker.said
            assert len(set(now.conversation)) == len(now.conversation)  # nothing twice
            assert now.remembered[: len(earlier.remembered)] == earlier.remembered
            assert now.steps > earlier.steps and now.step > earlier.step
            assert now.insights == earlier.insights + insights_said(worker)
            assert (now.phase, now.status) == ("define", "in_progress")
            figure(
                f"resume: {name(user)} on a new process of {deployed[user]}: greeted "
                f'{to_greeting:.1f} s after spawn; from "continue" to the strategist\'s '
                f"first words (session loaded, handed over) {loading:.2f} s; "
                f"the model was shown the newest {len(earlier_shown)} of "
                f"{len(earlier.conversation)} earlier messages (the resume window), "
                "none stored twice"
            )

        # --- 5. Cy finished undisturbed --------------------------------------------------
        code = await asyncio.wait_for(cy_done, 120)
        assert code == 0, f"cy: exit {code}{cy.why()}"
        cy_stored = await db.read("cy")
        assert cy_stored.conversation == cy.said and cy_stored.remembered == cy.said
        assert cy_stored.insights == insights_said(cy)
        assert cy_stored.status == "completed"
        outputs = await repo.get_phase_outputs(cy_stored.session_id)
        assert {o.status for o in outputs} == {"completed"} and len(outputs) == 6
        figure(
            f"Cy finished undisturbed: {len(cy.said)} messages, all stored, session completed; "
            f"the drill took {time.time() - drill_started:.1f} s"
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # failures are reported above
        for worker in workers.values():
            await asyncio.wait_for(worker.close(), EXIT_TIMEOUT)
        await repo.aclose()
