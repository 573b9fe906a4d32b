"""The bench's own PostgreSQL databases leave nothing behind, and its hand-off counter
sees coach's database threads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bench.backends import CoachBackend, turn_ops
from bench.measure import count_hand_offs, key_store, pg_database, pg_url, sqlite_url
from bench.text import turns
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


async def test_the_hand_off_counter_sees_each_write_of_coach_s_sqlite_database(
    tmp_path: Path,
) -> None:
    """A turn's ``write_batch`` is one unit on coach's own threads: one hand-off each."""
    coach = CoachBackend(sqlite_url(tmp_path / "c.db"))
    await coach.open()
    try:
        session = await coach.new_session("s")
        with count_hand_offs(asyncio.get_running_loop()) as counts:
            for n, turn in enumerate(turns(1, 3)):
                await coach.repo.write_batch(turn_ops(session.id, 2 * n, turn))
    finally:
        await coach.aclose()
    assert (counts.aiosqlite, counts.executor) == (0, 3)
