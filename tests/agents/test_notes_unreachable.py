"""A database that does not answer, seen from the conversation: the agent says it cannot
reach its notes right now, the turn goes on, and the same tool works once it answers.

(That a stalled server becomes a transient StorageError within ``COACH_DB_TIMEOUT`` is
tested in tests/persistence/test_engine.py; here the store fails the same way.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from livekit.agents.voice.run_result import RunResult

from coach.agents.base import NOTES_UNREACHABLE
from coach.conversation.runtime import Runtime
from coach.errors import StorageError
from coach.store import Store
from coach.testing import ScriptedLLM, call, say

from .helpers import CHALLENGE, new_session_with_phases, start

READS = frozenset(
    {"get_or_create_user", "get_user_sessions", "get_session", "resume_session", "get_state"}
)


class UnreachableReads:
    """The runtime's store, whose reads fail as a stalled database's do while ``down``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = True

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name not in READS:
            return attribute

        async def read(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                error = StorageError(f"{name} failed: no answer within 5 s")
                error.transient = True
                raise error
            return await attribute(*args, **kwargs)

        return read


def unreachable(runtime: Runtime) -> tuple[Runtime, UnreachableReads]:
    store = UnreachableReads(runtime.store)
    return dataclasses.replace(runtime, store=store), store


async def test_identify_user_says_the_notes_are_unreachable_and_the_turn_goes_on(
    runtime: Runtime,
) -> None:
    flaky, store = unreachable(runtime)
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(flaky, model)
    model.extend(
        [
            call("identify_user", name="Ada"),
            say("Sorry, I can't reach my notes right now. What would you like to design?"),
        ]
    )
    result: RunResult[None] = await session.run(user_input="I'm Ada")
    reply = result.expect[-1].is_message(role="assistant").event().item
    assert reply.text_content and reply.text_content.startswith("Sorry")
    assert model.requests[-1].tool_outputs() == [("identify_user", NOTES_UNREACHABLE)]
    assert session.userdata.user_id is None

    store.down = False  # the database answers again: the same tool works
    model.extend([call("identify_user", name="Ada"), say("Nice to meet you, Ada.")])
    await session.run(user_input="Can you look me up now?")
    ((tool, output),) = model.requests[-1].tool_outputs()[-1:]
    assert tool == "identify_user" and "Ada is new here" in output
    assert session.userdata.user_id is not None
    await session.aclose()


async def test_a_returning_user_is_greeted_even_when_the_notes_are_unreachable(
    runtime: Runtime,
) -> None:
    await new_session_with_phases(runtime, "ada", 1)
    flaky, store = unreachable(runtime)
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(flaky, model, identity="ada")  # the lookup before greeting fails
    assert session.userdata.user_id is None
    model.extend([call("identify_user", name="Ada"), say("I can't reach my notes right now.")])
    await session.run(user_input="It's Ada again")
    assert model.requests[-1].tool_outputs() == [("identify_user", NOTES_UNREACHABLE)]

    store.down = False
    model.extend([call("identify_user", name="Ada"), say("Welcome back, Ada.")])
    await session.run(user_input="Try again?")
    output = model.requests[-1].tool_outputs()[-1][1]
    assert "1 earlier session(s)" in output and CHALLENGE in output
    await session.aclose()


async def test_loading_a_session_while_the_notes_are_unreachable_keeps_the_user_here(
    runtime: Runtime,
) -> None:
    session_id = await new_session_with_phases(runtime, "ada", 1)
    flaky, store = unreachable(runtime)
    store.down = False
    model = ScriptedLLM([say("Welcome back, Ada!")])
    session = await start(flaky, model, identity="ada")
    model.extend([call("select_session_to_load", session_id=session_id), say("Say continue.")])
    await session.run(user_input="Let's continue my onboarding redesign")

    store.down = True
    model.extend([call("load_selected_session"), say("I can't reach my notes right now.")])
    await session.run(user_input="continue")
    assert model.requests[-1].tool_outputs()[-1] == ("load_selected_session", NOTES_UNREACHABLE)
    assert session.current_agent.__class__.__name__ == "DesignCoach"  # no handoff

    store.down = False
    model.extend([call("load_selected_session"), say("Back to Define.")])
    await session.run(user_input="continue")
    assert session.current_agent.__class__.__name__ == "DesignStrategist"
    await session.aclose()
