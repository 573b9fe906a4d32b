"""The whole conversation with a scripted LLM: coach → strategist → evaluator."""

import asyncio

from livekit.agents import llm
from livekit.agents.voice.run_result import RunResult

from coach.agents import DesignCoach, DesignEvaluator, DesignStrategist
from coach.conversation.runtime import Runtime
from coach.testing import ScriptedLLM, call, say

from .helpers import CHALLENGE, start


async def test_coach_captures_challenge_and_hands_off_to_strategist(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(runtime, model)

    model.extend(
        [call("identify_user", name="Ada Lovelace"), say("Welcome Ada, what shall we design?")]
    )
    result: RunResult[None] = await session.run(user_input="I'm Ada Lovelace")
    result.expect.next_event().is_function_call(
        name="identify_user", arguments={"name": "Ada Lovelace"}
    )
    out = result.expect.next_event().is_function_call_output()
    assert "new here" in out.event().item.output
    result.expect.next_event().is_message(role="assistant")

    model.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("I'm the Design Strategist. Who are your new users?"),
        ]
    )
    result = await session.run(user_input=f"I want to {CHALLENGE}")
    result.expect.skip_next_event_if(type="message")
    result.expect.next_event().is_function_call(name="capture_design_challenge")
    result.expect.next_event().is_function_call_output()
    result.expect.skip_next_event_if(type="message")
    result.expect.next_event().is_function_call(name="transfer_to_strategist")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_agent_handoff(new_agent_type=DesignStrategist)
    result.expect.next_event().is_message(role="assistant")

    userdata = session.userdata
    assert isinstance(session.current_agent, DesignStrategist)
    assert userdata.design_challenge == CHALLENGE
    assert userdata.status == "in_progress"
    assert userdata.current_phase_id == "empathize"
    assert userdata.completed_phases == ["challenge"]
    # The strategist's system prompt is rendered for its first phase and the challenge.
    system = model.requests[-1].system_prompt
    assert "Current phase: Empathize" in system and CHALLENGE in system
    await session.aclose()


async def test_strategist_completes_phases_in_order_then_evaluator_finishes(
    runtime: Runtime,
) -> None:
    model = ScriptedLLM([say("Hi! Your name?")])
    session = await start(runtime, model)
    model.extend(
        [
            call("identify_user", name="Grace"),
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here. Let's empathize."),
        ]
    )
    await session.run(user_input=f"Grace. {CHALLENGE}")
    userdata = session.userdata
    strategist = session.current_agent
    assert isinstance(strategist, DesignStrategist)

    # Handing off early is refused by state, not by the prompt.
    model.extend([call("transfer_to_evaluator"), say("We still have phases to do.")])
    result: RunResult[None] = await session.run(user_input="Can we skip to the evaluation?")
    result.expect.next_event().is_function_call(name="transfer_to_evaluator")
    refused = result.expect.next_event().is_function_call_output().event().item
    assert refused.is_error and "Empathize, Define, Ideate, Strategy" in refused.output
    assert isinstance(session.current_agent, DesignStrategist)

    seen_phases = []
    for phase in ("empathize", "define", "ideate", "strategy"):
        seen_phases.append(userdata.current_phase_id)
        model.extend([call("complete_phase", summary=f"{phase} summary"), say(f"{phase} done.")])
        await session.run(user_input=f"I agree with the {phase} result")
    assert seen_phases == ["empathize", "define", "ideate", "strategy"]
    assert userdata.completed_phases == ["challenge", "empathize", "define", "ideate", "strategy"]
    assert userdata.phase_outputs["ideate"] == "ideate summary"

    model.extend([call("transfer_to_evaluator"), say("Evaluator here. Let's review.")])
    result = await session.run(user_input="Let's evaluate")
    result.expect.contains_agent_handoff(new_agent_type=DesignEvaluator)
    assert isinstance(session.current_agent, DesignEvaluator)
    assert userdata.current_phase_id == "evaluation"
    assert "Current phase: Evaluation" in model.requests[-1].system_prompt

    # Out-of-range scores are a tool error and change nothing.
    model.extend(
        [
            call("record_evaluation", desirability=9, feasibility=3, viability=4, summary="x"),
            say("Let me fix that."),
        ]
    )
    result = await session.run(user_input="Score it")
    bad = result.expect.next_event(type="function_call_output").event().item
    assert bad.is_error and "desirability" in bad.output
    assert userdata.evaluation is None

    model.extend(
        [
            call("record_evaluation", desirability=4, feasibility=3, viability=4, summary="Solid."),
            say("Scores recorded."),
        ]
    )
    await session.run(user_input="Score it properly")
    assert userdata.evaluation == {
        "desirability": 4,
        "feasibility": 3,
        "viability": 4,
        "summary": "Solid.",
    }

    model.extend([call("finish_session"), say("Goodbye!")])
    await session.run(user_input="Let's wrap up")
    assert userdata.status == "completed"
    await session.aclose()

    await asyncio.wait_for(runtime.recorder.flush(), 5)
    stored = await runtime.store.get_session(userdata.session_id)
    assert stored is not None and stored.status == "completed"


async def test_userdata_is_one_object_shared_by_all_agents(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model)
    first = session.userdata
    assert isinstance(session.current_agent, DesignCoach)
    model.extend(
        [
            call("identify_user", name="Lin"),
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist."),
        ]
    )
    await session.run(user_input="Lin here")
    assert session.current_agent.session.userdata is first
    assert first.user_name == "Lin" and first.session_id is not None
    await session.aclose()


async def test_tools_refuse_out_of_order_calls(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model)
    model.extend([call("capture_design_challenge", challenge=CHALLENGE), say("Who are you?")])
    result: RunResult[None] = await session.run(user_input="Design a thing")
    err = result.expect.next_event(type="function_call_output").event().item
    assert err.is_error and "identify_user" in err.output
    model.extend([call("transfer_to_strategist"), say("First the challenge.")])
    result = await session.run(user_input="Go to the strategist")
    err = result.expect.next_event(type="function_call_output").event().item
    assert err.is_error and "capture_design_challenge" in err.output
    assert isinstance(session.current_agent, DesignCoach)
    assert session.userdata.session_id is None
    await session.aclose()


async def test_each_llm_request_is_pruned_but_the_history_is_not(runtime: Runtime) -> None:
    from coach.state.history import estimate_tokens

    model = ScriptedLLM([say("Hi!")])
    userdata = runtime.new_userdata()
    system_tokens = estimate_tokens(DesignCoach(userdata).instructions)  # type: ignore[arg-type]
    userdata.max_history_tokens = system_tokens + 250  # room for about two long turns
    session = runtime.new_session(userdata, llm=model)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    for n in range(6):
        model.extend([say(f"ok {n}")])
        await session.run(user_input=f"turn {n} " + "x" * 400)  # ~100 tokens each
    last = model.requests[-1]
    sent = [text for role, text in last.messages() if role != "system"]
    assert last.system_prompt.startswith("You are the Design Coach")
    assert any(t.startswith("turn 5 ") for t in sent)
    assert not any(t.startswith(("turn 0 ", "turn 1 ", "turn 2 ")) for t in sent)
    total = sum(estimate_tokens(t) for t in sent) + estimate_tokens(last.system_prompt)
    assert total <= userdata.max_history_tokens
    # Only the request was pruned: the agent still holds every turn.
    history = [
        i.text_content or ""
        for i in session.current_agent.chat_ctx.items
        if isinstance(i, llm.ChatMessage)
    ]
    assert sum(t.startswith("turn ") for t in history) == 6
    await session.aclose()
