"""Erasing a session reaches the person's other sessions: what they copied of it (the
listing of ``identify_user``, the results of ``search_past_work`` in the memory steps,
the data and template zones, the phase snapshots and the delta log) is gone with it, and
the later session still resumes with a context that says what was removed."""

from __future__ import annotations

import asyncio
import io
import json
import uuid

import pytest
from livekit import rtc
from livekit.agents import AgentSession, llm
from sqlalchemy import text

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.persistence.schema import metadata
from coach.surfaces.rpc import invoke
from coach.surfaces.sessions import delete_session, prune_sessions
from coach.testing import ScriptedLLM, call, say
from tests.support import raw_sql, stored_bytes, wal_kept

from .helpers import repository, start

MARKERS = ("zorblatt", "quimbly", "froodle")
"""Words only the first session holds: any of them found elsewhere is a copy of it."""

S1_CHALLENGE = "Redesign the zorblatt lockers at our gym"
S2_CHALLENGE = "Better bike parking at the office"
TABLES = (
    "users",
    "sessions",
    "phase_outputs",
    "session_conversations",
    "agent_steps",
    "session_state",
    "state_deltas",
    "persons",
    "person_deltas",
)
SQL_TABLES = metadata.tables


async def first_visit(runtime: Runtime) -> str:
    """S1: a challenge, an insight and an idea, each with a marker word."""
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model, identity="ada")
    model.extend(
        [
            call("capture_design_challenge", challenge=S1_CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here."),
            call("add_insight", text="Members distrust quimbly lockers at night"),
            say("Noted."),
            call("add_idea", title="Froodle lockers", description="Lockers that text you"),
            say("Recorded."),
        ]
    )
    await session.run(user_input="My gym's lockers need work.")
    await session.run(user_input="People do not trust them at night.")
    await session.run(user_input="What if they texted you?")
    session_id = session.userdata.session_id
    assert session_id is not None
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    return session_id


async def second_visit(runtime: Runtime) -> str:
    """S2: lists S1 (identify_user), searches past work (finding S1), ends a phase."""
    model = ScriptedLLM([say("Hello! Who am I talking to?")])
    session = await start(runtime, model, identity="ada")
    model.extend(
        [
            call("identify_user", name="Ada"),
            say("Welcome back, Ada. Something new today?"),
            call("capture_design_challenge", challenge=S2_CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here."),
            call("search_past_work", query="lockers"),
            say("You looked at lockers before; two notes."),
            call("complete_phase", summary="Cyclists need somewhere safe to leave things."),
            say("Empathize is done."),
            say("Good."),
        ]
    )
    await session.run(user_input="I'm Ada.")
    await session.run(user_input="Something new: bike parking at the office.")
    await session.run(user_input="Did I learn anything about storage before?")
    await session.run(user_input="Safe storage is what cyclists need.")
    await session.run(user_input="Thanks.")  # the turn that closes the phase
    session_id = session.userdata.session_id
    assert session_id is not None
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    return session_id


async def resume(runtime: Runtime, session_id: str) -> tuple[AgentSession[UserData], ScriptedLLM]:
    """Ada comes back and continues ``session_id`` by voice (select, then load)."""
    model = ScriptedLLM([say("Welcome back!")])
    session = await start(runtime, model, identity="ada")
    model.extend([call("select_session_to_load", session_id=session_id), say("Say continue.")])
    await session.run(user_input="The bike parking one, please.")
    model.extend([call("load_selected_session"), say("We continue with Define.")])
    await session.run(user_input="continue")
    assert session.userdata.session_id == session_id
    return session, model


def _text(value: object) -> str:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, uuid.UUID):  # PostgreSQL's ids: as the hex the code uses
        return value.hex
    return str(value)


def _step_text(step: object) -> str:
    if isinstance(step, llm.FunctionCall):
        return f"call {step.name} {step.arguments}"
    if isinstance(step, llm.FunctionCallOutput):
        return f"output {step.name} {step.output}"
    if isinstance(step, llm.ChatMessage):
        return f"{step.role} {step.text_content}"
    return repr(step)


async def stored(runtime: Runtime) -> dict[str, list[str]]:
    """Every stored row of every table as text (memory steps decoded), by table."""
    found: dict[str, list[str]] = {}
    repo = repository(runtime)
    async with raw_sql(repo) as conn:
        owners = {
            str(sid).replace("-", ""): str(uid).replace("-", "")
            for sid, uid in (await conn.execute(text("SELECT id, user_id FROM sessions"))).all()
        }
        sealers = await repo.vault.sealers(set(owners.values()))
        for table in TABLES:
            rows = (await conn.execute(SQL_TABLES[table].select())).all()
            found[table] = []
            for row in rows:
                values = row._asdict()
                owner = str(
                    values["id"]
                    if table == "users"
                    else values.get("user_id") or owners[values["session_id"]]
                )
                values = sealers[owner].open_row(table, values)  # every value, in the clear
                found[table].append(" ".join(_text(value) for value in values.values()))
        ids = list(owners)
    for session_id in ids:
        sid = str(session_id).replace("-", "")
        steps = await runtime.store.load_agent_state(sid)
        assert len(steps) == await runtime.store.agent_step_count(sid)  # all verify
        found.setdefault("memory steps", []).extend(_step_text(step) for step in steps)
    return found


def copies(rows: dict[str, list[str]]) -> dict[str, list[str]]:
    """The rows holding a marker, by table."""
    hits = {
        table: [row for row in texts if any(m in row.lower() for m in MARKERS)]
        for table, texts in rows.items()
    }
    return {table: texts for table, texts in hits.items() if texts}


async def remove(runtime: Runtime, how: str, first: str, second: str) -> None:
    store = runtime.store
    if how == "prune":
        later = await store.get_session(second)
        assert later is not None
        out = io.StringIO()
        await prune_sessions(store, out, lambda _: True, days=0, now=later.created_at)
        assert f"erased {first}" in out.getvalue() and "erased 1 session(s)" in out.getvalue()
    elif how == "delete":
        await delete_session(store, first, io.StringIO(), lambda _: True)
    else:  # the owner, from a room (another conversation than S2's)
        userdata = runtime.new_userdata(identity="ada")
        user = await store.find_user("ada")
        assert user is not None
        userdata.user_id = user.id
        payload = json.dumps({"session_id": first})
        data = rtc.RpcInvocationData("r", "ada", payload, 5.0, "coach.delete_session")
        answer = json.loads(await invoke("coach.delete_session", userdata, data))
        assert answer["deleted"] is True
    assert await store.get_session(first) is None


async def test_two_whole_visits_leave_no_word_of_the_person_readable_on_disk(
    runtime: Runtime, database_url: str
) -> None:
    """Two conversations through the agents — tool calls, handoffs, a search of past
    work, a phase completed with its prompts, the person's identity — and not one of
    their words in the database's bytes on disk (file and WAL), though all read back."""
    repo = repository(runtime)
    async with wal_kept(repo) as since:
        first = await first_visit(runtime)
        await second_visit(runtime)
        said = (
            *MARKERS,
            "My gym's lockers need work",
            "bike parking at the office",
            "Cyclists need somewhere safe",
            "Welcome back, Ada",
            "You are the Design",  # the phases' system prompts
        )
        opened = " ".join(" ".join(rows) for rows in (await stored(runtime)).values()).lower()
        assert [w for w in said if w.lower() not in opened] == []  # stored, and reads back
        raw = await stored_bytes(repo, database_url, since)
    assert first.encode() in raw or uuid.UUID(first).bytes in raw  # the scan sees rows
    lowered = raw.lower()
    for words in said:
        assert words.lower().encode() not in lowered, f"{words!r} is stored readable"


@pytest.mark.parametrize("how", ["prune", "delete", "rpc"])
async def test_erasing_a_session_removes_its_words_from_the_persons_later_session(
    runtime: Runtime, how: str
) -> None:
    first = await first_visit(runtime)
    second = await second_visit(runtime)
    before = copies(await stored(runtime))
    # S2 did copy S1's words: its listing and search results, in its steps and zones.
    assert any(first in row for row in before["session_state"] if second in row)
    held = " ".join(before["memory steps"])
    assert "output identify_user" in held and "output search_past_work" in held
    assert any(second in row and "quimbly" in row for row in before["phase_outputs"])

    await remove(runtime, how, first, second)

    after = await stored(runtime)
    assert copies(after) == {}
    assert not any(first in row for row in after["session_state"] + after["phase_outputs"])
    # What was not S1's stays: S2's own challenge and conversation.
    state = await runtime.store.get_state(second)
    assert state.data["challenge"] == S2_CHALLENGE
    assert state.data["search"] == {"query": None, "results": []}
    assert "Earlier work" not in state.template["markdown"]
    assert state.template["board"]["search"]["results"] == []
    # The erase is in S2's delta log (data, then the brief rendered again), and the
    # search that found S1 no longer says what it looked for.
    deltas = await runtime.store.get_deltas(second)
    assert [(d.path, d.action.type, d.actor_id) for d in deltas[-2:]] == [
        ("data.search", "erase", "retention"),
        ("template", "erase", "retention"),
    ]
    assert deltas[-2].result.count == 2 and deltas[-1].step == state.step
    (search,) = [d for d in deltas if d.action.tool == "search_past_work"]
    assert search.action.params == {"query": "[removed session]"}
    steps = await runtime.store.load_agent_state(second)
    (listing,) = [
        s.output
        for s in steps
        if isinstance(s, llm.FunctionCallOutput) and s.name == "identify_user"
    ]
    assert listing.splitlines()[1] == f"- session_id {first}: [removed session]"
    said = [m.content for m in await runtime.store.get_session_conversation(second)]
    assert "Did I learn anything about storage before?" in said

    # S2 resumes, and its context says what was removed instead of quoting it.
    session, model = await resume(runtime, second)
    request = model.requests[-1]
    outputs = dict(request.tool_outputs())
    assert outputs["search_past_work"].splitlines() == [
        "2 match(es) from earlier sessions:",
        "- [removed session]",
        "- [removed session]",
    ]
    sent = " ".join(t for _, t in request.messages()) + " ".join(outputs.values())
    assert not any(m in sent.lower() for m in MARKERS)
    # Every tool call in the context still has its result.
    items = request.chat_ctx.items
    called = [i.call_id for i in items if isinstance(i, llm.FunctionCall)]
    answered = {i.call_id for i in items if isinstance(i, llm.FunctionCallOutput)}
    assert called and set(called) <= answered
    await session.aclose()


async def test_erasing_a_session_from_the_open_conversation_keeps_its_board_writable(
    runtime: Runtime,
) -> None:
    """The owner erases S1 from S2's own conversation (the web client's Delete): S2's
    stored copies are rewritten under it, and S2 goes on storing its board and steps."""
    first = await first_visit(runtime)
    second = await second_visit(runtime)
    session, model = await resume(runtime, second)

    payload = json.dumps({"session_id": first})
    data = rtc.RpcInvocationData("r", "ada", payload, 5.0, "coach.delete_session")
    answer = json.loads(await invoke("coach.delete_session", session.userdata, data))
    assert answer["deleted"] is True

    model.extend([call("add_insight", text="Racks must be covered."), say("Noted.")])
    await session.run(user_input="They want covered racks.")
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
    state = await runtime.store.get_state(second)
    assert [i["text"] for i in state.data["insights"]][-1] == "Racks must be covered."
    steps = await runtime.store.load_agent_state(second)
    assert any(isinstance(s, llm.ChatMessage) and s.text_content == "Noted." for s in steps)
