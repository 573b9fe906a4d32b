"""Measuring tools shared by the sections of ``bench.core``.

Databases (a temporary SQLite directory, a uniquely named PostgreSQL database dropped
afterwards), storage sizes, statistics over paired runs, a counter of hand-offs from the
event loop to other threads, and an event-loop stall meter.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy.engine import make_url

from coach.persistence.threads import Workers

PG_ADMIN_URL = os.environ.get(
    "COACH_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

# --- databases ---------------------------------------------------------------------------


def pg_url(database: str, driver: str = "postgresql+asyncpg") -> str:
    """The URL of ``database`` on the bench's PostgreSQL server, with ``driver``."""
    url = make_url(PG_ADMIN_URL).set(drivername=driver, database=database)
    return url.render_as_string(hide_password=False)


async def pg_fetchval(statement: str, database: str = "postgres") -> Any:
    """Run one statement on its own connection and return the first value."""
    conn = await asyncpg.connect(pg_url(database, "postgresql"), timeout=10)
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def pg_database(tag: str) -> AsyncIterator[str]:
    """A new empty PostgreSQL database ``coach_bench_<tag>_<random>``; yields its name."""
    name = f"coach_bench_{tag}_{uuid.uuid4().hex[:8]}"
    await pg_fetchval(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await pg_fetchval(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _drop_key_file(name)


MASTER_KEY = "coach-bench-master-key-0123456789abcdef"
"""The master key of every coach repository the bench opens (``COACH_MASTER_KEY``)."""


def key_store(url: str) -> str | None:
    """The key store of a bench database: beside a SQLite file (``None``: the default), or
    a SQLite file named after a PostgreSQL database, as a deployment keeps them apart."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return None
    return f"sqlite:///{_key_file(str(parsed.database))}"


def _key_file(database: str) -> Path:
    return Path(tempfile.gettempdir()) / f"coach-bench-keys-{database}.db"


def _drop_key_file(database: str) -> None:
    """Remove the key store :func:`key_store` names for a PostgreSQL ``database``."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{_key_file(database)}{suffix}").unlink(missing_ok=True)


def key_settings(url: str) -> dict[str, Any]:
    """The key settings of a bench database, for ``Settings``."""
    return {"master_key": MASTER_KEY, "keys_url": key_store(url)}


def coach_keys(url: str) -> dict[str, Any]:
    """``open_repository``'s key arguments for a bench database."""
    from coach.persistence.crypto import MasterKeys

    return {"master_keys": MasterKeys.of(MASTER_KEY), "keys_url": key_store(url)}


@contextlib.contextmanager
def sqlite_dir() -> Iterator[Path]:
    """A temporary directory for SQLite files, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="coach-bench-") as tmp:
        yield Path(tmp)


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy async URL of a SQLite file."""
    return f"sqlite+aiosqlite:///{path}"


# --- storage -----------------------------------------------------------------------------


def sqlite_bytes(path: Path) -> int:
    """Bytes the database file holds after a checkpoint and ``VACUUM`` (no free pages)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(size)
    finally:
        conn.close()


def sqlite_tables(path: Path) -> dict[str, int]:
    """Bytes per table, its indexes included (from ``dbstat``; call after ``VACUUM``)."""
    conn = sqlite3.connect(path)
    try:
        owner = dict(
            conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE name IS NOT NULL")
        )
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            sizes[table] = sizes.get(table, 0) + int(size)
        return sizes
    finally:
        conn.close()


async def pg_bytes(database: str) -> dict[str, int]:
    """``pg_total_relation_size`` of every table in ``public`` after ``VACUUM FULL``.

    Heap, TOAST and indexes count; ``alembic_version`` does not.
    """
    conn = await asyncpg.connect(pg_url(database, "postgresql"), timeout=10)
    try:
        tables = [
            r["tablename"]
            for r in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'alembic_version'"
            )
        ]
        sizes = {}
        for table in tables:
            await conn.execute(f'VACUUM FULL "{table}"')
            sizes[table] = int(await conn.fetchval(f"SELECT pg_total_relation_size('\"{table}\"')"))
        return sizes
    finally:
        await conn.close()


# --- statistics --------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by the nearest-rank method."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(q * len(ordered) + 0.5)) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Ratio:
    """The median of per-pair ratios and their range."""

    median: float
    low: float
    high: float
    pairs: int

    @classmethod
    def of(cls, numerators: Sequence[float], denominators: Sequence[float]) -> Ratio:
        """Pair ``numerators[i]`` with ``denominators[i]`` (runs made back to back)."""
        ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
        return cls(statistics.median(ratios), min(ratios), max(ratios), len(ratios))

    def __str__(self) -> str:
        if self.pairs == 1:
            return f"{self.median:.2f}×"
        return f"{self.median:.2f}× ({self.low:.2f}–{self.high:.2f})"


def verdict(met: bool) -> str:
    """``met`` or a bold ``not met``."""
    return "met" if met else "**not met**"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], right: int = 1) -> str:
    """A markdown table; columns from ``right`` on are right-aligned."""
    align = ["---" if i < right else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- hand-offs from the event loop --------------------------------------------------------


@dataclass
class HandOffs:
    """How often the event loop handed work to another thread."""

    aiosqlite: int = 0
    """Calls queued on an aiosqlite connection's worker thread (``Connection._execute``)."""
    executor: int = 0
    """Calls given to a thread pool: the loop's (``run_in_executor``, so ``to_thread``
    too) or coach's SQLite database's (``Workers.run``)."""

    @property
    def total(self) -> int:
        """Both kinds."""
        return self.aiosqlite + self.executor


@contextlib.contextmanager
def count_hand_offs(loop: asyncio.AbstractEventLoop) -> Iterator[HandOffs]:
    """Count hand-offs while the block runs.

    Every aiosqlite operation (execute, fetch, commit, cursor calls) goes through
    ``Connection._execute``, which puts one call on the connection thread's queue and
    awaits its future: wrapping it counts the queue puts. ``asyncio.to_thread`` and
    ``run_in_executor`` are counted on the running loop, and coach's own pool's units
    (``Workers.run``, which settles the loop's future itself) on its class.
    """
    counts = HandOffs()
    original_execute = aiosqlite.Connection._execute
    original_executor = loop.run_in_executor
    original_run = Workers.run

    @functools.wraps(original_execute)
    async def execute(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counts.aiosqlite += 1
        return await original_execute(self, fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    def run_in_executor(executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        counts.executor += 1
        return original_executor(executor, func, *args)

    @functools.wraps(original_run)
    def run(self: Workers, fn: Callable[[], Any]) -> Any:
        counts.executor += 1
        return original_run(self, fn)

    aiosqlite.Connection._execute = execute  # type: ignore[method-assign]
    loop.run_in_executor = run_in_executor  # type: ignore[method-assign, assignment]
    Workers.run = run  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        aiosqlite.Connection._execute = original_execute  # type: ignore[method-assign]
        del loop.run_in_executor  # back to the class's method
        Workers.run = original_run  # type: ignore[method-assign]


# --- the event loop -----------------------------------------------------------------------


@dataclass
class LoopMeter:
    """A task that sleeps 1 ms and records how late it wakes up (the loop's stalls), and
    the process's resident memory every ``rss_every`` ticks."""

    period: float = 0.001
    rss_every: int = 20
    lateness_ms: list[float] = field(default_factory=list)
    rss_max: int = 0
    _task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        import psutil

        process = psutil.Process()
        n = 0
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.period)
            self.lateness_ms.append((time.perf_counter() - start - self.period) * 1000)
            n += 1
            if n % self.rss_every == 0:
                self.rss_max = max(self.rss_max, process.memory_info().rss)

    async def __aenter__(self) -> LoopMeter:
        gc.collect()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None  # the meter is sent between processes: no task in it

    @property
    def max_ms(self) -> float:
        """The longest stall."""
        return max(self.lateness_ms, default=0.0)
