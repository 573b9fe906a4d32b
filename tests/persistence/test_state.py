"""Zoned state and deltas (SPEC §4.5): isolation, atomicity, steps, empty results."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from coach.errors import InvalidWrite, SessionNotFound, StaleWrite, StorageError
from coach.persistence import Repository
from coach.state import Action, DeltaSpec, ResultMeta
from tests.support import raw_sql


def _spec(path: str, **kwargs: Any) -> DeltaSpec:
    fields: dict[str, Any] = {
        "turn_id": "turn-1",
        "trigger": "user_query",
        "source": "llm",
        "actor_id": "strategist",
        "delta_type": "update",
        "path": path,
    }
    fields.update(kwargs)
    return DeltaSpec(**fields)


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("state-user")
    return (await repo.create_session(user.id)).id


async def _raw_zones(repo: Repository, sid: str) -> dict[str, bytes]:
    """The stored (sealed) bytes of each zone, to prove 'unchanged' byte for byte."""
    async with raw_sql(repo) as conn:
        row = (
            await conn.execute(
                text("SELECT data, template, view FROM session_state WHERE session_id = :s"),
                {"s": sid},
            )
        ).one()
    return dict(zip(("data", "template", "view"), map(bytes, row), strict=True))


async def _seed_all_zones(repo: Repository, sid: str) -> None:
    await repo.update_data(sid, {"ideas": [{"title": "Bus buddies"}]}, _spec("data.ideas"))
    await repo.update_template(sid, {"board": "<grid/>", "formation": "grid"}, _spec("template"))
    await repo.update_view(sid, {"agent": "strategist", "stack": ["ideas"]}, _spec("view"))


async def test_fresh_session_has_an_empty_state(repo: Repository) -> None:
    sid = await _session(repo)
    state = await repo.get_state(sid)
    assert (state.step, state.data, state.template, state.view) == (0, {}, {}, {})
    assert (await repo.get_state("unknown")).step == 0
    assert await repo.get_deltas(sid) == []


@pytest.mark.parametrize("zone", ["data", "template", "view"])
async def test_writing_one_zone_leaves_the_others_byte_identical(
    repo: Repository, zone: str
) -> None:
    sid = await _session(repo)
    await _seed_all_zones(repo, sid)
    before = await _raw_zones(repo, sid)
    write = {
        "data": repo.update_data,
        "template": repo.update_template,
        "view": repo.update_view,
    }[zone]

    state, delta = await write(sid, {"changed": zone}, _spec(zone))

    after = await _raw_zones(repo, sid)
    for other in {"data", "template", "view"} - {zone}:
        assert after[other] == before[other]
    assert after[zone] != before[zone]
    assert getattr(state, zone) == {"changed": zone}
    assert state.step == delta.step == 4


async def test_delta_records_why_and_matches_the_state_step(repo: Repository) -> None:
    sid = await _session(repo)
    spec = _spec(
        "data.ideas",
        delta_type="add",
        action=Action(type="tool", tool="add_idea", params={"title": "Bus buddies", "n": 1}),
        result=ResultMeta(count=1, fields=["title"]),
    )
    state, delta = await repo.update_data(sid, {"ideas": ["Bus buddies"]}, spec)
    assert delta.step == state.step == 1
    assert delta.model_dump(exclude={"step"}) == spec.model_dump()
    assert await repo.get_deltas(sid) == [delta]
    assert await repo.get_state(sid) == state


async def test_empty_result_keeps_the_data_zone_and_records_count_zero(repo: Repository) -> None:
    sid = await _session(repo)
    await _seed_all_zones(repo, sid)
    before = await _raw_zones(repo, sid)
    spec = _spec(
        "data.ideas",
        delta_type="update",
        action=Action(type="search", tool="search_ideas", params={"query": "rockets"}),
        result=ResultMeta(count=0),
    )
    state, delta = await repo.add_delta(sid, spec)
    assert await _raw_zones(repo, sid) == before
    assert state.data == {"ideas": [{"title": "Bus buddies"}]}
    assert delta.result.count == 0
    assert state.step == delta.step == 4
    [last] = await repo.get_deltas(sid, since_step=3)
    assert last.result.count == 0 and last.action.tool == "search_ideas"


async def test_steps_strictly_increase_and_since_step_filters(repo: Repository) -> None:
    sid = await _session(repo)
    steps = []
    for i in range(5):
        state, delta = await repo.update_view(sid, {"focus": i}, _spec("view.focus"))
        steps.append((state.step, delta.step))
    await repo.add_delta(sid, _spec("data", result=ResultMeta(count=0)))
    assert steps == [(i, i) for i in range(1, 6)]
    assert [d.step for d in await repo.get_deltas(sid)] == [1, 2, 3, 4, 5, 6]
    assert [d.step for d in await repo.get_deltas(sid, since_step=4)] == [5, 6]


async def test_a_failure_between_zone_and_delta_leaves_neither(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.update_data(sid, {"ideas": ["kept"]}, _spec("data.ideas"))
    before = await _raw_zones(repo, sid)
    # Plant a delta at the next step, so the delta insert fails *after* the zone update.
    session = await repo.get_session(sid)
    assert session is not None
    sealer = await repo.vault.sealer(session.user_id)
    empty = {c: sealer.seal("state_deltas", c, (sid, 2), {}) for c in ("action", "result")}
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            text(
                "INSERT INTO state_deltas (session_id, step, trigger, source, delta_type, path, "
                "action, result, created_at) VALUES (:s, 2, 'system', 'system', 'add', 'x', "
                ":action, :result, CURRENT_TIMESTAMP)"
            ),
            {"s": sid, **empty},
        )
    with pytest.raises(StorageError):
        await repo.update_data(sid, {"ideas": ["lost"]}, _spec("data.ideas"))
    assert await _raw_zones(repo, sid) == before
    assert (await repo.get_state(sid)).step == 1
    assert [d.path for d in await repo.get_deltas(sid)] == ["data.ideas", "x"]


async def test_non_json_zone_is_refused_and_nothing_is_written(repo: Repository) -> None:
    sid = await _session(repo)
    with pytest.raises(InvalidWrite, match="not JSON-serializable"):
        await repo.update_data(sid, {"when": object()}, _spec("data"))
    with pytest.raises(InvalidWrite, match="must be a JSON object"):
        await repo.update_view(sid, ["not", "a", "dict"], _spec("view"))  # type: ignore[arg-type]
    assert (await repo.get_state(sid)).step == 0
    assert await repo.get_deltas(sid) == []


async def test_expected_step_mismatch_is_a_stale_write(repo: Repository) -> None:
    sid = await _session(repo)
    state, _ = await repo.update_data(sid, {"v": 1}, _spec("data"), expected_step=0)
    await repo.update_data(sid, {"v": 2}, _spec("data"), expected_step=state.step)
    with pytest.raises(StaleWrite, match="is at step 2, not 1"):
        await repo.update_data(sid, {"v": "stale"}, _spec("data"), expected_step=1)
    with pytest.raises(StaleWrite):
        await repo.add_delta(sid, _spec("data"), expected_step=0)
    current = await repo.get_state(sid)
    assert (current.step, current.data) == (2, {"v": 2})


async def test_zoned_write_to_unknown_session(repo: Repository) -> None:
    with pytest.raises(SessionNotFound):
        await repo.update_data("missing", {}, _spec("data"))


async def test_state_row_is_created_on_demand(repo: Repository) -> None:
    sid = await _session(repo)
    async with raw_sql(repo, begin=True) as conn:  # a session created before the state existed
        await conn.execute(text("DELETE FROM session_state WHERE session_id = :s"), {"s": sid})
    state, delta = await repo.update_template(sid, {"t": 1}, _spec("template"))
    assert (state.step, delta.step, state.template) == (1, 1, {"t": 1})
