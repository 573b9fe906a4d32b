"""Branching a session by voice: "let's go back to Define and try another direction".

A branch holds the session exactly as it was when the phase ended; the branch and the
original then go their own ways, each resumable; the original's rows never change."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from livekit import rtc
from livekit.agents import AgentSession, llm
from livekit.agents.voice.run_result import RunResult
from sqlalchemy import text

from coach.agents import DesignStrategist
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.errors import BranchRefused, NotIdentified, SessionNotFound
from coach.store import ClosePhase
from coach.surfaces.rpc import invoke
from coach.testing import ScriptedLLM, call, say
from tests.agents.helpers import repository
from tests.support import raw_sql

from .helpers import CHALLENGE, new_session_with_phases, start

OWNER = "ada"
TABLES = ("sessions", "phase_outputs", "session_conversations", "agent_steps",
          "session_state", "state_deltas")  # fmt: skip


async def rows_of(runtime: Runtime, session_id: str) -> dict[str, list[Any]]:
    """Every stored row of a session, table by table, as the database returns them."""
    found: dict[str, list[Any]] = {}
    repo = repository(runtime)
    async with raw_sql(repo) as conn:
        for table in TABLES:
            key = "id" if table == "sessions" else "session_id"
            result = await conn.execute(
                text(f"SELECT * FROM {table} WHERE {key} = :id ORDER BY 1, 2"),
                {
                    "id": session_id
                    if repository(runtime).database.dialect == "sqlite"
                    else _uuid(session_id)
                },
            )
            found[table] = [tuple(row) for row in result]
    return found


def _uuid(hex_id: str) -> str:
    return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"


async def visit(runtime: Runtime) -> tuple[AgentSession[UserData], ScriptedLLM]:
    model = ScriptedLLM([say("Welcome back, Ada!")])
    return await start(runtime, model, identity=OWNER), model


async def branch_by_voice(
    runtime: Runtime, source_id: str, phase_id: str
) -> tuple[AgentSession[UserData], ScriptedLLM, str]:
    """A visit that selects ``source_id`` and asks to branch it from ``phase_id``."""
    session, model = await visit(runtime)
    model.extend([call("select_session_to_load", session_id=source_id), say("Which phase?")])
    await session.run(user_input="My onboarding session, please")
    model.extend([call("branch_session", phase_id=phase_id), say("We are back after that phase.")])
    result: RunResult[None] = await session.run(
        user_input="Let's go back to Define and try another direction"
    )
    output = result.expect.next_event(type="function_call_output").event().item
    assert not output.is_error, output.output
    branch_id = session.userdata.session_id
    assert branch_id is not None and branch_id != source_id
    return session, model, branch_id


async def add_ideas(session: AgentSession[UserData], model: ScriptedLLM, *titles: str) -> None:
    for title in titles:
        model.extend([call("add_idea", title=title, description=f"{title}, sketched."), say("Ok.")])
        await session.run(user_input=f"What about {title}?")


async def resume(runtime: Runtime, session_id: str) -> AgentSession[UserData]:
    session, model = await visit(runtime)
    model.extend([call("select_session_to_load", session_id=session_id), say("Say continue.")])
    await session.run(user_input="that one")
    model.extend([call("load_selected_session"), say("Welcome back.")])
    await session.run(user_input="continue")
    return session


async def closed(runtime: Runtime, session: AgentSession[UserData]) -> None:
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 10)


async def test_a_branch_from_define_holds_the_session_as_it_was_then(runtime: Runtime) -> None:
    source = await new_session_with_phases(runtime, OWNER, 3)  # + the challenge: four phases
    before = await rows_of(runtime, source)

    session, _, branch_id = await branch_by_voice(runtime, source, "define")
    userdata = session.userdata
    assert isinstance(session.current_agent, DesignStrategist)
    assert (userdata.current_phase_id, userdata.completed_phases) == (
        "ideate",
        ["challenge", "empathize", "define"],
    )
    await closed(runtime, session)

    record = await runtime.store.get_session(branch_id)
    assert record is not None
    assert (record.parent_session_id, record.branched_from_phase) == (source, "define")
    assert (record.user_id, record.design_challenge) == (
        (await runtime.store.get_session(source)).user_id,  # type: ignore[union-attr]
        CHALLENGE,
    )
    original = {o.phase_id: o for o in await runtime.store.get_phase_outputs(source)}
    outputs = await runtime.store.get_phase_outputs(branch_id)
    # The three copied, then ideate: started anew in the branch (the original's is done).
    assert [(o.phase_id, o.status) for o in outputs] == [
        ("challenge", "completed"),
        ("empathize", "completed"),
        ("define", "completed"),
        ("ideate", "running"),
    ]
    copied = outputs[:3]
    for o in copied:  # prompts kept
        assert (o.system_prompt, o.output) == (
            original[o.phase_id].system_prompt,
            original[o.phase_id].output,
        )
    said = [m.content for m in await runtime.store.get_session_conversation(branch_id)]
    assert "My thoughts on define: observation 2" in said  # define's turn, whole
    assert "My thoughts on ideate: observation 3" not in said  # ideate is not in it
    # The branch point is a whole turn: the copied steps (the branch's first ones, the
    # same items as the source's) end with the reply that ended define's turn, every call
    # has its output, and every step verifies as the branch's own.
    source_steps = cast(list[llm.ChatItem], await runtime.store.load_agent_state(source))
    branch_steps = cast(list[llm.ChatItem], await runtime.store.load_agent_state(branch_id))
    same = [a.id == b.id for a, b in zip(branch_steps, source_steps, strict=False)]
    turn_steps = branch_steps[: same.index(False) if False in same else len(same)]
    assert 0 < len(turn_steps) < len(source_steps)
    calls = {s.call_id for s in turn_steps if isinstance(s, llm.FunctionCall)}
    assert calls == {s.call_id for s in turn_steps if isinstance(s, llm.FunctionCallOutput)}
    last = turn_steps[-1]
    assert isinstance(last, llm.ChatMessage) and last.role == "assistant"
    assert last.text_content == "Phase 2 done."  # define's reply, in the helper's words
    assert await rows_of(runtime, source) == before  # the original is untouched


async def test_branch_and_original_go_their_own_ways_and_each_resumes(runtime: Runtime) -> None:
    source = await new_session_with_phases(runtime, OWNER, 3)
    session, model, branch_id = await branch_by_voice(runtime, source, "define")
    await add_ideas(session, model, "Demo mode", "Trust badges")
    await closed(runtime, session)

    original = await resume(runtime, source)
    assert original.userdata.current_phase_id == "strategy"
    await add_ideas(original, original.llm, "Bank-free start")  # type: ignore[arg-type]
    await closed(runtime, original)

    branch_state = await runtime.store.get_state(branch_id)
    source_state = await runtime.store.get_state(source)
    assert [i["title"] for i in branch_state.data["ideas"]] == ["Demo mode", "Trust badges"]
    assert [i["title"] for i in source_state.data["ideas"]] == ["Bank-free start"]

    again = await resume(runtime, branch_id)
    assert again.userdata.current_phase_id == "ideate"
    assert [i["title"] for i in again.userdata.state.data["ideas"]] == ["Demo mode", "Trust badges"]
    restored = [m.text_content for m in again.current_agent.chat_ctx.messages()]
    assert "What about Trust badges?" in restored and "What about Bank-free start?" not in restored
    await closed(runtime, again)


async def test_a_branch_of_a_branch_and_the_tree_in_the_listing(runtime: Runtime) -> None:
    source = await new_session_with_phases(runtime, OWNER, 3)
    first, model, branch_id = await branch_by_voice(runtime, source, "define")
    await closed(runtime, first)
    second, _, twig_id = await branch_by_voice(runtime, branch_id, "empathize")
    assert second.userdata.current_phase_id == "define"
    await closed(runtime, second)
    twig = await runtime.store.get_session(twig_id)
    assert twig is not None and (twig.parent_session_id, twig.branched_from_phase) == (
        branch_id,
        "empathize",
    )

    listing, model = await visit(runtime)
    offered = model.requests[0].system_prompt
    lines = [line for line in offered.splitlines() if "session_id" in line]
    assert [line.strip()[:40] for line in lines] == [
        f"- session_id {source}"[:40],
        f"- ↳ branch of {source} from Define"[:40],
        f"- ↳ branch of {branch_id} from Empathize"[:40],
    ]
    assert lines[2].startswith("    - ") and lines[1].startswith("  - ")
    await listing.aclose()


@pytest.mark.parametrize(
    ("phase_id", "words"),
    [
        ("ideate", "Ideate is not completed yet"),
        ("nonsense", "There is no phase called 'nonsense'"),
        ("evaluation", "is not completed yet"),
    ],
)
async def test_refusals_are_plain_words_and_change_nothing(
    runtime: Runtime, phase_id: str, words: str
) -> None:
    source = await new_session_with_phases(runtime, OWNER, 1)
    before = await rows_of(runtime, source)
    session, model = await visit(runtime)
    model.extend([call("select_session_to_load", session_id=source), say("Which phase?")])
    await session.run(user_input="My onboarding session")
    model.extend([call("branch_session", phase_id=phase_id), say("That will not work.")])
    result: RunResult[None] = await session.run(user_input=f"Go back to {phase_id}")
    refused = result.expect.next_event(type="function_call_output").event().item
    assert refused.is_error and words in refused.output, refused.output
    assert session.userdata.session_id is None
    await closed(runtime, session)
    assert len(await runtime.store.get_user_sessions(session.userdata.user_id)) == 1  # type: ignore[arg-type]
    assert await rows_of(runtime, source) == before


async def test_someone_elses_session_is_not_found_whatever_the_phase(runtime: Runtime) -> None:
    foreign = await new_session_with_phases(runtime, "bob", 3)
    userdata = runtime.new_userdata(identity=OWNER)
    userdata.user_id = (await runtime.store.get_or_create_user(OWNER)).id
    for phase in ("define", "nonsense"):
        with pytest.raises(SessionNotFound):
            await userdata.branch(foreign, phase)
    with pytest.raises(SessionNotFound):
        await userdata.branch("f" * 32, "define")
    assert len(await runtime.store.get_user_sessions(userdata.user_id)) == 0


async def test_no_session_is_read_loaded_or_branched_for_no_one(runtime: Runtime) -> None:
    # Without a user id a read would not be filtered by owner: a coach error refuses it,
    # whatever the interpreter's flags (python -O drops an assert).
    foreign = await new_session_with_phases(runtime, "bob", 3)
    userdata = runtime.new_userdata(identity=OWNER)
    for attempt in (
        userdata.owned_session(foreign),
        userdata.load_state(foreign),
        userdata.branch(foreign, "define"),
    ):
        with pytest.raises(NotIdentified):
            await attempt
    assert userdata.session_id is None and userdata.resumed is None


@pytest.mark.parametrize("where", [{"phase_id": "define"}, {"before": "observation"}])
async def test_the_tool_reads_the_session_with_the_users_id_by_phase_or_by_words(
    runtime: Runtime, where: dict[str, str]
) -> None:
    foreign = await new_session_with_phases(runtime, "bob", 3)
    session, model = await visit(runtime)
    # Only select_session_to_load marks a session, and it reads with the user's id; the
    # branch reads again with it, whatever put the id there.
    session.userdata.pending_session_id = foreign
    model.extend([call("branch_session", **where), say("No such session.")])
    result: RunResult[None] = await session.run(user_input="Go back in that session")
    output = result.expect.next_event(type="function_call_output").event().item
    assert output.is_error and output.output == "No such session. Use an id identify_user listed."
    assert session.userdata.session_id is None
    await closed(runtime, session)
    bob = await runtime.store.find_user("bob")
    assert bob is not None and len(await runtime.store.get_user_sessions(bob.id)) == 1


async def test_the_last_phase_cannot_be_branched(runtime: Runtime) -> None:
    source = await new_session_with_phases(runtime, OWNER, 4)
    with pytest.raises(BranchRefused, match="nothing after it"):
        # (the evaluation is completed by hand: the helper stops before it)
        await runtime.store.save_phase_output(source, "evaluation", "Evaluation", "completed")
        await _close_by_hand(runtime, source, "evaluation")
        await runtime.store.branch_session(source, "evaluation")


async def _close_by_hand(runtime: Runtime, session_id: str, phase_id: str) -> None:
    count = await runtime.store.agent_step_count(session_id)
    step = (await runtime.store.get_state(session_id)).step
    await runtime.store.write_batch([ClosePhase(session_id, phase_id, count, step, {})])


async def test_the_room_branches_through_rpc_with_the_owner_rules(runtime: Runtime) -> None:
    source = await new_session_with_phases(runtime, OWNER, 3)
    foreign = await new_session_with_phases(runtime, "bob", 3)
    session, _ = await visit(runtime)

    async def branch(session_id: str, phase_id: str, caller: str = OWNER) -> Any:
        payload = json.dumps({"session_id": session_id, "phase_id": phase_id})
        data = rtc.RpcInvocationData("req", caller, payload, 5.0, "coach.branch_session")
        return json.loads(
            await invoke("coach.branch_session", session.userdata, data, session=session)
        )

    for session_id, phase_id, code in [
        (foreign, "define", 404),
        ("nonsense", "define", 404),
        (source, "ideate-ish", 409),
        (source, "strategy", 409),
        (source, "define", 403),  # (another caller)
    ]:
        with pytest.raises(rtc.RpcError) as refused:
            await branch(session_id, phase_id, caller="mallory" if code == 403 else OWNER)
        assert refused.value.code == code
    answer = await branch(source, "define")
    listed = await invoke(
        "coach.list_sessions",
        session.userdata,
        rtc.RpcInvocationData("req", OWNER, "{}", 5.0, "coach.list_sessions"),
    )
    tree = {s["id"]: s for s in json.loads(listed)["sessions"]}
    branched = tree[answer["session_id"]]
    assert (branched["parent_session_id"], branched["branched_from_phase"]) == (source, "define")
    assert tree[source]["parent_session_id"] is None
    assert (answer["parent_session_id"], answer["branched_from_phase"]) == (source, "define")
    assert (answer["agent"], answer["next_phase_id"]) == ("strategist", "ideate")
    assert session.userdata.session_id == answer["session_id"]
    assert isinstance(session.current_agent, DesignStrategist)
    await closed(runtime, session)
