"""The bench's own PostgreSQL databases leave nothing behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bench.backends import CoachBackend
from bench.measure import key_store, pg_database, pg_url
from sqlalchemy.engine import make_url


async def _a_bench_database_used() -> Path:
    """The key store of a bench database that held a coach repository, once dropped."""
    async with pg_database("keys") as name:
        url = pg_url(name)
        coach = CoachBackend(url)
        await coach.open()  # its user's data key goes to the key store beside it
        await coach.aclose()
        store = key_store(url)
        assert store is not None
        path = Path(str(make_url(store).database))
        assert await asyncio.to_thread(path.exists)
    return path


@pytest.mark.postgres
def test_a_bench_database_takes_its_key_store_with_it() -> None:
    path = asyncio.run(_a_bench_database_used())
    assert list(path.parent.glob(f"{path.name}*")) == []
