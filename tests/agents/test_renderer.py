"""Layer 3 as a model (seed 003): after a data-changing agent turn, one render request with
the view, the person's request and the delta; none after a click; a failing, slow or
overtaken render never holds the conversation and never writes a stale brief."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from livekit import rtc

from coach.conversation.live_state import LiveState
from coach.conversation.rendering import ModelRenderer
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.state import design
from coach.state.board import BriefRenderer, RenderInput
from coach.state.zones import Action, Zone
from coach.surfaces.rpc import invoke
from coach.testing import ScriptedLLM, call, say
from coach.testing.script import fake_render

from .helpers import CHALLENGE


async def strategist(runtime: Runtime) -> tuple[Any, ScriptedLLM, UserData]:
    """A session in Empathize whose brief is written by the (scripted) model."""
    model = ScriptedLLM([say("Hi! What's your name?")])
    userdata = runtime.new_userdata(identity="ada", model=model)
    session = runtime.new_session(userdata, llm=model)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    model.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Who struggles today?"),
        ]
    )
    await session.run(user_input="Onboarding, please.")
    await userdata.state.wait_for_render()
    model.render.requests.clear()
    return session, model, userdata


async def test_a_data_changing_turn_sends_one_render_request_with_view_request_and_delta(
    runtime: Runtime,
) -> None:
    session, model, userdata = await strategist(runtime)
    model.extend([call("add_insight", text="People fear linking a bank."), say("Noted.")])
    await session.run(user_input="Keep the brief short: people fear linking a bank.")
    await userdata.state.wait_for_render()

    (request,) = model.render.requests
    given = json.loads(request)
    assert given["view"]["agent"] == "strategist" and given["view"]["phase_id"] == "empathize"
    assert given["request"] == "Keep the brief short: people fear linking a bank."
    (change,) = given["changes"]
    assert change["path"] == "data.insights" and change["tool"] == "add_insight"
    assert change["values"] == {"text": "People fear linking a bank."}
    # The delta and the brief as it was, not the conversation.
    assert "Who struggles today?" not in request and "What's your name?" not in request
    # The model's brief is the template's markdown; the board stays the deterministic one.
    template = userdata.state.template
    assert template is not None and template["markdown"] == fake_render(request)
    assert template["board"]["insights"][0]["text"] == "People fear linking a bank."
    await session.aclose()


async def test_a_click_renders_nothing(runtime: Runtime) -> None:
    session, model, userdata = await strategist(runtime)
    model.extend([call("add_insight", text="People fear linking a bank."), say("Noted.")])
    await session.run(user_input="An insight.")
    await userdata.state.wait_for_render()
    before = len(model.render.requests)
    item = userdata.state.data["insights"][0]["id"]
    data = rtc.RpcInvocationData("r", "ada", json.dumps({"item": item}), 5.0, "coach.focus")
    assert json.loads(await invoke("coach.focus", userdata, data))["ok"] is True
    await userdata.state.wait_for_render()
    assert len(model.render.requests) == before
    await session.aclose()


async def test_a_failing_render_model_keeps_the_conversation_and_shows_the_plain_brief(
    runtime: Runtime,
) -> None:
    session, model, userdata = await strategist(runtime)
    model.render.replies.append(503)
    model.extend([call("add_insight", text="People fear linking a bank."), say("Noted.")])
    await session.run(user_input="An insight.")
    await userdata.state.wait_for_render()
    given = RenderInput(userdata.state.data, userdata.state.view, "An insight.", ())
    assert userdata.state.template is not None
    assert userdata.state.template["markdown"] == BriefRenderer().render(given)["markdown"]
    model.extend([say("Still here.")])
    result = await session.run(user_input="Go on.")
    assert result.expect.next_event().is_message(role="assistant").event().item.text_content == (
        "Still here."
    )
    await session.aclose()


async def test_a_slow_render_never_holds_the_next_turn_and_the_newer_one_wins(
    runtime: Runtime,
) -> None:
    session, model, userdata = await strategist(runtime)
    model.render.gate = asyncio.Event()  # the renderer model is slow
    model.extend([call("add_insight", text="First insight."), say("Noted.")])
    await session.run(user_input="One.")
    before = userdata.state.template
    # The next turn runs while the first render is still waiting.
    model.extend([call("add_insight", text="Second insight."), say("Noted too.")])
    await session.run(user_input="Two.")
    assert userdata.state.template == before
    model.render.gate.set()
    await userdata.state.wait_for_render()
    assert len(model.render.requests) == 2
    assert userdata.state.template is not None
    markdown = userdata.state.template["markdown"]
    assert markdown == fake_render(model.render.requests[-1]) and "Second insight." in markdown
    await session.aclose()


async def test_a_render_whose_data_moved_on_is_dropped(runtime: Runtime) -> None:
    model = ScriptedLLM()
    model.render.gate = asyncio.Event()
    state = LiveState(runtime.recorder, model_renderer=ModelRenderer(model, "Write the brief."))
    user = await runtime.store.get_or_create_user("ada")
    session = await runtime.store.create_session(user.id, CHALLENGE)
    state.attach(session.id)
    state.begin_turn("item_1", "An insight.", actor_id="strategist")
    data, change = design.add_insight(state.data, "First.", phase_id=None)
    state.write(Zone.DATA, data, change, Action(type="tool", tool="add_insight"))
    assert state.end_agent_turn()
    # A tool of the next turn changes the data before the render answers.
    data, change = design.add_insight(state.data, "Second.", phase_id=None)
    state.write(Zone.DATA, data, change, Action(type="tool", tool="add_insight"))
    step = state.step
    model.render.gate.set()
    await state.wait_for_render()
    assert state.template is None and state.step == step  # nothing stale was written
    await asyncio.wait_for(runtime.recorder.flush(), 10)
