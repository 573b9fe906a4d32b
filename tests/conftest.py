"""Shared database fixtures: a real SQLite file and a real PostgreSQL database per test.

* ``blank_sqlite_url`` / ``blank_postgres_url``: an empty database (no schema).
* ``sqlite_url`` / ``postgres_url``: a migrated database of the test's own, with no rows
  (a copy of one migrated SQLite file per test run; a PostgreSQL database cloned from a
  migrated template, or one an earlier test left and :class:`tests.postgres.Databases`
  emptied).
* ``memory_url``: a migrated named in-memory database of its own, with its key store
  beside it, both held for the test (:func:`coach.persistence.inmemory.memory_database`).
* ``database_url`` / ``blank_database_url``: parametrized over ``sqlite`` and
  ``postgres`` (the latter marked ``postgres``); under ``tests/persistence/``,
  ``database_url`` is ``memory`` too (see its ``conftest.py``).
* ``repo``: an open :class:`~coach.persistence.Repository` on ``database_url``.
* ``open_repo``: a factory for more repositories on a URL (closed after the test).
* ``memory_secret``: the HMAC key the repositories above use.
* ``settings``: coach's settings on ``database_url``; ``open_runtime``: a factory of
  runtimes on that database (a restart = a second one); ``runtime``: one open runtime.

PostgreSQL is the server at 127.0.0.1:5432 (override with ``COACH_TEST_POSTGRES_URL``,
an admin URL to its ``postgres`` database). When it cannot be reached the fixtures
FAIL with a message saying so; they never skip.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from coach.conversation.runtime import Runtime
from coach.persistence import Repository, open_repository, upgrade
from coach.persistence.engine import is_memory
from coach.persistence.inmemory import memory_database
from coach.persistence.inmemory import memory_url as new_memory_url
from coach.settings import Settings
from tests.postgres import Databases, admin, drop, pg_url, unique_name
from tests.support import (
    MASTER_KEY,
    MEMORY_SECRET,
    RuntimeFactory,
    in_memory,
    keys_of,
    keys_url,
)


@pytest.fixture(autouse=True)
def _test_master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's settings have the test master key, as its repositories do (and none
    creates a master key in the user's real data directory)."""
    monkeypatch.setenv("COACH_MASTER_KEY", MASTER_KEY)


@pytest.fixture(scope="session")
def _pg_databases() -> Iterator[Databases]:
    """This test process's migrated PostgreSQL template and the databases cloned from it."""
    databases = Databases.create()
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file per test run that per-test files copy."""
    path = tmp_path_factory.mktemp("coach-template") / "template.db"
    asyncio.run(upgrade(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture
def blank_sqlite_url(tmp_path: Path) -> str:
    """A SQLite file URL with no schema (the file does not exist yet)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'coach.db'}"


@pytest.fixture
def blank_postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database; dropped after the test."""
    name = unique_name("coach_test")
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    yield pg_url(name)
    drop(name)


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path) -> str:
    """A migrated SQLite file of its own for this test."""
    path = tmp_path / "coach.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
def postgres_url(_pg_databases: Databases) -> Iterator[str]:
    """A migrated PostgreSQL database of its own for this test, with no rows; emptied for
    the next test after, or dropped (:class:`tests.postgres.Databases`)."""
    name = _pg_databases.take()
    yield pg_url(name)
    _pg_databases.give_back(name)


@pytest.fixture
async def memory_url() -> AsyncIterator[str]:
    """A migrated in-memory database of its own for this test (and its key store)."""
    async with memory_database() as url:
        yield url.render_as_string(hide_password=False)


@pytest.fixture
def backup_of(tmp_path: Path) -> Iterator[Callable[[str], Awaitable[str]]]:
    """``await backup_of(url)``: a copy of the (closed) database at ``url``, as a backup
    holds it — the SQLite file, a PostgreSQL database made from it, or an in-memory
    database copied from it (held for the test); dropped after."""
    made: list[str] = []
    held: list[sqlite3.Connection] = []

    async def backup(url: str) -> str:
        parsed = make_url(url)
        if is_memory(parsed):
            kept = new_memory_url()
            held.append(in_memory(kept))
            with closing(in_memory(parsed)) as source:
                source.backup(held[-1])
            return kept.render_as_string(hide_password=False)
        if parsed.get_backend_name() == "sqlite":
            copy = tmp_path / "backup" / "coach.db"
            copy.parent.mkdir()
            with sqlite3.connect(str(parsed.database)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copyfile(str(parsed.database), copy)
            return f"sqlite+aiosqlite:///{copy}"
        name = unique_name("coach_backup")
        await admin(f'CREATE DATABASE "{name}" TEMPLATE "{parsed.database}"')
        made.append(name)
        return pg_url(name)

    yield backup
    for connection in held:
        connection.close()
    for name in made:
        drop(name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL: once a SQLite file, once a PostgreSQL database."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_database_url(request: pytest.FixtureRequest) -> str:
    """An unmigrated database URL: once a SQLite file, once a PostgreSQL database."""
    url: str = request.getfixturevalue(f"blank_{request.param}_url")
    return url


@pytest.fixture
def memory_secret() -> bytes:
    """The HMAC key the test repositories sign memory steps with."""
    return MEMORY_SECRET


@pytest.fixture
async def repo(database_url: str) -> AsyncIterator[Repository]:
    """An open repository on ``database_url``; closed after the test."""
    repository = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    yield repository
    await repository.aclose()


@pytest.fixture
async def open_repo() -> AsyncIterator[Callable[..., Awaitable[Repository]]]:
    """Open more repositories (``await open_repo(url, **kwargs)``); all closed after."""
    opened: list[Repository] = []

    async def _open(url: str, **kwargs: Any) -> Repository:
        kwargs.setdefault("secret", MEMORY_SECRET)
        kwargs = {**keys_of(url), **kwargs}
        repository = await open_repository(url, **kwargs)
        opened.append(repository)
        return repository

    yield _open
    for repository in opened:
        await repository.aclose()


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings on a migrated database (SQLite file and PostgreSQL)."""
    return Settings(
        database_url=database_url,
        secret_key=MEMORY_SECRET.decode(),
        master_key=MASTER_KEY,
        keys_url=keys_url(database_url),
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_shutdown_timeout=5,
    )


@pytest.fixture
async def open_runtime(settings: Settings) -> AsyncIterator[RuntimeFactory]:
    """Open runtimes on the same database (a restart = a second one); all closed after."""
    opened: list[Runtime] = []

    async def factory() -> Runtime:
        runtime = await Runtime.open(settings)
        opened.append(runtime)
        return runtime

    yield factory
    for runtime in opened:
        await runtime.aclose()


@pytest.fixture
async def runtime(open_runtime: RuntimeFactory) -> Runtime:
    return await open_runtime()
