"""The contract suite's backends: every ``database_url`` test here runs on a SQLite file,
on the in-memory database :func:`coach.testing.memory_store` opens, and on PostgreSQL —
but for the tests marked :data:`tests.support.NOT_IN_MEMORY`."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL: a SQLite file, an in-memory database, PostgreSQL."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url
