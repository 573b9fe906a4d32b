"""Owner-only reads put the owner in the query: a foreign session id reads no row, with
the same statement as a missing one, so neither its existence nor its cost leaks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from coach.errors import SessionNotFound
from coach.persistence import Repository
from coach.store import PhaseDone

MISSING = "0" * 32


@contextmanager
def statements(repo: Repository) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the repository executes meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(repo.database.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(repo.database.sync_engine, "before_cursor_execute", record)


def sessions_reads(seen: list[tuple[str, Any]]) -> list[str]:
    return [s for s, _ in seen if re.search(r"FROM sessions\b", s)]


async def two_people(repo: Repository) -> tuple[str, str, str]:
    ada = await repo.get_or_create_user("ada")
    bob = await repo.get_or_create_user("bob")
    done = PhaseDone("challenge", "Design challenge", "prompt", "Checkout", "Checkout")
    session = await repo.create_session(bob.id, "Checkout", first_phase=done)
    return ada.id, bob.id, session.id


async def test_a_foreign_session_reads_no_row_with_the_statement_of_a_missing_one(
    repo: Repository,
) -> None:
    ada, bob, bobs = await two_people(repo)
    with statements(repo) as foreign:
        assert await repo.get_session(bobs, user_id=ada) is None
    with statements(repo) as missing:
        assert await repo.get_session(MISSING, user_id=ada) is None
    assert sessions_reads(foreign) == sessions_reads(missing) != []
    assert all("user_id" in s for s in sessions_reads(foreign))
    found = await repo.get_session(bobs, user_id=bob)
    assert found is not None and found.id == bobs


@pytest.mark.parametrize("session", ["foreign", "missing"])
async def test_resume_asks_for_the_owner_in_the_query(repo: Repository, session: str) -> None:
    ada, _, bobs = await two_people(repo)
    with statements(repo) as seen, pytest.raises(SessionNotFound):
        await repo.resume_session(bobs if session == "foreign" else MISSING, user_id=ada)
    (read,) = sessions_reads(seen)
    assert "user_id" in read.split("WHERE", 1)[1]
