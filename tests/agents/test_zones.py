"""Zoned state in the live agents: deltas, the renderer, the room, a stable session."""

import asyncio
import json
from typing import Any

import pytest
from livekit import rtc
from pydantic import TypeAdapter

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.state.board import BriefRenderer, RenderInput
from coach.state.shapes import TemplateZone
from coach.surfaces.room import RoomStateSink, StateMessage
from coach.surfaces.rpc import invoke
from coach.testing import ScriptedLLM, ToolCall, call, calls, say

from .helpers import CHALLENGE

CONTRACT: TypeAdapter[Any] = TypeAdapter(StateMessage)


class Snapshots:
    """A state sink that checks each message against the stream's contract and records
    each delta with the three zones as they were then (and the snapshots apart)."""

    def __init__(self, userdata_ref: list[UserData]) -> None:
        self.messages: list[dict[str, Any]] = []
        self.snapshots: list[dict[str, Any]] = []
        self.zones: list[dict[str, str]] = []
        self._ref = userdata_ref

    def publish(self, message: dict[str, Any]) -> None:
        CONTRACT.validate_python(json.loads(json.dumps(message)))
        if message["type"] == "snapshot":
            self.snapshots.append(message)
            return
        state = self._ref[0].state
        self.messages.append(message)
        self.zones.append(
            {z: json.dumps(getattr(state, z), sort_keys=True) for z in ("data", "template", "view")}
        )


class CountingRenderer(BriefRenderer):
    def __init__(self) -> None:
        self.inputs: list[RenderInput] = []

    def render(self, given: RenderInput) -> TemplateZone:
        self.inputs.append(given)
        return super().render(given)


async def strategist_session(
    runtime: Runtime, identity: str = "zoe", **kw: Any
) -> tuple[Any, ScriptedLLM, Snapshots, CountingRenderer]:
    ref: list[UserData] = []
    sink = Snapshots(ref)
    renderer = CountingRenderer()
    userdata = runtime.new_userdata(identity=identity, sink=kw.get("sink", sink), renderer=renderer)
    ref.append(userdata)
    model = ScriptedLLM([say("Hi!")])
    session = runtime.new_session(userdata, llm=model)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    model.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here."),
        ]
    )
    await session.run(user_input=CHALLENGE)
    return session, model, sink, renderer


async def test_each_write_changes_only_its_zone_with_one_delta_per_step(runtime: Runtime) -> None:
    session, model, sink, _ = await strategist_session(runtime)
    model.extend([call("add_insight", text="People distrust bank linking"), say("Noted.")])
    await session.run(user_input="They distrust linking their bank")
    model.extend(
        [call("add_idea", title="Demo mode", description="Try with fake data first"), say("Nice.")]
    )
    await session.run(user_input="Let them try it with fake data")
    model.extend([call("complete_phase", summary="Insights gathered"), say("On to define.")])
    await session.run(user_input="Done")
    userdata = session.userdata
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)

    # Every published change touched exactly its own zone; the others stayed byte-identical.
    for before, after, message in zip(sink.zones, sink.zones[1:], sink.messages[1:], strict=False):
        changed = {z for z in before if before[z] != after[z]}
        assert changed <= {message["zone"]}, (message["delta"]["path"], changed)
    assert [m["step"] for m in sink.messages] == list(range(1, len(sink.messages) + 1))

    # Stored: one delta per step, the state's step is the last delta's, zones as in memory.
    store = runtime.store
    deltas = await store.get_deltas(userdata.session_id)
    state = await store.get_state(userdata.session_id)
    assert [d.step for d in deltas] == list(range(1, state.step + 1))
    assert [d.to_json() for d in deltas] == [m["delta"] for m in sink.messages]
    assert state.data == userdata.state.data
    assert state.template == userdata.state.template and state.view == userdata.state.view
    paths = [d.path for d in deltas]
    assert paths.count("data.insights") == 1 and paths.count("data.ideas") == 1
    assert state.view["agent"] == "strategist" and state.view["phase_id"] == "define"
    insight_delta = next(d for d in deltas if d.path == "data.insights")
    assert insight_delta.action.tool == "add_insight"
    assert insight_delta.action.params == {"text": "People distrust bank linking"}
    assert (insight_delta.trigger, insight_delta.source, insight_delta.actor_id) == (
        "user_query",
        "llm",
        "strategist",
    )
    assert insight_delta.result.count == 1 and "text" in insight_delta.result.fields


async def test_renderer_runs_once_per_turn_that_changed_data(runtime: Runtime) -> None:
    session, model, sink, renderer = await strategist_session(runtime)
    runs_after_setup = len(renderer.inputs)  # the challenge capture rendered once
    assert runs_after_setup == 1

    model.extend(
        [
            calls(
                ToolCall("add_idea", {"title": "Demo mode", "description": "Fake data first"}),
                ToolCall("add_idea", {"title": "Trust badges", "description": "Explain security"}),
            ),
            say("Two ideas recorded."),
        ]
    )
    await session.run(user_input="Ideas: a demo mode and trust badges")
    assert len(renderer.inputs) == runs_after_setup + 1
    given = renderer.inputs[-1]
    assert given.request == "Ideas: a demo mode and trust badges"
    assert given.view is not None and given.view == session.userdata.state.view
    assert given.view["agent"] == "strategist"
    assert [d.action.tool for d in given.deltas] == ["add_idea", "add_idea"]
    assert len({d.turn_id for d in given.deltas}) == 1  # one user turn, one turn id
    template = session.userdata.state.template
    assert [i["title"] for i in template["board"]["ideas"]] == ["Demo mode", "Trust badges"]
    assert "Trust badges" in template["markdown"]

    model.extend([say("Sure, take your time.")])
    await session.run(user_input="Hmm, let me think")  # chit-chat: no data change
    assert len(renderer.inputs) == runs_after_setup + 1

    idea_id = session.userdata.state.data["ideas"][0]["id"]
    invocation = rtc.RpcInvocationData(
        "r1", "zoe", json.dumps({"item": idea_id}), 5.0, "coach.focus"
    )
    answer = json.loads(await invoke("coach.focus", session.userdata, invocation))
    assert answer["ok"] is True
    assert session.userdata.state.view["focus"] == {"kind": "idea", "id": idea_id}
    assert len(renderer.inputs) == runs_after_setup + 1  # a user action never renders
    focus_message = sink.messages[-1]
    assert focus_message["zone"] == "view" and focus_message["delta"]["trigger"] == "user_action"
    assert focus_message["delta"]["source"] == "user" and focus_message["delta"][
        "turn_id"
    ].startswith("action_")
    await session.aclose()


@pytest.mark.parametrize(
    ("caller", "payload", "code"),
    [
        ("mallory", '{"item": "x"}', 403),
        ("zoe", "not json", 400),
        ("zoe", '{"item": 5}', 400),
        ("zoe", json.dumps({"item": "x" * 5000}), 413),
        ("zoe", '{"item": "idea_missing"}', 404),
    ],
)
async def test_focus_rpc_rejects_bad_calls_and_changes_nothing(
    runtime: Runtime, caller: str, payload: str, code: int
) -> None:
    session, _, sink, _ = await strategist_session(runtime)
    before = (dict(session.userdata.state.view), session.userdata.state.step, len(sink.messages))
    with pytest.raises(rtc.RpcError) as err:
        await invoke(
            "coach.focus",
            session.userdata,
            rtc.RpcInvocationData("r", caller, payload, 5.0, "coach.focus"),
        )
    assert err.value.code == code
    assert (session.userdata.state.view, session.userdata.state.step, len(sink.messages)) == before
    await session.aclose()


async def test_empty_search_keeps_earlier_results_and_records_count_zero(runtime: Runtime) -> None:
    # An earlier session of the same user with 7 ideas about onboarding.
    earlier, model, _, _ = await strategist_session(runtime, identity="sam")
    for n in range(7):
        model.extend(
            [call("add_idea", title=f"Onboarding idea {n}", description=f"variant {n}"), say("ok")]
        )
        await earlier.run(user_input=f"idea {n}")
    await earlier.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)  # the earlier visit is stored

    session, model, sink, renderer = await strategist_session(runtime, identity="sam")
    model.extend([call("search_past_work", query="onboarding"), say("Found seven.")])
    result = await session.run(user_input="What did I have on onboarding before?")
    found = result.expect.next_event(type="function_call_output").event().item
    assert found.output.startswith("7 match(es)")
    data_before = json.dumps(session.userdata.state.data, sort_keys=True)
    renders = len(renderer.inputs)

    model.extend([call("search_past_work", query="zebra crossing"), say("Nothing there.")])
    result = await session.run(user_input="Anything about zebra crossings?")
    empty = result.expect.next_event(type="function_call_output").event().item
    assert "Nothing in earlier sessions matches" in empty.output and "still shows" in empty.output
    assert json.dumps(session.userdata.state.data, sort_keys=True) == data_before
    assert len(session.userdata.state.data["search"]["results"]) == 7
    assert len(renderer.inputs) == renders  # nothing changed, nothing to render
    last = sink.messages[-1]
    assert last["zone"] is None and last["delta"]["result"]["count"] == 0
    assert last["delta"]["action"] == {
        "type": "search",
        "tool": "search_past_work",
        "params": {"query": "zebra crossing"},
    }
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    stored = await runtime.store.get_state(session.userdata.session_id)
    assert len(stored.data["search"]["results"]) == 7
    assert (await runtime.store.get_deltas(stored.session_id))[-1].result.count == 0


async def test_follow_up_turns_stay_in_one_session(runtime: Runtime) -> None:
    session, model, _, _ = await strategist_session(runtime)
    first_id = session.userdata.session_id
    for text in ("First follow-up", "Second follow-up"):
        model.extend([say(f"Reply to {text}")])
        await session.run(user_input=text)
        assert session.userdata.session_id == first_id
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    contents = [m.content for m in await runtime.store.get_session_conversation(first_id)]
    assert contents[-4:] == [
        "First follow-up",
        "Reply to First follow-up",
        "Second follow-up",
        "Reply to Second follow-up",
    ]
    user = await runtime.store.get_or_create_user("zoe")
    assert len(await runtime.store.get_user_sessions(user.id)) == 1


class FakeRoomOutput:
    def __init__(self) -> None:
        self.texts: list[tuple[str, list[str] | None, str]] = []
        self.stream_attributes: list[dict[str, str] | None] = []
        self.attributes: list[dict[str, str]] = []

    async def send_text(
        self,
        text: str,
        *,
        destination_identities: list[str] | None = None,
        topic: str = "",
        attributes: dict[str, str] | None = None,
    ) -> None:
        await asyncio.sleep(0)  # a network write yields to the loop
        self.texts.append((text, destination_identities, topic))
        self.stream_attributes.append(attributes)

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        self.attributes.append(dict(attributes))


async def test_room_receives_state_messages_in_step_order(runtime: Runtime) -> None:
    output = FakeRoomOutput()
    sink = RoomStateSink(output, "zoe")
    session, model, _, _ = await strategist_session(runtime, sink=sink)
    model.extend([call("add_insight", text="Trust is low"), say("Noted.")])
    await session.run(user_input="Trust is low")
    await session.aclose()
    await sink.aclose()

    sent = [json.loads(text) for text, _, _ in output.texts]
    assert {topic for _, _, topic in output.texts} == {"coach.state"}
    assert all(dest == ["zoe"] for _, dest, _ in output.texts)
    # The new session is announced whole (step 0), then every change in step order.
    assert sent[0]["type"] == "snapshot" and sent[0]["step"] == 0
    assert sent[0]["session_id"] == session.userdata.session_id
    messages = sent[1:]
    assert {m["type"] for m in messages} == {"delta"}
    assert [m["step"] for m in messages] == list(range(1, len(messages) + 1))
    assert [m["delta"]["step"] for m in messages] == [m["step"] for m in messages]
    kinds = [(m["zone"], m["delta"]["path"]) for m in messages]
    assert ("data", "data.insights") in kinds and ("template", "template") in kinds
    assert output.attributes[-1] == {"coach.agent": "strategist", "coach.phase": "empathize"}
    template = next(m for m in reversed(messages) if m["zone"] == "template")
    assert "Trust is low" in template["value"]["markdown"]


async def test_telling_the_user_is_a_final_agent_segment_of_the_transcript() -> None:
    output = FakeRoomOutput()
    sink = RoomStateSink(output, "zoe")
    await sink.tell("Sorry, I have to end this call.")
    await sink.tell("Again.")
    await sink.aclose()
    assert output.texts == [
        ("Sorry, I have to end this call.", ["zoe"], "lk.transcription"),
        ("Again.", ["zoe"], "lk.transcription"),
    ]
    first, second = output.stream_attributes
    assert first is not None and second is not None
    assert first["lk.transcription_final"] == "true"
    assert first["lk.segment_id"] != second["lk.segment_id"]  # two segments, not one


async def test_a_fresh_read_arrives_whole_after_the_deltas_already_sent(runtime: Runtime) -> None:
    output = FakeRoomOutput()
    sink = RoomStateSink(output, "zoe")
    session, model, _, _ = await strategist_session(runtime, sink=sink)
    model.extend([call("add_insight", text="Trust is low"), say("Noted.")])
    await session.run(user_input="Trust is low")
    state = session.userdata.state

    asking = rtc.RpcInvocationData("r1", "zoe", "{}", 5.0, "coach.get_state")
    answer = json.loads(await invoke("coach.get_state", session.userdata, asking))
    stranger = rtc.RpcInvocationData("r2", "mallory", "{}", 5.0, "coach.get_state")
    with pytest.raises(rtc.RpcError) as refused:
        await invoke("coach.get_state", session.userdata, stranger)
    await session.aclose()
    await sink.aclose()

    assert refused.value.code == 403
    assert answer == {"session_id": state.session_id, "step": state.step}
    sent = [CONTRACT.validate_json(text).model_dump(mode="json") for text, _, _ in output.texts]
    snapshot = sent[-1]  # queued behind every delta sent before it, none after
    assert snapshot["type"] == "snapshot" and snapshot["step"] == state.step
    assert [m["step"] for m in sent[:-1] if m["type"] == "delta"][-1] == state.step
    assert (snapshot["data"], snapshot["template"], snapshot["view"]) == (
        state.data,
        state.template,
        state.view,
    )
    assert [i["text"] for i in snapshot["data"]["insights"]] == ["Trust is low"]


async def new_room_session(
    runtime: Runtime, identity: str, room: str
) -> tuple[Any, Any, ScriptedLLM]:
    """A first connection to ``room``: greeted by the coach, challenge captured, handed on."""
    userdata = runtime.new_userdata(identity=identity)
    agent = await runtime.room_agent(userdata, room)
    model = ScriptedLLM([say("Hi!")])
    session = runtime.new_session(userdata, llm=model)
    await (await session.start(agent, capture_run=True))
    model.extend(
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist."),
        ]
    )
    await session.run(user_input=CHALLENGE)
    return agent, session, model


async def test_reconnecting_to_the_room_continues_its_session(runtime: Runtime) -> None:
    from coach.agents import DesignCoach, DesignStrategist

    agent, session, model = await new_room_session(runtime, "rita", "room-1")
    assert isinstance(agent, DesignCoach)
    userdata = session.userdata
    model.extend([call("complete_phase", summary="Empathy done"), say("Next: define.")])
    await session.run(user_input="That's what I saw")
    first = userdata.session_id
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)

    # The same person joins the same room again: same session, same agent, same phase.
    again = runtime.new_userdata(identity="rita")
    agent = await runtime.room_agent(again, "room-1")
    assert isinstance(agent, DesignStrategist) and agent.resumed
    assert again.session_id == first and again.current_phase_id == "define"
    model = ScriptedLLM([say("Welcome back, we were defining the problem.")])
    session = runtime.new_session(again, llm=model)
    await (await session.start(agent, capture_run=True))
    assert "That's what I saw" in " | ".join(t for _, t in model.requests[0].messages())
    model.extend([say("Go on.")])
    await session.run(user_input="How might we build trust?")
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    contents = [m.content for m in await runtime.store.get_session_conversation(first)]
    assert contents[-2:] == ["How might we build trust?", "Go on."]

    # Another room, or another person in this room, starts with the coach.
    assert isinstance(
        await runtime.room_agent(runtime.new_userdata(identity="rita"), "room-2"), DesignCoach
    )
    assert isinstance(
        await runtime.room_agent(runtime.new_userdata(identity="other"), "room-1"), DesignCoach
    )


async def test_select_and_remove_ideas_by_id(runtime: Runtime) -> None:
    session, model, sink, _ = await strategist_session(runtime)
    model.extend(
        [
            calls(
                ToolCall("add_idea", {"title": "Demo mode", "description": "Fake data first"}),
                ToolCall("add_idea", {"title": "Trust badges", "description": "Explain security"}),
            ),
            say("Two ideas."),
        ]
    )
    await session.run(user_input="Two ideas")
    state = session.userdata.state
    demo, badges = (i["id"] for i in state.data["ideas"])

    model.extend([call("select_idea", idea_id=badges), say("Badges it is.")])
    await session.run(user_input="Go with the badges")
    assert state.data["selected_idea_id"] == badges
    assert [i["selected"] for i in state.template["board"]["ideas"]] == [False, True]

    model.extend([call("remove_idea", idea_id="idea_nope"), say("Which one?")])
    result = await session.run(user_input="Drop that other one")
    err = result.expect.next_event(type="function_call_output").event().item
    assert err.is_error and demo in err.output and badges in err.output  # lists the real ids
    assert len(state.data["ideas"]) == 2

    model.extend([call("remove_idea", idea_id=badges), say("Removed.")])
    await session.run(user_input="Actually drop the badges")
    assert [i["id"] for i in state.data["ideas"]] == [demo]
    assert state.data["selected_idea_id"] is None  # a removed idea is no longer selected
    paths = [
        (m["delta"]["path"], m["delta"]["delta_type"]) for m in sink.messages if m["zone"] == "data"
    ]
    assert paths[-2:] == [("data.selected_idea_id", "add"), ("data.ideas", "remove")]
    await session.aclose()


async def test_a_reconnect_before_the_writes_are_stored_still_continues_cleanly(
    settings: Any, open_runtime: Any
) -> None:
    settings.recorder_commit_interval = 60  # nothing is committed unless someone flushes
    runtime: Runtime = await open_runtime()
    _, session, model = await new_room_session(runtime, "quinn", "room-q")
    userdata = session.userdata
    model.extend([call("add_insight", text="Fees confuse people"), say("Noted.")])
    await session.run(user_input="Fees confuse people")
    await session.aclose()
    assert runtime.recorder.pending > 0  # the first connection's writes are still queued

    again = runtime.new_userdata(identity="quinn")
    agent = await runtime.room_agent(again, "room-q")  # must see those writes
    assert again.session_id == userdata.session_id
    assert again.state.step == userdata.state.step
    assert [i["text"] for i in again.state.data["insights"]] == ["Fees confuse people"]
    model = ScriptedLLM([say("Welcome back.")])
    session = runtime.new_session(again, llm=model)
    await (await session.start(agent, capture_run=True))
    model.extend(
        [call("add_idea", title="Fee preview", description="Show fees up front"), say("Added.")]
    )
    await session.run(user_input="Preview the fees")
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    assert runtime.recorder.stats().dropped == 0
    deltas = await runtime.store.get_deltas(again.session_id)  # type: ignore[arg-type]
    assert [d.step for d in deltas] == list(range(1, again.state.step + 1))
