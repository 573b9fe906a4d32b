"""Saving that has not caught up, seen from the conversation. A load, a branch or a
reconnect first stores what this process still has queued; while the database holds those
writes past the deadline, each says so in its own words, nothing changes, and the same
request works once saving has caught up."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice.run_result import RunResult

from coach.agents import DesignCoach, DesignStrategist
from coach.conversation.recorder import Recorder
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import FLUSH_BEFORE_LOAD, UserData
from coach.store import Store, WriteOp
from coach.testing import ScriptedLLM, call, say

from .helpers import CHALLENGE, new_session_with_phases, start
from .test_rpc import call as rpc_call
from .test_rpc import refused

OWNER = "ada"
DEADLINE = 0.05
"""The flush deadline while writes are held: short, so a test does not wait 5 s."""


class HeldWrites:
    """The runtime's store, whose writes wait while held (a database holding a lock)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._open = asyncio.Event()
        self._open.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        await self._open.wait()
        await self._store.write_batch(ops)


@pytest.fixture
async def held(runtime: Runtime) -> AsyncIterator[tuple[Runtime, HeldWrites]]:
    """A runtime whose recorder writes through :class:`HeldWrites`."""
    store = HeldWrites(runtime.store)
    recorder = Recorder(cast(Store, store))
    recorder.start()
    yield dataclasses.replace(runtime, store=cast(Store, store), recorder=recorder), store
    store.release()
    await recorder.aclose()


def behind(userdata: UserData) -> None:
    userdata.flush_before_load = DEADLINE


def caught_up(store: HeldWrites, userdata: UserData) -> None:
    store.release()
    userdata.flush_before_load = FLUSH_BEFORE_LOAD


async def resumed(runtime: Runtime, session_id: str) -> tuple[AgentSession[UserData], ScriptedLLM]:
    """A visit that has loaded ``session_id`` and said one more thing in it."""
    model = ScriptedLLM([say("Welcome back!")])
    session = await start(runtime, model, identity=OWNER)
    model.extend([call("select_session_to_load", session_id=session_id), say("Say continue.")])
    await session.run(user_input="My onboarding session")
    model.extend([call("load_selected_session"), say("Welcome back.")])
    await session.run(user_input="continue")
    assert session.userdata.session_id == session_id
    return session, model


async def held_back(
    runtime: Runtime, store: HeldWrites, session_id: str
) -> tuple[AgentSession[UserData], ScriptedLLM]:
    """A visit in ``session_id`` whose last turn is queued, not stored: writes are held."""
    session, model = await resumed(runtime, session_id)
    store.hold()
    model.extend([say("Go on.")])
    await session.run(user_input="One more thought")
    return session, model


def tool_error(result: RunResult[None]) -> str:
    output = result.expect.next_event(type="function_call_output").event().item
    assert output.is_error
    return output.output


async def test_a_load_says_saving_is_catching_up_and_works_once_it_has(
    held: tuple[Runtime, HeldWrites],
) -> None:
    runtime, store = held
    other = await new_session_with_phases(runtime, OWNER, phases=1)
    model = ScriptedLLM([say("Welcome back!")])
    session = await start(runtime, model, identity=OWNER)
    userdata = session.userdata
    store.hold()
    model.extend([call("capture_design_challenge", challenge="A packing list"), say("Noted.")])
    await session.run(user_input="Something new: a packing list")  # its turn stays queued
    opened = userdata.session_id
    model.extend([call("select_session_to_load", session_id=other), say("Say continue.")])
    await session.run(user_input="Actually, my onboarding session")

    behind(userdata)
    model.extend([call("load_selected_session"), say("One moment, still saving.")])
    result: RunResult[None] = await session.run(user_input="continue")
    assert tool_error(result) == (
        "Saving is still catching up, so the session cannot be loaded yet. Ask the "
        "user to say continue again in a moment."
    )
    assert isinstance(session.current_agent, DesignCoach)
    assert userdata.session_id == opened and userdata.pending_session_id == other

    caught_up(store, userdata)
    model.extend([call("load_selected_session"), say("Welcome back.")])
    result = await session.run(user_input="continue")
    result.expect.contains_agent_handoff(new_agent_type=DesignStrategist)
    assert userdata.session_id == other
    await session.aclose()


@pytest.mark.parametrize("where", [{"phase_id": "empathize"}, {"before": "observation"}])
async def test_a_branch_says_saving_is_catching_up_and_makes_nothing(
    held: tuple[Runtime, HeldWrites], where: dict[str, str]
) -> None:
    runtime, store = held
    source = await new_session_with_phases(runtime, OWNER, phases=2)
    session, model = await held_back(runtime, store, source)
    userdata = session.userdata
    agent = session.current_agent

    behind(userdata)
    model.extend([call("branch_session", **where), say("One moment, still saving.")])
    result: RunResult[None] = await session.run(user_input="Let's go back and try again")
    assert tool_error(result) == (
        "Saving is still catching up, so the branch cannot be made yet. Ask the "
        "user to try again in a moment."
    )
    assert session.current_agent is agent and userdata.session_id == source
    caught_up(store, userdata)
    user = await runtime.store.find_user(OWNER)
    assert user is not None and await runtime.store.count_user_sessions(user.id) == 1
    await session.aclose()


@pytest.mark.parametrize(
    ("name", "extra"),
    [("coach.resume_session", {}), ("coach.branch_session", {"phase_id": "empathize"})],
)
async def test_the_room_is_answered_503_while_saving_catches_up(
    held: tuple[Runtime, HeldWrites], name: str, extra: dict[str, str]
) -> None:
    runtime, store = held
    target = await new_session_with_phases(runtime, OWNER, phases=1)
    opened = await new_session_with_phases(runtime, OWNER, phases=1)
    session, model = await held_back(runtime, store, opened)
    userdata = session.userdata
    agent = session.current_agent

    behind(userdata)
    error = await refused(userdata, name, {"session_id": target, **extra}, session=session)
    assert isinstance(error, rtc.RpcError)
    assert (error.code, error.message) == (
        503,
        "Saving is still catching up; try again in a moment.",
    )
    assert session.current_agent is agent and userdata.session_id == opened
    caught_up(store, userdata)
    await session.aclose()


async def test_a_reconnect_meets_the_coach_while_saving_catches_up(
    held: tuple[Runtime, HeldWrites],
) -> None:
    runtime, store = held
    userdata = runtime.new_userdata(identity=OWNER)
    model = ScriptedLLM([say("Hi!")])
    session = runtime.new_session(userdata, llm=model)
    await (await session.start(await runtime.room_agent(userdata, "room-1"), capture_run=True))
    model.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist."),
        ]
    )
    await session.run(user_input=CHALLENGE)
    store.hold()
    model.extend([say("Go on.")])
    await session.run(user_input="One more thought")  # queued, not stored
    await session.aclose()

    again = runtime.new_userdata(identity=OWNER)
    behind(again)
    assert isinstance(await runtime.room_agent(again, "room-1"), DesignCoach)
    assert again.session_id is None

    caught_up(store, again)
    back = runtime.new_userdata(identity=OWNER)
    agent = await runtime.room_agent(back, "room-1")
    assert isinstance(agent, DesignStrategist) and agent.resumed
    assert back.session_id == userdata.session_id


@pytest.mark.parametrize("name", ["coach.delete_session", "coach.export_my_data", "forget_me"])
async def test_erasing_and_exporting_answer_503_while_saving_catches_up_and_change_nothing(
    held: tuple[Runtime, HeldWrites], name: str
) -> None:
    runtime, store = held
    target = await new_session_with_phases(runtime, OWNER, phases=1)
    opened = await new_session_with_phases(runtime, OWNER, phases=1)
    session, model = await held_back(runtime, store, opened)
    userdata = session.userdata
    payloads = {
        "coach.delete_session": {"session_id": target},
        "coach.export_my_data": {},
    }
    method = name
    if name == "forget_me":
        method = "coach.forget_me"
        first = await rpc_call(userdata, method, {}, session=session)
        payloads[name] = {"confirm_token": first["confirm_token"]}

    behind(userdata)
    error = await refused(userdata, method, payloads[name], session=session)
    assert (error.code, error.message) == (
        503,
        "Saving is still catching up; try again in a moment.",
    )
    assert userdata.export is None and userdata.session_id == opened
    caught_up(store, userdata)
    user = await runtime.store.find_user(OWNER)
    assert user is not None and await runtime.store.count_user_sessions(user.id) == 2
    answer = await rpc_call(userdata, method, payloads[name], session=session)  # now it works
    assert answer
    await session.aclose()
