"""``coach.focus`` off the happy path: the documented error every time, nothing changed."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from livekit import rtc
from pydantic import TypeAdapter

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.state import design
from coach.state.zones import Action, Zone
from coach.surfaces.room import StateMessage
from coach.surfaces.rpc import MAX_REQUEST_BYTES, invoke

OWNER = "zoe"
CONTRACT: TypeAdapter[Any] = TypeAdapter(StateMessage)


@dataclass
class Sink:
    messages: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


@dataclass
class Board:
    userdata: UserData
    sink: Sink
    insight_id: str

    def snapshot(self) -> tuple[str, int, int]:
        state = self.userdata.state
        return json.dumps(state.view, sort_keys=True), state.step, len(self.sink.messages)


async def board(runtime: Runtime) -> Board:
    """A session of OWNER with one insight on the board."""
    sink = Sink()
    userdata = runtime.new_userdata(identity=OWNER, sink=sink)
    user = await runtime.store.get_or_create_user(OWNER)
    session = await runtime.store.create_session(user.id, "Onboarding")
    userdata.session_id = session.id
    userdata.state.attach(session.id)
    data, change = design.add_insight(userdata.state.data, "People skip setup", phase_id=None)
    userdata.state.write(Zone.DATA, data, change, Action(type="tool", tool="add_insight"))
    return Board(userdata, sink, data["insights"][0]["id"])


async def focus(userdata: UserData, payload: str, caller: str = OWNER) -> str:
    call = rtc.RpcInvocationData("r", caller, payload, 5.0, "coach.focus")
    return await invoke("coach.focus", userdata, call)


def nested(depth: int) -> str:
    return '{"item": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(
    "payload",
    ["[" * 1_500 + "]" * 1_500, nested(1_500), "[" * 4_000],
    ids=["array", "inside item", "unclosed"],
)
async def test_a_payload_nested_too_deep_is_400_and_changes_nothing(
    runtime: Runtime, payload: str
) -> None:
    assert len(payload.encode()) <= MAX_REQUEST_BYTES
    b = await board(runtime)
    before = b.snapshot()
    with pytest.raises(rtc.RpcError) as refused:
        await focus(b.userdata, payload)
    assert refused.value.code == 400
    assert b.snapshot() == before


@pytest.mark.parametrize(
    "item", ["é" * 2_100, "𝄞" * 1_100, "𝄞" * 4_000], ids=["2-byte", "4-byte", "16 KB"]
)
async def test_the_size_limit_counts_utf8_bytes_not_characters(runtime: Runtime, item: str) -> None:
    payload = json.dumps({"item": item}, ensure_ascii=False)
    assert len(payload) <= MAX_REQUEST_BYTES < len(payload.encode())
    b = await board(runtime)
    before = b.snapshot()
    with pytest.raises(rtc.RpcError) as refused:
        await focus(b.userdata, payload)
    assert refused.value.code == 413
    assert b.snapshot() == before


async def test_a_payload_of_exactly_the_limit_in_bytes_is_read(runtime: Runtime) -> None:
    head = '{"item": "'
    tail = '"}'
    fill = MAX_REQUEST_BYTES - len(head) - len(tail) - 2
    payload = head + "é" + "x" * fill + tail  # "é" is two bytes: 4096 bytes in all
    assert len(payload.encode()) == MAX_REQUEST_BYTES
    b = await board(runtime)
    with pytest.raises(rtc.RpcError) as refused:
        await focus(b.userdata, payload)
    assert refused.value.code == 404  # read and looked up, not refused for its size


@pytest.mark.parametrize(
    ("escaped", "code"), [("\\ud800", 400), ("x\\udcff", 400), ("\\u0000", 404)]
)
async def test_an_item_that_is_not_utf8_is_refused_with_a_message_the_room_can_send(
    runtime: Runtime, escaped: str, code: int
) -> None:
    # A lone surrogate is no string to the request type (400); a NUL is text, but no id.
    b = await board(runtime)
    before = b.snapshot()
    with pytest.raises(rtc.RpcError) as refused:
        await focus(b.userdata, '{"item": "' + escaped + '"}')
    assert refused.value.code == code
    refused.value.message.encode("utf-8")  # the error goes back over the wire
    assert "\x00" not in refused.value.message
    assert b.snapshot() == before


async def test_focus_still_works_and_is_stored(runtime: Runtime) -> None:
    b = await board(runtime)
    answer = json.loads(await focus(b.userdata, json.dumps({"item": b.insight_id})))
    assert answer == {"ok": True, "step": 2}
    assert b.userdata.state.view is not None
    assert b.userdata.state.view["focus"] == {"kind": "insight", "id": b.insight_id}
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    assert b.userdata.session_id is not None
    stored = await runtime.store.get_state(b.userdata.session_id)
    assert (stored.step, stored.view["focus"]["id"]) == (2, b.insight_id)


async def test_a_focus_before_any_agent_showed_the_board_sends_a_whole_view(
    runtime: Runtime,
) -> None:
    # No agent has navigated: the view starts where the conversation is, so the room
    # gets a view the contract (and the web client) accepts, not a bare focus.
    b = await board(runtime)
    assert b.userdata.state.view is None
    await focus(b.userdata, json.dumps({"item": b.insight_id}))
    message = CONTRACT.validate_python(b.sink.messages[-1])
    assert message.zone == "view" and message.value == {
        "agent": "coach",
        "phase_id": None,
        "focus": {"kind": "insight", "id": b.insight_id},
        "stack": [],
    }
