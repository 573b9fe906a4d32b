"""Self-service through the room: ``coach.export_my_data`` (everything of the caller, in
chunks) and ``coach.forget_me`` (erase the caller, confirmed with a token)."""

from __future__ import annotations

import asyncio
import json
import time
from io import StringIO

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.state.person import remember
from coach.state.zones import Action
from coach.surfaces.rpc import CONFIRM_SECONDS
from coach.surfaces.sessions import export_user
from coach.testing import ScriptedLLM, say
from coach.testing import call as tool

from .helpers import new_session_with_phases, start
from .test_rpc import OWNER, call, refused

# Quotes, backslashes, newlines and non-ASCII grow when escaped: chunks must still fit.
AWKWARD = 'A "calmer" café checkout \\ ✓ for 日本'


async def remembered(runtime: Runtime, identity: str, text: str) -> None:
    """``identity`` agreed coach may remember ``text``."""
    userdata = runtime.new_userdata(identity=identity)
    user = await runtime.store.get_or_create_user(identity)
    userdata.user_id = user.id
    await userdata.load_person()
    value, change = remember(userdata.person, "role", text)
    await userdata.change_person(value, change, Action(type="remember"), actor_id=identity)


async def exported(userdata: UserData) -> tuple[str, list[dict[str, object]]]:
    """The export as the client assembles it, and every answer."""
    answers = [await call(userdata, "coach.export_my_data", {})]
    while answers[-1]["next_cursor"] is not None:
        cursor = answers[-1]["next_cursor"]
        answers.append(await call(userdata, "coach.export_my_data", {"cursor": cursor}))
    return "".join(str(a["chunk"]) for a in answers), answers


async def cli_export(runtime: Runtime, identity: str) -> str:
    out = StringIO()
    await export_user(runtime.store, identity, out)
    return out.getvalue()


# --- coach.export_my_data -------------------------------------------------------------


async def test_the_chunks_reassemble_to_exactly_the_persons_export(runtime: Runtime) -> None:
    first = await new_session_with_phases(runtime, OWNER, 2, challenge=AWKWARD)
    second = await new_session_with_phases(runtime, OWNER, 1)
    await new_session_with_phases(runtime, "bob", 1, challenge="Bob's own challenge.")
    await remembered(runtime, OWNER, "Designs banking apps")
    userdata = runtime.new_userdata(identity=OWNER)

    text, answers = await exported(userdata)

    assert len(answers) > 2  # more than one answer's worth: it was paged
    assert [a["index"] for a in answers] == list(range(len(answers)))
    assert {a["total_chunks"] for a in answers} == {len(answers)}
    assert text == await cli_export(runtime, OWNER)
    document = json.loads(text)
    assert document["user"]["identity"] == OWNER
    assert [s["session"]["id"] for s in document["sessions"]] == [second, first]
    assert document["sessions"][1]["session"]["design_challenge"] == AWKWARD
    assert [f["text"] for f in document["person"]["value"]["facts"]] == ["Designs banking apps"]
    assert "Bob's own challenge." not in text


async def test_a_cursor_not_of_the_current_export_is_404(runtime: Runtime) -> None:
    await new_session_with_phases(runtime, OWNER, 2)
    userdata = runtime.new_userdata(identity=OWNER)
    earlier = await call(userdata, "coach.export_my_data", {})
    assert earlier["next_cursor"] is not None
    bobs = runtime.new_userdata(identity="bob")
    await new_session_with_phases(runtime, "bob", 2)
    foreign = (await call(bobs, "coach.export_my_data", {}, caller="bob"))["next_cursor"]
    again = await call(userdata, "coach.export_my_data", {})  # a new export replaces it
    export_id = again["next_cursor"].rpartition(".")[0]
    for cursor in (
        earlier["next_cursor"],
        foreign,
        f"{export_id}.0",
        f"{export_id}.{again['total_chunks']}",
        f"{export_id}.-1",
        f"{export_id}.\u00b9",  # a digit to str.isdigit, not to int()
        "nonsense",
    ):
        error = await refused(userdata, "coach.export_my_data", {"cursor": cursor})
        assert error.code == 404, cursor
    assert (await call(userdata, "coach.export_my_data", {"cursor": again["next_cursor"]}))[
        "index"
    ] == 1


async def test_a_caller_nothing_is_stored_about_gets_404(runtime: Runtime) -> None:
    userdata = runtime.new_userdata(identity="nobody")
    error = await refused(userdata, "coach.export_my_data", {}, caller="nobody")
    assert (error.code, error.message) == (404, "Nothing is stored about you.")


# --- coach.forget_me --------------------------------------------------------------------


async def everything(runtime: Runtime, identity: str) -> str | None:
    """All that is stored of ``identity`` (None: nothing at all)."""
    if await runtime.store.find_user(identity) is None:
        return None
    return await cli_export(runtime, identity)


async def test_a_wrong_expired_or_foreign_token_erases_nothing(runtime: Runtime) -> None:
    await new_session_with_phases(runtime, OWNER, 1)
    await new_session_with_phases(runtime, "bob", 1)
    before = await everything(runtime, OWNER)
    userdata = runtime.new_userdata(identity=OWNER)
    bobs = runtime.new_userdata(identity="bob")
    bobs_token = (await call(bobs, "coach.forget_me", {}, caller="bob"))["confirm_token"]

    asked = await call(userdata, "coach.forget_me", {})
    assert asked["erased"] is False and asked["sessions"] == 1
    assert asked["expires_in"] == CONFIRM_SECONDS
    for token in ("wrong", bobs_token, asked["confirm_token"]):
        # A token is tried once: after a wrong one, even the right one must be asked anew.
        error = await refused(userdata, "coach.forget_me", {"confirm_token": token})
        assert error.code == 409
    token = (await call(userdata, "coach.forget_me", {}))["confirm_token"]
    assert userdata.forget_token is not None
    userdata.forget_token = (token, OWNER, time.monotonic() - 1)  # its time is up
    error = await refused(userdata, "coach.forget_me", {"confirm_token": token})
    assert error.code == 409 and "nothing was erased" in error.message

    assert await everything(runtime, OWNER) == before
    assert await runtime.store.find_user("bob") is not None


async def test_forget_me_erases_everything_of_the_caller_and_nobody_else(
    runtime: Runtime,
) -> None:
    first = await new_session_with_phases(runtime, OWNER, 2)
    second = await new_session_with_phases(runtime, OWNER, 1)
    await remembered(runtime, OWNER, "Designs banking apps")
    bobs_session = await new_session_with_phases(runtime, "bob", 1)
    await remembered(runtime, "bob", "Runs a bakery")
    bob_before = await everything(runtime, "bob")
    userdata = runtime.new_userdata(identity=OWNER)

    token = (await call(userdata, "coach.forget_me", {}))["confirm_token"]
    answer = await call(userdata, "coach.forget_me", {"confirm_token": token})

    assert answer == {"erased": True, "sessions": 2, "confirm_token": None, "expires_in": None}
    assert await everything(runtime, OWNER) is None
    assert await runtime.store.get_session(first) is None
    assert await runtime.store.get_session(second) is None
    assert await everything(runtime, "bob") == bob_before
    assert [s.id for s in await runtime.store.list_sessions()] == [bobs_session]
    error = await refused(userdata, "coach.forget_me", {"confirm_token": token})
    assert error.code == 404  # nothing is stored about them any more


async def test_the_live_conversation_ends_and_stores_nothing_more_of_the_erased(
    runtime: Runtime,
) -> None:
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model, identity=OWNER)
    model.extend([tool("capture_design_challenge", challenge="Calmer checkouts"), say("Noted.")])
    await session.run(user_input="I want calmer checkouts.")
    userdata = session.userdata
    assert userdata.session_id is not None and userdata.user_id is not None

    token = (await call(userdata, "coach.forget_me", {}, session=session))["confirm_token"]
    answer = await call(userdata, "coach.forget_me", {"confirm_token": token}, session=session)

    assert answer["erased"] is True and answer["sessions"] == 1
    assert userdata.user_id is None and userdata.session_id is None
    assert userdata.state.session_id is None
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    assert await runtime.store.find_user(OWNER) is None
    assert await runtime.store.list_sessions() == []
    # Closed: the conversation takes no more turns, so nothing more can be written.
    model.extend([say("Still here?")])
    try:
        await session.run(user_input="Hello again")
    except RuntimeError:
        pass
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    assert await runtime.store.find_user(OWNER) is None
    assert await runtime.store.list_sessions() == []
    await session.aclose()


async def test_forget_me_before_anything_is_stored_is_404(runtime: Runtime) -> None:
    userdata = runtime.new_userdata(identity="nobody")
    error = await refused(userdata, "coach.forget_me", {}, caller="nobody")
    assert error.code == 404
    assert userdata.forget_token is None
