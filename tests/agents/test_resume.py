"""Visits across separate AgentSessions (and a restarted repository) on one database."""

import asyncio
import logging

import pytest
from livekit.agents import llm
from livekit.agents.voice.run_result import RunResult
from sqlalchemy import text

from coach.agents import DesignEvaluator, DesignStrategist
from coach.conversation.runtime import Runtime
from coach.testing import ScriptedLLM, call, say
from tests.support import RuntimeFactory, raw_sql, update_session

from .helpers import CHALLENGE, new_session_with_phases, repository, start


def texts(ctx: llm.ChatContext) -> list[str]:
    return [i.text_content or "" for i in ctx.items if isinstance(i, llm.ChatMessage)]


async def resume(runtime: Runtime, identity: str, session_id: str) -> tuple[object, ScriptedLLM]:
    """Visit n: the known user is offered their sessions, selects one and continues."""
    model = ScriptedLLM([say("Welcome back! Resume your onboarding redesign?")])
    session = await start(runtime, model, identity=identity)
    model.extend(
        [call("select_session_to_load", session_id=session_id), say("Say continue when ready.")]
    )
    result: RunResult[None] = await session.run(
        user_input="Yes, let's continue my onboarding redesign"
    )
    selected = result.expect.next_event(type="function_call_output").event().item
    assert not selected.is_error, selected.output
    assert session.userdata.pending_session_id == session_id
    model.extend(
        [
            call("load_selected_session"),
            say("Welcome back. Next we ideate: what ideas do you have?"),
        ]
    )
    result = await session.run(user_input="continue")
    return session, model, result  # type: ignore[return-value]


async def test_second_visit_resumes_at_the_next_phase_with_earlier_context(
    open_runtime: RuntimeFactory,
) -> None:
    runtime = await open_runtime()
    session_id = await new_session_with_phases(runtime, "ada", phases=2)

    session, model, result = await resume(runtime, "ada", session_id)  # type: ignore[misc]
    # The first reply of visit 2 already lists the in-progress session.
    first = model.requests[0]
    offered = first.system_prompt + " | ".join(t for _, t in first.messages())
    assert session_id in offered and "in progress, 3 of 6 phases done" in offered
    result.expect.next_event().is_function_call(name="load_selected_session")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_agent_handoff(new_agent_type=DesignStrategist)
    result.expect.next_event().is_message(role="assistant")

    userdata = session.userdata
    assert userdata.session_id == session_id and userdata.pending_session_id is None
    assert userdata.current_phase_id == "ideate"
    assert userdata.completed_phases == ["challenge", "empathize", "define"]
    assert userdata.design_challenge == CHALLENGE
    request = model.requests[-1]
    assert "Current phase: Ideate" in request.system_prompt
    sent = " | ".join(t for _, t in request.messages())
    assert "My thoughts on empathize: observation 1" in sent  # visit 1 is in the context
    assert "continue" in sent  # and so is this visit
    # The resume greeting recaps instead of answering the old last turn again: given
    # last, as what to do now, in the request's one system message.
    now = request.system_prompt.split("Now, for your next reply", 1)
    assert len(now) == 2 and "3 of 6 phases are done" in now[1]
    await session.aclose()

    # Visit 3, after a restart: a new runtime (engine, pool, recorder) on the same database.
    await runtime.aclose()
    restarted = await open_runtime()
    session, model, result = await resume(restarted, "ada", session_id)  # type: ignore[misc]
    result.expect.contains_agent_handoff(new_agent_type=DesignStrategist)
    assert session.userdata.current_phase_id == "ideate"
    sent = " | ".join(t for _, t in model.requests[-1].messages())
    assert "My thoughts on define: observation 2" in sent
    await session.aclose()


async def test_session_with_all_strategy_phases_done_resumes_in_the_evaluator(
    runtime: Runtime,
) -> None:
    session_id = await new_session_with_phases(runtime, "bo", phases=4)
    session, model, result = await resume(runtime, "bo", session_id)  # type: ignore[misc]
    result.expect.contains_agent_handoff(new_agent_type=DesignEvaluator)
    assert session.userdata.current_phase_id == "evaluation"
    assert "Current phase: Evaluation" in model.requests[-1].system_prompt
    await session.aclose()


async def test_completed_session_is_refused_in_plain_words(runtime: Runtime) -> None:
    session_id = await new_session_with_phases(runtime, "cy", phases=1)
    await update_session(runtime.store, session_id, status="completed")
    model = ScriptedLLM([say("Welcome back!")])
    session = await start(runtime, model, identity="cy")
    model.extend(
        [
            call("select_session_to_load", session_id=session_id),
            say("Say continue."),
        ]
    )
    await session.run(user_input="resume it")
    model.extend([call("load_selected_session"), say("That session is finished. Start fresh?")])
    result: RunResult[None] = await session.run(user_input="continue")
    refused = result.expect.next_event(type="function_call_output").event().item
    assert refused.is_error
    assert f"Session {session_id} already completed" in refused.output
    assert "offer to start fresh" in refused.output
    result.expect.next_event().is_message(role="assistant")
    assert session.userdata.session_id is None and session.userdata.pending_session_id is None
    await session.aclose()


@pytest.mark.parametrize("kind", ["other_users", "unknown", "malformed"])
async def test_a_user_cannot_select_or_load_anothers_session(runtime: Runtime, kind: str) -> None:
    victim = await new_session_with_phases(runtime, "victim", phases=1)
    target = {
        "other_users": victim,
        "unknown": "0" * 32,
        "malformed": "'; DROP TABLE sessions; --",
    }[kind]
    model = ScriptedLLM([say("Hello!")])
    session = await start(runtime, model, identity="mallory")
    model.extend([call("select_session_to_load", session_id=target), say("No such session.")])
    result: RunResult[None] = await session.run(user_input=f"load session {target}")
    answer = result.expect.next_event(type="function_call_output").event().item
    assert answer.is_error
    # The same words whether the id exists for someone else, does not exist, or is garbage.
    assert (
        answer.output
        == f"No such session: {target.strip().lower()}. Use an id identify_user listed."
    )
    assert session.userdata.pending_session_id is None
    model.extend([call("load_selected_session"), say("Nothing selected.")])
    result = await session.run(user_input="continue")
    answer = result.expect.next_event(type="function_call_output").event().item
    assert answer.is_error and "No session is selected" in answer.output
    assert session.userdata.session_id is None
    await session.aclose()
    victim_session = await runtime.store.get_session(victim)
    assert victim_session is not None and victim_session.status == "in_progress"


async def test_corrupt_memory_steps_fall_back_to_reconstructed_context(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = await new_session_with_phases(runtime, "dee", phases=2)
    async with raw_sql(repository(runtime), begin=True) as conn:
        await conn.execute(
            text("UPDATE agent_steps SET payload = :junk WHERE session_id = :sid"),
            {"junk": b"\x00garbage", "sid": session_id},
        )
    caplog.set_level(logging.INFO)
    session, model, result = await resume(runtime, "dee", session_id)  # type: ignore[misc]
    result.expect.contains_agent_handoff(new_agent_type=DesignStrategist)
    assert session.userdata.current_phase_id == "ideate"
    sent = " | ".join(t for _, t in model.requests[-1].messages())
    # Reconstructed from phase outputs (user_input → output pairs) and the conversation.
    assert "Summary of empathize." in sent
    assert "My thoughts on define: observation 2" in sent
    assert any(
        "memory" in r.getMessage().lower() and r.levelno >= logging.ERROR for r in caplog.records
    )
    assert any("reconstructed" in r.getMessage().lower() for r in caplog.records)
    await session.aclose()


async def test_resuming_after_the_evaluation_keeps_it_completed(runtime: Runtime) -> None:
    session_id = await new_session_with_phases(runtime, "eve", phases=4)
    session, model, result = await resume(runtime, "eve", session_id)  # type: ignore[misc]
    model.extend(
        [
            call("record_evaluation", desirability=4, feasibility=3, viability=4, summary="Good."),
            say("Scores recorded."),
        ]
    )
    await session.run(user_input="Score it")
    await session.aclose()  # the user hangs up before finish_session

    session, model, result = await resume(runtime, "eve", session_id)  # type: ignore[misc]
    result.expect.contains_agent_handoff(new_agent_type=DesignEvaluator)
    assert session.userdata.evaluation == {
        "desirability": 4,
        "feasibility": 3,
        "viability": 4,
        "summary": "Good.",
    }
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    outputs = {o.phase_id: o.status for o in await runtime.store.get_phase_outputs(session_id)}
    assert outputs["evaluation"] == "completed"
    stored = await runtime.store.get_session(session_id)
    assert stored is not None and stored.completed_phases == 6
