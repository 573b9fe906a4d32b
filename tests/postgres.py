"""The test run's PostgreSQL: the server's admin URL, and the migrated databases the
``postgres_url`` fixture hands out, one per test, each with empty tables and no key store.

Cloning the migrated template is what a test's database used to cost: ``CREATE DATABASE
… TEMPLATE`` copies the template's 8 MB of catalogs through the WAL, and with the
``DROP`` after it the server spent ~0.25 s of CPU per test, for ~370 tests a run.
Emptying the tables of a database a test gives back (``TRUNCATE``: new, empty files)
costs about a quarter of that. So :class:`Databases` empties what a test leaves and hands
it to the next — unless the test changed more than rows: it ran DDL (an event trigger in
the template notes every DDL command), or left a connection open. Such a database is
dropped, and the next test gets a new clone.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from coach.persistence import upgrade
from tests.support import keys_url

PG_ADMIN_URL = os.environ.get(
    "COACH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

GUARD = """
CREATE SCHEMA coach_test_guard;
CREATE TABLE coach_test_guard.ddl (tag text NOT NULL);
CREATE FUNCTION coach_test_guard.note() RETURNS event_trigger LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO coach_test_guard.ddl VALUES (tg_tag); END $$;
CREATE EVENT TRIGGER coach_test_guard ON ddl_command_end
    EXECUTE FUNCTION coach_test_guard.note();
"""
"""Installed in the template after its migration: every DDL command run in a clone leaves
a row, so a clone whose schema a test changed is never handed out again."""


def pg_url(database: str) -> str:
    """coach's URL of ``database`` on the test server."""
    url = make_url(PG_ADMIN_URL).set(drivername="postgresql+asyncpg", database=database)
    return url.render_as_string(hide_password=False)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


async def connect(database: str | None = None) -> asyncpg.Connection:
    """An asyncpg connection to ``database`` (the admin database by default); a server
    that cannot be reached fails the test, saying so (the suite never skips it)."""
    url = make_url(PG_ADMIN_URL).set(drivername="postgresql")
    if database is not None:
        url = url.set(database=database)
    try:
        return await asyncpg.connect(url.render_as_string(False), timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {make_url(PG_ADMIN_URL)!r} ({exc}). The "
            "persistence contract suite runs against a real PostgreSQL; start it or point "
            "COACH_TEST_POSTGRES_URL at one.",
            pytrace=False,
        )


async def admin(*statements: str, database: str | None = None) -> None:
    """Run ``statements`` as the admin, on the admin database or on ``database``."""
    conn = await connect(database)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def drop(name: str) -> None:
    """Drop database ``name``, and the key store beside it."""
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    _remove_key_store(name)


class Databases:
    """The migrated databases of one test process (an xdist worker): a template, and the
    emptied clones waiting for the next test."""

    def __init__(self, template: str, version: str, tables: str) -> None:
        self._template = template
        self._version = version
        self._tables = tables
        self._idle: list[str] = []

    @classmethod
    def create(cls) -> Databases:
        """A new template, migrated to the head revision, with the DDL guard installed."""
        template = unique_name("coach_tpl")
        asyncio.run(admin(f'CREATE DATABASE "{template}"'))
        try:
            asyncio.run(upgrade(pg_url(template)))
            version, tables = asyncio.run(_guard(template))
        except BaseException:
            drop(template)
            raise
        return cls(template, version, tables)

    def take(self) -> str:
        """A migrated database with no rows, and no key store yet, for one test."""
        if self._idle:
            return self._idle.pop()
        name = unique_name("coach_test")
        asyncio.run(admin(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"'))
        return name

    def give_back(self, name: str) -> None:
        """Empty ``name`` for the next test, or drop it if its test changed more than rows."""
        if asyncio.run(self._empty(name)):
            _remove_key_store(name)
            self._idle.append(name)
        else:
            drop(name)  # and its key store

    def close(self) -> None:
        for name in [*self._idle, self._template]:
            drop(name)
        self._idle.clear()

    async def _empty(self, name: str) -> bool:
        """Empty every table, as the template's are; ``False`` (nothing emptied) when the
        schema was changed, a connection is still open, or anything fails."""
        conn = await connect(name)
        try:
            others = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if others or await conn.fetchval("SELECT count(*) FROM coach_test_guard.ddl"):
                return False
            async with conn.transaction():
                # New, empty files: not a byte of the last test's rows is left for a test
                # that reads the database's files (the privacy scans), and ids restart.
                await conn.execute(f"TRUNCATE {self._tables} RESTART IDENTITY")
                # A "newer release" that did not change the schema is this row alone.
                await conn.execute("DELETE FROM alembic_version")
                await conn.execute("INSERT INTO alembic_version VALUES ($1)", self._version)
            await conn.execute("SELECT pg_stat_reset()")  # counters a test reads, as new
            return True
        except (asyncpg.PostgresError, OSError):
            return False
        finally:
            await conn.close()


async def _guard(template: str) -> tuple[str, str]:
    """Install :data:`GUARD` in ``template``; its revision, and its tables but the
    revision's, as ``TRUNCATE`` lists them."""
    conn = await connect(template)
    try:
        await conn.execute(GUARD)
        version: str = await conn.fetchval("SELECT version_num FROM alembic_version")
        tables: str = await conn.fetchval(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
            "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
        )
        return version, tables
    finally:
        await conn.close()


def _remove_key_store(name: str) -> None:
    """The SQLite key store :func:`tests.support.keys_url` puts beside database ``name``."""
    store = keys_url(pg_url(name))
    assert store is not None
    path = Path(str(make_url(store).database))
    for file in path.parent.glob(f"{path.name}*"):
        file.unlink(missing_ok=True)
