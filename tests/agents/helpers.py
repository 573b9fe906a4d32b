"""Driving whole conversations with the scripted LLM."""

import asyncio

from livekit.agents import AgentSession

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.persistence import Repository
from coach.testing import ScriptedLLM, call, say

CHALLENGE = "Redesign onboarding for a budgeting app so new users finish setup."


def repository(runtime: Runtime) -> Repository:
    """The runtime's store as the repository it is, for raw SQL on its engine."""
    store = runtime.store
    assert isinstance(store, Repository), store
    return store


async def start(
    runtime: Runtime, model: ScriptedLLM, identity: str | None = None
) -> AgentSession[UserData]:
    """A started session whose greeting has been spoken."""
    userdata = runtime.new_userdata(identity=identity)
    session = runtime.new_session(userdata, llm=model)
    greeting = await session.start(runtime.first_agent(userdata), capture_run=True)
    await greeting
    return session


async def new_session_with_phases(
    runtime: Runtime, identity: str, phases: int, *, challenge: str = CHALLENGE
) -> str:
    """Visit 1: identify, capture a challenge, complete ``phases`` strategist phases."""
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model, identity=identity)
    model.extend(
        [
            call("capture_design_challenge", challenge=challenge),
            call("transfer_to_strategist"),
            say("Strategist here. Who struggles today?"),
        ]
    )
    await session.run(user_input=f"I want to work on: {challenge}")
    for n in range(phases):
        phase = session.userdata.current_phase_id
        model.extend(
            [call("complete_phase", summary=f"Summary of {phase}."), say(f"Phase {n + 1} done.")]
        )
        await session.run(user_input=f"My thoughts on {phase}: observation {n + 1}")
    session_id = session.userdata.session_id
    assert session_id is not None
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    return session_id
