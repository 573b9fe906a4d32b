"""The repository's erase reaches the same person's other sessions, and only theirs: a
later session's quotes are rewritten (steps re-signed, zones moved on with a delta) in
the erase's transaction; another person's rows are left exactly as they were."""

from __future__ import annotations

from datetime import timedelta

import pytest
from livekit.agents import llm
from sqlalchemy import text

from coach.errors import StaleWrite
from coach.persistence import Repository
from coach.state import design
from coach.state.retention import REMOVED
from coach.state.shapes import SearchResult
from coach.state.zones import Action, DeltaSpec
from coach.store import PhaseDone
from tests.support import append_steps, raw_sql

INSIGHT = "Members distrust quimbly lockers"
DONE = PhaseDone("challenge", "Design challenge", "prompt", "x", "x")


def spec(tool: str, **params: str) -> DeltaSpec:
    return DeltaSpec(
        trigger="user_query",
        source="llm",
        delta_type="update",
        path="data.search",
        action=Action(
            type="search" if tool == "search_past_work" else "tool", tool=tool, params=params
        ),
    )


async def person(repo: Repository, identity: str) -> tuple[str, str]:
    """An earlier session with :data:`INSIGHT`, and a later one that found it."""
    user = await repo.get_or_create_user(identity)
    earlier = await repo.create_session(user.id, "Gym lockers", first_phase=DONE)
    data, _ = design.add_insight(design.empty_data(), INSIGHT, phase_id=None)
    await repo.update_data(earlier.id, dict(data), spec("add_insight", text=INSIGHT))
    later = await repo.create_session(user.id, "Bike parking", first_phase=DONE)
    found: list[SearchResult] = [{"kind": "insight", "text": INSIGHT, "session_id": earlier.id}]
    searched, _ = design.search_results(design.empty_data(), "lockers", found)
    assert searched is not None
    await repo.update_data(later.id, dict(searched), spec("search_past_work", query="lockers"))
    steps = [
        llm.ChatMessage(role="user", content=["What about lockers?"]),
        llm.FunctionCall(call_id="c1", name="search_past_work", arguments='{"query": "lockers"}'),
        llm.FunctionCallOutput(
            call_id="c1",
            name="search_past_work",
            output=f"1 match(es):\n- (insight) {INSIGHT}",
            is_error=False,
        ),
    ]
    await append_steps(repo, later.id, steps, start=0)
    return earlier.id, later.id


async def rows(repo: Repository, session_id: str) -> list[str]:
    found = []
    async with raw_sql(repo) as conn:
        for table in ("session_state", "state_deltas", "agent_steps", "phase_outputs"):
            result = await conn.execute(
                text(f"SELECT * FROM {table} WHERE session_id = :id ORDER BY 1, 2"),
                {"id": session_id},
            )
            found += [str(tuple(row)) for row in result]
    return found


@pytest.mark.parametrize("how", ["delete", "prune"])
async def test_an_erase_rewrites_the_persons_later_session_and_no_one_elses(
    repo: Repository, how: str
) -> None:
    earlier, later = await person(repo, "ada")
    _, stranger = await person(repo, "bea")  # the same words, in another person's sessions
    untouched = await rows(repo, stranger)
    live = await repo.get_state(later)  # what a conversation still open on it holds

    if how == "delete":
        assert await repo.delete_session(earlier)
    else:
        session = await repo.get_session(earlier)
        assert session is not None
        cutoff = session.updated_at + timedelta(microseconds=1)
        assert [s.id for s in await repo.prune_sessions(older_than=cutoff)] == [earlier]

    steps = await repo.load_agent_state(later)
    assert len(steps) == 3  # every step still verifies
    said, call, output = steps
    assert isinstance(said, llm.ChatMessage) and said.text_content == "What about lockers?"
    assert isinstance(call, llm.FunctionCall) and call.arguments == f'{{"query": "{REMOVED}"}}'
    assert isinstance(output, llm.FunctionCallOutput) and output.call_id == "c1"
    assert output.output == f"1 match(es):\n- {REMOVED}"
    state = await repo.get_state(later)
    assert state.data["search"] == {"query": None, "results": []}
    assert state.step == live.step + 1  # the data zone moved on, with its delta
    (erased,) = await repo.get_deltas(later, live.step)
    assert (erased.path, erased.action.type, erased.result.count) == ("data.search", "erase", 1)
    # A conversation still open on the later session cannot write the old zones back.
    with pytest.raises(StaleWrite):
        await repo.update_data(later, live.data, spec("add_idea"), expected_step=live.step)
    (search,) = [d for d in await repo.get_deltas(later) if d.action.type == "search"]
    assert search.action.params == {"query": REMOVED}
    assert await rows(repo, stranger) == untouched
