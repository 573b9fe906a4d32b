"""A worker whose database cannot be used reports itself full, so LiveKit sends new
conversations elsewhere; it takes them again once the database is back."""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest
from sqlalchemy.engine import make_url

from coach.surfaces.health import FULL, DatabaseHealth
from coach.surfaces.worker import health, server
from tests.recording.tcp_proxy import TcpProxy

CPU = 0.25  # what the default load function would say


@pytest.mark.postgres
async def test_full_while_the_database_is_unreachable_and_back_after(postgres_url: str) -> None:
    target = make_url(postgres_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    url = target.set(port=proxy.port).render_as_string(False)
    check = DatabaseHealth(lambda: url, lambda _: CPU, interval=0, timeout=2)
    try:
        # LiveKit calls the load function in a thread; so do we.
        assert await asyncio.to_thread(check.load, server) == CPU
        await proxy.cut()
        assert await asyncio.to_thread(check.load, server) == FULL
        assert not check.usable
        await proxy.restore()
        assert await asyncio.to_thread(check.load, server) == CPU
    finally:
        await proxy.aclose()


async def test_an_unmigrated_or_missing_database_is_full(
    blank_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    for url in (blank_database_url, "postgresql+asyncpg://postgres@127.0.0.1:9/nothing"):
        check = DatabaseHealth(functools.partial(str, url), lambda _: CPU, interval=0, timeout=2)
        with caplog.at_level(logging.ERROR, logger="coach.worker"):
            assert await asyncio.to_thread(check.load, server) == FULL
    assert "reporting this worker full" in caplog.text


async def test_the_database_is_asked_at_most_once_per_interval(sqlite_url: str) -> None:
    asked: list[str] = []

    def url() -> str:
        asked.append(sqlite_url)
        return sqlite_url

    check = DatabaseHealth(url, lambda _: CPU, interval=3600, timeout=2)
    for _ in range(5):
        assert await asyncio.to_thread(check.load, server) == CPU
    assert len(asked) == 1


def test_the_worker_reports_its_load_through_the_database_check() -> None:
    assert server.load_fnc == health.load
