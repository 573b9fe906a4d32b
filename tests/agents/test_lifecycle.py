"""Erasing personal data: a session, a person, sessions past retention — each whole, in
one transaction, and nobody else's data touched (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from livekit import rtc
from sqlalchemy import text

from coach.conversation.runtime import Runtime
from coach.surfaces.rpc import invoke
from tests.agents.helpers import repository
from tests.support import raw_sql, update_session

from .helpers import new_session_with_phases
from .test_branching import TABLES, rows_of, visit

ALL_TABLES = ("users", *TABLES)


async def counts(runtime: Runtime) -> dict[str, int]:
    """Rows per table, everyone's."""
    found = {}
    async with raw_sql(repository(runtime)) as conn:
        for table in ALL_TABLES:
            found[table] = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
    return found


async def test_deleting_a_session_erases_every_row_of_it_and_nothing_else(
    runtime: Runtime,
) -> None:
    doomed = await new_session_with_phases(runtime, "ada", 2)
    kept = await new_session_with_phases(runtime, "ada", 1)
    other = await new_session_with_phases(runtime, "bob", 1)
    kept_rows, other_rows = await rows_of(runtime, kept), await rows_of(runtime, other)
    assert all(await rows_of(runtime, doomed))

    assert await runtime.store.delete_session(doomed) is True
    assert await rows_of(runtime, doomed) == {table: [] for table in TABLES}
    assert await rows_of(runtime, kept) == kept_rows
    assert await rows_of(runtime, other) == other_rows
    assert await runtime.store.delete_session(doomed) is False  # already gone


async def test_deleting_a_person_erases_them_and_only_them(runtime: Runtime) -> None:
    ada = [await new_session_with_phases(runtime, "ada", n) for n in (1, 2)]
    bob = await new_session_with_phases(runtime, "bob", 1)
    bob_rows = await rows_of(runtime, bob)
    before = await counts(runtime)

    assert await runtime.store.delete_user("ada") == 2
    assert await runtime.store.find_user("ada") is None
    for session_id in ada:
        assert await rows_of(runtime, session_id) == {table: [] for table in TABLES}
    assert await rows_of(runtime, bob) == bob_rows
    after = await counts(runtime)
    assert after["users"] == before["users"] - 1 and after["sessions"] == 1
    assert await runtime.store.delete_user("ada") is None


async def test_prune_erases_what_is_past_retention_and_a_dry_run_nothing(
    runtime: Runtime,
) -> None:
    old = await new_session_with_phases(runtime, "ada", 1)
    done = await new_session_with_phases(runtime, "bob", 1)
    await update_session(runtime.store, done, status="completed")
    fresh = await new_session_with_phases(runtime, "cy", 1)
    later = datetime.now(UTC) + timedelta(days=1)  # everything so far is "older"

    dry = await runtime.store.prune_sessions(older_than=later, status="completed", dry_run=True)
    assert [s.id for s in dry] == [done] and await runtime.store.get_session(done) is not None

    completed = await runtime.store.prune_sessions(older_than=later, status="completed")
    assert [s.id for s in completed] == [done] and await runtime.store.get_session(done) is None
    assert await runtime.store.get_session(old) is not None

    cutoff = (await runtime.store.get_session(fresh)).updated_at  # type: ignore[union-attr]
    pruned = await runtime.store.prune_sessions(older_than=cutoff)
    assert [s.id for s in pruned] == [old]  # updated before the cutoff; fresh is not
    assert await runtime.store.get_session(fresh) is not None
    assert await rows_of(runtime, old) == {table: [] for table in TABLES}


async def test_delete_session_rpc_is_owner_only_and_spares_the_open_session(
    runtime: Runtime,
) -> None:
    doomed = await new_session_with_phases(runtime, "ada", 1)
    foreign = await new_session_with_phases(runtime, "bob", 1)
    session, _ = await visit(runtime)

    async def delete(session_id: str, caller: str = "ada") -> Any:
        data = rtc.RpcInvocationData(
            "req", caller, json.dumps({"session_id": session_id}), 5.0, "coach.delete_session"
        )
        return json.loads(
            await invoke("coach.delete_session", session.userdata, data, session=session)
        )

    for session_id, caller, code in [(doomed, "mallory", 403), (foreign, "ada", 404)]:
        with pytest.raises(rtc.RpcError) as refused:
            await delete(session_id, caller)
        assert refused.value.code == code
    assert await runtime.store.get_session(foreign) is not None

    assert await delete(doomed) == {"session_id": doomed, "deleted": True}
    assert await runtime.store.get_session(doomed) is None
    with pytest.raises(rtc.RpcError) as gone:
        await delete(doomed)
    assert gone.value.code == 404

    open_here = await new_session_with_phases(runtime, "ada", 1)
    session.userdata.session_id = open_here  # as if this conversation had it open
    with pytest.raises(rtc.RpcError) as busy:
        await delete(open_here)
    assert busy.value.code == 409 and await runtime.store.get_session(open_here) is not None
    session.userdata.session_id = None
    await session.aclose()
