"""Phase outputs: the COALESCE upsert of SPEC §4.2 and ordering."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from coach.errors import InvalidWrite, SessionNotFound
from coach.persistence import Repository

OpenRepo = Callable[..., Awaitable[Repository]]


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("phase-user")
    return (await repo.create_session(user.id)).id


async def test_completed_update_without_prompts_keeps_them(repo: Repository) -> None:
    sid = await _session(repo)
    running = await repo.save_phase_output(
        sid, "empathize", "Empathize", "running", system_prompt="SYS", user_input="USER"
    )
    completed = await repo.save_phase_output(
        sid, "empathize", "Empathize", "completed", output="insights"
    )

    assert completed.id == running.id
    assert completed.status == "completed"
    assert (completed.system_prompt, completed.user_input) == ("SYS", "USER")
    assert completed.output == "insights"
    assert completed.created_at == running.created_at
    assert completed.updated_at >= running.updated_at
    [stored] = await repo.get_phase_outputs(sid)
    assert stored == completed


async def test_status_and_error_always_take_the_new_value(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.save_phase_output(sid, "define", "Define", "running", system_prompt="S")
    failed = await repo.save_phase_output(sid, "define", "Define", "failed", error="LLM timeout")
    assert (failed.status, failed.error) == ("failed", "LLM timeout")

    retried = await repo.save_phase_output(sid, "define", "Define", "running")
    assert (retried.status, retried.error) == ("running", None)
    assert retried.system_prompt == "S"

    done = await repo.save_phase_output(sid, "define", "Define", "completed", output="POV")
    again = await repo.save_phase_output(sid, "define", "Define", "completed")
    assert done.output == again.output == "POV"


async def test_new_prompts_replace_old_ones(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.save_phase_output(sid, "ideate", "Ideate", "running", system_prompt="v1")
    rerun = await repo.save_phase_output(sid, "ideate", "Ideate", "running", system_prompt="v2")
    assert rerun.system_prompt == "v2"


async def test_outputs_are_ordered_by_created_at(repo: Repository) -> None:
    sid = await _session(repo)
    for phase in ("challenge", "empathize", "define"):
        await repo.save_phase_output(sid, phase, phase, "running")
    await repo.save_phase_output(sid, "challenge", "challenge", "completed", output="c")
    outputs = await repo.get_phase_outputs(sid)
    assert [o.phase_id for o in outputs] == ["challenge", "empathize", "define"]


async def test_ties_in_created_at_are_stable(database_url: str, open_repo: OpenRepo) -> None:
    fixed = datetime(2030, 1, 1, tzinfo=UTC)
    repo = await open_repo(database_url, clock=lambda: fixed)
    sid = await _session(repo)
    for phase in ("a", "b", "c"):
        await repo.save_phase_output(sid, phase, phase, "running")
    first = [o.phase_id for o in await repo.get_phase_outputs(sid)]
    assert sorted(first) == ["a", "b", "c"]
    assert [o.phase_id for o in await repo.get_phase_outputs(sid)] == first
    assert all(o.created_at == fixed for o in await repo.get_phase_outputs(sid))


async def test_outputs_without_prompts(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.save_phase_output(
        sid, "strategy", "Strategy", "running", system_prompt="big", user_input="big too"
    )
    [light] = await repo.get_phase_outputs(sid, include_prompts=False)
    assert (light.system_prompt, light.user_input) == (None, None)
    assert light.phase_id == "strategy"


async def test_bad_phase_status_writes_nothing(repo: Repository) -> None:
    sid = await _session(repo)
    with pytest.raises(InvalidWrite, match="Invalid phase status: done"):
        await repo.save_phase_output(sid, "define", "Define", "done")
    assert await repo.get_phase_outputs(sid) == []


async def test_phase_output_of_unknown_session(repo: Repository) -> None:
    with pytest.raises(SessionNotFound):
        await repo.save_phase_output("missing", "define", "Define", "running")
