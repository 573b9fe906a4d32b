"""The person, remembered (SPEC §4.6): remember with consent, show, correct and forget by
voice, RPC and CLI; erased with the user; never seen by another user; in the next
session's first request."""

from __future__ import annotations

import asyncio
import json

import pytest
from livekit import rtc
from sqlalchemy import func, select

from coach.__main__ import main
from coach.agents import DesignStrategist
from coach.conversation.runtime import Runtime
from coach.errors import InvalidWrite, StaleWrite
from coach.persistence import open_repository
from coach.persistence.schema import PERSON_DELTAS, PERSONS
from coach.state import person
from coach.state.zones import DeltaSpec
from coach.surfaces.rpc import invoke
from coach.testing import FakeOpenAIServer, call, say
from tests.support import MEMORY_SECRET, key_env, keys_of, raw_sql

from .helpers import CHALLENGE
from .test_context_contract import Visit, instructions, offered

ROLE = "leads a design team of four"


# --- the record itself (pure) ------------------------------------------------------------


def test_remember_correct_forget_and_the_lines_that_name_each_fact() -> None:
    p, change = person.remember(person.empty_person(), "role", f"  {ROLE} ")
    assert (change.delta_type, change.path, change.count) == ("add", "person.facts", 1)
    (fact,) = p["facts"]
    assert person.person_lines(p) == [f"({fact['id']}) role: {ROLE}"]
    p, _ = person.correct(p, fact["id"], "leads a team of five")
    assert p["facts"][0]["text"] == "leads a team of five"
    p2, _ = person.remember(p, "designs", "banking apps")
    assert len(p2["facts"]) == 2 and len(p["facts"]) == 1  # inputs are never changed
    p3, change = person.forget(p2, fact["id"])
    assert [f["topic"] for f in p3["facts"]] == ["designs"]
    assert person.forget_all(p3)[1].count == 1 and person.forget_all(p3)[0] == {"facts": []}


@pytest.mark.parametrize(
    ("topic", "text", "said"),
    [
        ("mood", "tired", "topic must be one of"),
        ("role", "", "1 to 300"),
        ("role", ROLE, "already"),
    ],
)
def test_a_fact_that_cannot_be_remembered_is_refused_in_words(
    topic: str, text: str, said: str
) -> None:
    start, _ = person.remember(person.empty_person(), "role", ROLE)
    with pytest.raises(person.PersonError, match=said):
        person.remember(start, topic, text)
    with pytest.raises(person.PersonError, match="No fact with id fact_nope"):
        person.forget(start, "fact_nope")


# --- storage -------------------------------------------------------------------------------


async def test_the_record_is_stored_with_a_delta_per_change(runtime: Runtime) -> None:
    store = runtime.store
    user = await store.get_or_create_user("ada")
    assert (await store.get_person(user.id)).step == 0
    value, change = person.remember(person.empty_person(), "role", ROLE)
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="person.facts")
    record, delta = await store.update_person(user.id, dict(value), spec, expected_step=0)
    assert (record.step, delta.step) == (1, 1)
    assert (await store.get_person(user.id)).value == value
    with pytest.raises(StaleWrite):  # another conversation of hers wrote first
        await store.update_person(user.id, dict(person.empty_person()), spec, expected_step=0)
    with pytest.raises(InvalidWrite):
        await store.update_person("f" * 32, dict(value), spec)
    assert [d.path for d in await store.get_person_deltas(user.id)] == ["person.facts"]


# --- by voice, RPC; the next session; another user ---------------------------------------


def fact_line(visit: Visit) -> str:
    return person.person_lines(visit.userdata.person)[0]


async def test_remembered_by_voice_shown_corrected_and_forgotten(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        assert "remember_about_person" in offered(visit.turns[0][0])
        assert "forget_about_person" not in offered(visit.turns[0][0])  # nothing to forget
        sent = await visit.turn(
            "Yes, please remember that I lead a design team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )
        line = fact_line(visit)
        assert line in instructions(sent[1])  # the next request already knows it
        assert {"correct_about_person", "forget_about_person"} <= set(offered(sent[1]))
        fact_id = visit.userdata.person["facts"][0]["id"]
        sent = await visit.turn(
            "It's five people now.",
            [
                call("correct_about_person", fact_id=fact_id, text="leads a team of five"),
                say("Updated."),
            ],
        )
        assert "leads a team of five" in instructions(sent[1]) and ROLE not in instructions(sent[1])
        sent = await visit.turn(
            "Forget that.", [call("forget_about_person", fact_id=fact_id), say("Forgotten.")]
        )
        assert "leads a team of five" not in instructions(sent[1])
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    stored = await runtime.store.get_person(user_id)
    assert (stored.step, stored.value) == (3, {"facts": []})
    deltas = await runtime.store.get_person_deltas(user_id)
    assert [(d.delta_type, d.action.tool) for d in deltas] == [
        ("add", "remember_about_person"),
        ("update", "correct_about_person"),
        ("remove", "forget_about_person"),
    ]


async def test_a_remembered_fact_reaches_the_next_session_and_no_one_else(
    runtime: Runtime,
) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Remember I lead a team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )
        await visit.close()
        bob = await Visit.open(runtime, server, identity="bob", greeting="Hi Bob.")
        await bob.close()
        again = await Visit.open(runtime, server, greeting="Welcome back, Ada.")
        await again.close()
    assert ROLE not in str(bob.turns[0][0])  # another user never sees it
    assert ROLE in instructions(again.turns[0][0])  # her next session's first request


async def test_the_profile_by_rpc_and_forget_renews_the_live_instructions(
    runtime: Runtime,
) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Remember I lead a team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )

        async def rpc(method: str, payload: dict[str, str], caller: str = "ada") -> str:
            data = rtc.RpcInvocationData("r", caller, json.dumps(payload), 5.0, method)
            return await invoke(method, visit.userdata, data, session=visit.session)

        profile = json.loads(await rpc("coach.get_profile", {}))
        (fact,) = profile["facts"]
        assert (fact["topic"], fact["text"]) == ("role", ROLE)
        with pytest.raises(rtc.RpcError) as refused:
            await rpc("coach.get_profile", {}, caller="bob")
        assert refused.value.code == 403
        with pytest.raises(rtc.RpcError) as unknown:
            await rpc("coach.forget", {"fact_id": "fact_nope"})
        assert unknown.value.code == 404
        assert json.loads(await rpc("coach.forget", {"fact_id": fact["id"]})) == {"facts": []}
        sent = await visit.turn("What do you know about me?", [say("Nothing yet.")])
        assert ROLE not in instructions(sent[0])
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    (delta,) = (await runtime.store.get_person_deltas(user_id))[1:]
    assert (delta.trigger, delta.source, delta.actor_id) == ("user_action", "user", "ada")


# --- the CLI, and erasing the person -------------------------------------------------------


def test_users_show_forget_and_delete(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> str:
        store = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
        try:
            user = await store.get_or_create_user("ada", display_name="Ada")
            value, _ = person.remember(person.empty_person(), "role", ROLE)
            value, _ = person.remember(value, "designs", "banking apps")
            spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="person")
            await store.update_person(user.id, dict(value), spec)
            return str(value["facts"][0]["id"])
        finally:
            await store.aclose()

    async def rows() -> tuple[int, int]:
        store = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
        try:
            async with raw_sql(store) as conn:
                persons = await conn.scalar(select(func.count()).select_from(PERSONS))
                deltas = await conn.scalar(select(func.count()).select_from(PERSON_DELTAS))
                return int(persons or 0), int(deltas or 0)
        finally:
            await store.aclose()

    fact_id = asyncio.run(seed())
    monkeypatch.setenv("COACH_DATABASE_URL", database_url)
    monkeypatch.setenv("COACH_SECRET_KEY", MEMORY_SECRET.decode())
    for name, value in key_env(database_url).items():
        monkeypatch.setenv(name, value)
    assert main(["users", "show", "ada"]) == 0
    shown = capsys.readouterr().out
    assert "user 'ada' (Ada), 0 session(s)" in shown
    assert f"({fact_id}) role: {ROLE}" in shown and "designs: banking apps" in shown
    assert main(["users", "forget", "ada", fact_id]) == 0
    assert capsys.readouterr().out == "forgot 1 fact(s) of 'ada'\n"
    assert main(["users", "forget", "ada", "fact_nope"]) == 2
    assert "Nothing was forgotten" in capsys.readouterr().err
    assert main(["users", "show", "ada"]) == 0
    assert ROLE not in capsys.readouterr().out
    assert asyncio.run(rows()) == (1, 2)
    assert main(["users", "delete", "ada", "--yes"]) == 0
    capsys.readouterr()
    assert asyncio.run(rows()) == (0, 0)  # erased with the person


# --- what cannot change, forgetting everything, the strategist, two conversations --------


def tool_output(request: dict[str, object]) -> str:
    """What the conversation's last tool call answered, as the model reads it."""
    messages = request["messages"]
    assert isinstance(messages, list)
    return str([m for m in messages if m.get("role") == "tool"][-1]["content"])


async def test_what_cannot_be_remembered_or_forgotten_is_told_and_nothing_changes(
    runtime: Runtime,
) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Remember I lead a team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )
        (fact,) = visit.userdata.person["facts"]
        sent = await visit.turn(
            "Remember that I lead a team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("I know.")],
        )
        assert "already remembered" in tool_output(sent[1])
        sent = await visit.turn(
            "Remember I'm tired today.",
            [call("remember_about_person", topic="mood", text="tired"), say("Noted.")],
        )
        assert "topic must be one of: role, organisation" in tool_output(sent[1])
        sent = await visit.turn(
            "Forget where I work.",
            [call("forget_about_person", fact_id="fact_nope"), say("I had nothing.")],
        )
        assert f"No fact with id fact_nope. Facts: {fact['id']}." in tool_output(sent[1])
        assert visit.userdata.person["facts"] == [fact]
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    assert (await runtime.store.get_person(user_id)).step == 1
    assert len(await runtime.store.get_person_deltas(user_id)) == 1


async def test_forget_everything_by_voice(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Remember I lead a team of four and design banking apps.",
            [
                call("remember_about_person", topic="role", text=ROLE),
                call("remember_about_person", topic="designs", text="banking apps"),
                say("Remembered both."),
            ],
        )
        sent = await visit.turn(
            "Forget everything about me.",
            [call("forget_about_person", fact_id="all"), say("All forgotten.")],
        )
        assert ROLE not in instructions(sent[1]) and "banking apps" not in instructions(sent[1])
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    assert (await runtime.store.get_person(user_id)).value == {"facts": []}
    last = (await runtime.store.get_person_deltas(user_id))[-1]
    assert (last.delta_type, last.result.count, last.action.tool) == (
        "remove",
        2,
        "forget_about_person",
    )


async def test_the_strategist_remembers_too(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            f"I want to work on this: {CHALLENGE}",
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("I'm the strategist. Who struggles today?"),
            ],
        )
        assert isinstance(visit.session.current_agent, DesignStrategist)
        sent = await visit.turn(
            "Yes, remember that I lead a design team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )
        assert "remember_about_person" in offered(sent[0])
        assert fact_line(visit) in instructions(sent[1])
        await visit.close()


async def test_two_conversations_of_one_person_never_overwrite_each_others_facts(
    runtime: Runtime,
) -> None:
    async with FakeOpenAIServer() as server:
        first = await Visit.open(runtime, server, room="desk")
        second = await Visit.open(runtime, server, room="phone")
        await first.turn(
            "Remember I lead a team of four.",
            [call("remember_about_person", topic="role", text=ROLE), say("Remembered.")],
        )
        sent = await second.turn(
            "Remember that I design banking apps.",
            [call("remember_about_person", topic="designs", text="banking apps"), say("Hm.")],
        )
        assert "just changed elsewhere" in tool_output(sent[1])
        assert ROLE in instructions(sent[1])  # it now sees what the other one remembered
        await second.turn(
            "Yes, remember it.",
            [call("remember_about_person", topic="designs", text="banking apps"), say("Done.")],
        )
        user_id = second.userdata.user_id
        await first.close()
        await second.close()
    assert user_id is not None
    stored = await runtime.store.get_person(user_id)
    assert stored.step == 2
    assert [f["text"] for f in stored.value["facts"]] == [ROLE, "banking apps"]


async def test_forget_everything_by_rpc(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Remember I lead a team of four and design banking apps.",
            [
                call("remember_about_person", topic="role", text=ROLE),
                call("remember_about_person", topic="designs", text="banking apps"),
                say("Remembered both."),
            ],
        )
        data = rtc.RpcInvocationData("r", "ada", json.dumps({"fact_id": "all"}), 5.0, "")
        answer = await invoke("coach.forget", visit.userdata, data, session=visit.session)
        assert json.loads(answer) == {"facts": []}
        sent = await visit.turn("What do you know about me?", [say("Nothing.")])
        assert ROLE not in instructions(sent[0]) and "banking apps" not in instructions(sent[0])
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    last = (await runtime.store.get_person_deltas(user_id))[-1]
    assert (last.result.count, last.action.params) == (2, {"fact_id": "all"})


def test_users_forget_all_and_unknown_people(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> None:
        store = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
        try:
            user = await store.get_or_create_user("ada")
            for _ in range(2):
                await store.create_session(user.id)
            value, _ = person.remember(person.empty_person(), "role", ROLE)
            value, _ = person.remember(value, "designs", "banking apps")
            spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="person")
            await store.update_person(user.id, dict(value), spec)
        finally:
            await store.aclose()

    asyncio.run(seed())
    monkeypatch.setenv("COACH_DATABASE_URL", database_url)
    monkeypatch.setenv("COACH_SECRET_KEY", MEMORY_SECRET.decode())
    for name, value in key_env(database_url).items():
        monkeypatch.setenv(name, value)
    assert main(["users", "forget", "ada", "all"]) == 0
    assert capsys.readouterr().out == "forgot 2 fact(s) of 'ada'\n"
    assert main(["users", "show", "ada"]) == 0
    assert capsys.readouterr().out == "user 'ada' (no name), 2 session(s)\nremembered: nothing\n"
    for argv in (["users", "show", "nobody"], ["users", "forget", "nobody", "all"]):
        assert main(argv) == 2
        assert "No user with identity 'nobody'" in capsys.readouterr().err


async def test_forgetting_everything_when_nothing_is_remembered_changes_nothing(
    runtime: Runtime,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        sent = await visit.turn(
            "Forget everything about me.",
            [call("forget_about_person", fact_id="all"), say("There was nothing.")],
        )
        assert "Nothing is remembered about them" in tool_output(sent[1])
        data = rtc.RpcInvocationData("r", "ada", json.dumps({"fact_id": "all"}), 5.0, "")
        answer = await invoke("coach.forget", visit.userdata, data, session=visit.session)
        assert json.loads(answer) == {"facts": []}
        user_id = visit.userdata.user_id
        await visit.close()
    assert user_id is not None
    monkeypatch.setenv("COACH_DATABASE_URL", database_url)
    monkeypatch.setenv("COACH_SECRET_KEY", MEMORY_SECRET.decode())
    for name, value in key_env(database_url).items():
        monkeypatch.setenv(name, value)
    assert await asyncio.to_thread(main, ["users", "forget", "ada", "all"]) == 0
    assert capsys.readouterr().out == "nothing is remembered about 'ada'\n"
    assert (await runtime.store.get_person(user_id)).step == 0  # no write, no delta
    assert await runtime.store.get_person_deltas(user_id) == []


async def test_a_reconnect_to_the_room_knows_what_is_remembered(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server, room="room-1")
        await visit.turn(
            f"I want to work on this: {CHALLENGE}. And yes, remember I lead a team of four.",
            [
                call("remember_about_person", topic="role", text=ROLE),
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("I'm the strategist. Who struggles today?"),
            ],
        )
        await visit.close()
        userdata = runtime.new_userdata(identity="ada")
        agent = await runtime.room_agent(userdata, "room-1")
        assert isinstance(agent, DesignStrategist)  # continues the room's session
        again = await Visit.open(runtime, server, agent=agent, userdata=userdata)
        await again.close()
    assert ROLE in instructions(again.turns[0][0])
