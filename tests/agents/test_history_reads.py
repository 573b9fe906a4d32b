"""Reads that must not grow with a person's history: the greeting's listing, the sessions
RPC and ``search_past_work`` cost the same statements with 1 or 60 earlier sessions, and
their limits are in the SQL."""

from __future__ import annotations

import json

import pytest
from livekit import rtc

from coach.agents.coach import LISTED
from coach.conversation.runtime import Runtime
from coach.state import design
from coach.state.zones import Action, DeltaSpec
from coach.store import PhaseDone
from coach.surfaces.rpc import invoke
from coach.testing import ScriptedLLM, call, say
from tests.persistence.test_ownership import statements

from .helpers import start


async def history(runtime: Runtime, sessions: int) -> str:
    """Ada with ``sessions`` earlier sessions, each holding one insight about lockers."""
    store = runtime.store
    user = await store.get_or_create_user("ada")
    done = PhaseDone("challenge", "Design challenge", "prompt", "x", "x")
    for n in range(sessions):
        session = await store.create_session(user.id, f"Challenge {n}", first_phase=done)
        data, change = design.add_insight(design.empty_data(), f"Lockers idea {n}", phase_id=None)
        spec = DeltaSpec(
            trigger="user_query",
            source="llm",
            delta_type=change.delta_type,
            path=change.path,
            action=Action(type="tool", tool="add_insight"),
        )
        await store.update_data(session.id, dict(data), spec)
    return user.id


@pytest.mark.parametrize("sessions", [1, 60])
async def test_the_greeting_lists_the_newest_few_and_says_how_many_more(
    runtime: Runtime, sessions: int
) -> None:
    await history(runtime, sessions)
    model = ScriptedLLM([say("Welcome back, Ada.")])
    with statements(runtime.store) as seen:  # type: ignore[arg-type]
        session = await start(runtime, model, identity="ada")
    reads = [s for s, _ in seen if "FROM sessions" in s]
    assert len(reads) == (1 if sessions < LISTED else 2)  # the listing, then a count
    assert all("LIMIT" in s.upper() for s in reads if "count(" not in s.lower())
    greeting = model.requests[0].system_prompt
    assert greeting.count("session_id ") == min(sessions, LISTED)
    if sessions > LISTED:
        assert f"and {sessions - LISTED} older session(s)" in greeting
    await session.aclose()


@pytest.mark.parametrize("sessions", [1, 60])
async def test_list_sessions_limits_in_the_query(runtime: Runtime, sessions: int) -> None:
    user_id = await history(runtime, sessions)
    userdata = runtime.new_userdata(identity="ada")
    userdata.user_id = user_id
    payload = json.dumps({"limit": 3})
    data = rtc.RpcInvocationData("r", "ada", payload, 5.0, "coach.list_sessions")
    with statements(runtime.store) as seen:  # type: ignore[arg-type]
        answer = json.loads(await invoke("coach.list_sessions", userdata, data))
    assert len(answer["sessions"]) == min(sessions, 3) and answer["more"] is (sessions > 3)
    (read,) = [s for s, _ in seen if "FROM sessions" in s]
    assert "LIMIT" in read.upper()


@pytest.mark.parametrize("sessions", [1, 60])
async def test_search_past_work_reads_every_earlier_session_in_one_query(
    runtime: Runtime, sessions: int
) -> None:
    await history(runtime, sessions)
    model = ScriptedLLM([say("Hi Ada.")])
    session = await start(runtime, model, identity="ada")
    model.extend(
        [
            call("capture_design_challenge", challenge="Lockers for a gym"),
            call("transfer_to_strategist"),
            say("Who struggles?"),
        ]
    )
    await session.run(user_input="A new one: lockers for a gym.")
    model.extend([call("search_past_work", query="lockers"), say("Found some.")])
    with statements(runtime.store) as seen:  # type: ignore[arg-type]
        await session.run(user_input="What did I find about lockers before?")
    reads = [s for s, _ in seen if "session_state" in s and "SELECT" in s.upper()]
    assert len(reads) == 1
    found = session.userdata.state.data["search"]["results"]
    assert len(found) == min(sessions, 20) and found[0]["text"].startswith("Lockers idea")
    await session.aclose()
