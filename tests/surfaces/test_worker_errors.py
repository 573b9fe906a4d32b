"""A room whose model fails for good: the job ends with everything stored, and the
user's reconnect continues the session. A real AgentSession talks to the real openai
plugin, which talks to the local fake server until its script runs out (HTTP 500)."""

import asyncio
import gc
import sys
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import APIConnectOptions
from livekit.agents.voice.agent_session import SessionConnectOptions
from livekit.agents.voice.run_result import RunResult

from coach.agents import DesignCoach
from coach.conversation.runtime import Runtime
from coach.models import build_llm
from coach.settings import Settings
from coach.surfaces.worker import OUTAGE_SENTENCES, end_job_on_outage, user_identity
from coach.testing import DEMO_SCRIPT, FakeOpenAIServer, load_script

SECRET = "worker-errors-secret-0123456789"
ROOM = "design"
# The demo's first replies: a greeting, the name, then the challenge captured (which
# creates the stored session and completes its first phase). Nothing after that.
FIRST_REPLIES = 4


class FakeJob:
    """What the worker's JobContext is asked to do, and what the user was told, in order."""

    def __init__(self) -> None:
        self.rooms_deleted = 0
        self.shutdown_reasons: list[str] = []
        self.ended = asyncio.Event()
        self.events: list[str] = []

    async def tell(self, text: str) -> None:
        self.events.append(f"told: {text}")

    def delete_room(self, room_name: str | None = None) -> "asyncio.Future[Any]":
        self.rooms_deleted += 1
        self.events.append("room deleted")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def shutdown(self, reason: str = "user requested") -> None:
        self.shutdown_reasons.append(reason)
        self.ended.set()


async def test_an_unrecoverable_model_error_ends_the_job_and_a_reconnect_continues(
    tmp_path: Path,
) -> None:
    script = load_script(DEMO_SCRIPT)
    async with FakeOpenAIServer(list(script)[:FIRST_REPLIES]) as server:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'room.db'}",
            secret_key=SECRET,
            llm_base_url=server.base_url,
            llm_model="fake",
        )
        runtime = await Runtime.open(settings)
        job = FakeJob()
        userdata = runtime.new_userdata(identity="ada")
        model = build_llm(settings)
        session = runtime.new_session(
            userdata,
            llm=model,
            conn_options=SessionConnectOptions(
                llm_conn_options=APIConnectOptions(max_retry=1, retry_interval=0.05),
                max_unrecoverable_errors=sys.maxsize,  # as in the worker: the policy ends it
            ),
        )
        end_job_on_outage(session, job, tell=job.tell, limit=0)
        agent = await runtime.room_agent(userdata, ROOM)
        assert isinstance(agent, DesignCoach)  # a new user: the coach
        await session.start(agent=agent)
        await session.run(user_input="I'm Ada")
        failing_turn: RunResult[None] = session.run(user_input="Onboarding for my budgeting app")
        await asyncio.wait_for(job.ended.wait(), 60)
        assert failing_turn.done()  # the turn ended before the job did: nothing hangs
        await failing_turn
        await session.aclose()
        await model.aclose()
        # The plugin retried once: the failing request was sent twice.
        assert len(server.requests) == FIRST_REPLIES + 2
        assert len(server.errors) == 2
    # What the worker's shutdown callback does once the job ends: flush and close.
    losses = await runtime.aclose()

    assert job.rooms_deleted == 1
    assert len(job.shutdown_reasons) == 1 and job.shutdown_reasons[0].startswith("model failure")
    # The user was told why, in the transcript, before the room closed.
    assert job.events == [f"told: {OUTAGE_SENTENCES['llm_error']}", "room deleted"]
    assert losses.count == 0, losses
    session_id = userdata.session_id
    assert session_id is not None

    # The user reconnects: a new job on any worker continues the stored session.
    again = await Runtime.open(settings)
    try:
        stored = await again.store.get_session(session_id)
        assert stored is not None and stored.status == "in_progress"
        said = [m.content for m in await again.store.get_session_conversation(session_id)]
        assert "I'm Ada" in said and "Onboarding for my budgeting app" in said
        back = again.new_userdata(identity="ada")
        resumed = await again.room_agent(back, ROOM)
        assert not isinstance(resumed, DesignCoach)
        assert back.session_id == session_id
    finally:
        await again.aclose()
    # The failed session leaves sockets and futures of the plugin's HTTP clients to the
    # garbage collector. Collect them now, on this loop: run later, their finalizers
    # land inside an import, where CPython 3.11.7 fails the AST check (a SystemError).
    gc.collect()


@pytest.mark.parametrize(
    ("identity", "fake_job", "expected"),
    [
        ("ada", False, "ada"),
        ("Ada Lovelace 🧮", False, "Ada Lovelace 🧮"),
        ("ada", True, None),  # console's stand-in participant
        ("", False, None),
        ("ada\nbob", False, None),
        ("x" * 256, False, None),
        ("\u202eada", False, None),
        ("a\u200bda", False, None),
        ("\uff21da", False, "Ada"),
    ],
)
def test_a_participant_identity_no_user_can_have_means_asking_for_a_name(
    identity: str, fake_job: bool, expected: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    assert user_identity(identity, fake_job=fake_job) == expected
    refused = expected is None and not fake_job
    assert ("participant identity refused" in caplog.text) is refused
