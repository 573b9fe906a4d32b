"""What test modules share besides the fixtures of ``conftest.py`` (which no test
imports): the memory secret and keys every test repository uses, the runtime factory's
type, raw SQL on a repository's database, and the writes only tests make directly."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from coach.conversation.runtime import Runtime
from coach.persistence import Repository
from coach.persistence.crypto import MasterKeys
from coach.persistence.engine import create_engine, is_memory
from coach.store import AppendSteps, SessionRecord, Store, UpdateSession

MEMORY_SECRET = b"coach-test-secret-0123456789abcdef"
"""The HMAC key of every test repository's memory steps."""

MASTER_KEY = "coach-test-master-key-0123456789abcdef"
"""The master key of every test repository (``COACH_MASTER_KEY``)."""
MASTER_KEYS = MasterKeys.of(MASTER_KEY)


def keys_url(database_url: str) -> str | None:
    """The key store of a test database: the default beside a SQLite file (``None``), or
    a SQLite file named after a PostgreSQL database (each test database is new)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return None
    return f"sqlite:///{Path(tempfile.gettempdir()) / f'coach-keys-{url.database}.db'}"


def keys_of(database_url: str) -> dict[str, Any]:
    """``open_repository``'s key arguments for a test database."""
    return {"master_keys": MASTER_KEYS, "keys_url": keys_url(database_url)}


def key_env(database_url: str) -> dict[str, str]:
    """The key settings of a test database, for a child process's environment."""
    store = keys_url(database_url)
    return {"COACH_MASTER_KEY": MASTER_KEY, **({"COACH_KEYS_URL": store} if store else {})}


RuntimeFactory = Callable[[], Awaitable[Runtime]]
"""``open_runtime``: opens another runtime on the test's database."""

NOT_IN_MEMORY = pytest.mark.parametrize(
    "database_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
"""For a test under ``tests/persistence/`` about what only a database outside this
process has (files, another process, a newer release's migrations): its
``database_url`` is a SQLite file and PostgreSQL, not the in-memory database."""


@contextlib.asynccontextmanager
async def raw_sql(repo: Repository, *, begin: bool = False) -> AsyncIterator[AsyncConnection]:
    """A connection to ``repo``'s database for raw SQL (in a transaction committed at the
    end with ``begin``), on an engine of its own, closed after."""
    engine = create_engine(repo.database.url, pool_size=1, max_overflow=0)
    try:
        async with engine.begin() if begin else engine.connect() as conn:
            yield conn
    finally:
        await engine.dispose()


async def update_session(store: Store, session_id: str, **fields: Any) -> SessionRecord:
    """Change a session's fields as the recorder does (a batch of one), and read it back."""
    changed = {name: value for name, value in fields.items() if value is not None}
    await store.write_batch([UpdateSession(session_id, changed)])
    found = await store.get_session(session_id)
    assert found is not None, session_id
    return found


async def append_steps(
    store: Store, session_id: str, steps: Sequence[object], *, start: int
) -> int:
    """Store memory steps at ``start, start + 1, ...`` as the recorder does; the count after."""
    await store.write_batch([AppendSteps(session_id, start, tuple(steps))])
    return start + len(steps)


def in_memory(url: str | URL) -> sqlite3.Connection:
    """A plain sqlite3 connection to the named in-memory database at ``url``."""
    return sqlite3.connect(f"{make_url(url).database}?vfs=memdb", uri=True)


def sqlite_bytes(url: str | URL) -> bytes:
    """Every byte SQLite keeps of the database at ``url``: the file and the files beside
    it (its WAL), or, in memory, the database's image."""
    if is_memory(url):
        with contextlib.closing(in_memory(url)) as conn:
            return conn.serialize()
    database = Path(str(make_url(url).database))
    return b"".join(
        p.read_bytes() for p in database.parent.iterdir() if p.name.startswith(database.name)
    )


_WAL_AT = text("SELECT file_name, file_offset FROM pg_walfile_name_offset(pg_current_wal_lsn())")


@contextlib.asynccontextmanager
async def wal_kept(repo: Repository) -> AsyncIterator[tuple[str, int] | None]:
    """PostgreSQL: where the WAL is written now — segment and offset — (what
    :func:`stored_bytes` reads from), with that WAL kept until the block ends; SQLite:
    ``None`` (its WAL is a file beside it).

    A checkpoint recycles the segments before it — :func:`stored_bytes`' own, another
    test's beside it, the server's —, and a recycled segment was skipped unread, or
    vanished while it was read. A temporary replication slot, reserving the WAL from
    here on, keeps them; it lives as long as the connection holding it, so a test that
    dies leaves none behind."""
    if repo.database.dialect != "postgresql":
        yield None
        return
    async with raw_sql(repo) as conn:
        slot = text("SELECT pg_create_physical_replication_slot(:name, true, true)")
        await conn.execute(slot, {"name": f"coach_test_{uuid.uuid4().hex}"})
        name, offset = (await conn.execute(_WAL_AT)).one()
        await conn.commit()
        yield str(name), int(offset)


async def stored_bytes(repo: Repository, database_url: str, since: tuple[str, int] | None) -> bytes:
    """Every byte the database keeps for ``database_url``: a SQLite file with its WAL, an
    in-memory database's image, or — read raw by the PostgreSQL server as the superuser
    the tests connect as — every table, index and TOAST relation after a checkpoint and
    the WAL written from ``since`` (:func:`wal_kept`) on, and nothing before it, with its
    pages' headers dropped so that a value split over two pages reads whole."""
    if is_memory(database_url):
        return sqlite_bytes(database_url)
    if repo.database.dialect != "postgresql":
        database = Path(str(make_url(database_url).database))
        files = [p for p in database.parent.iterdir() if p.name.startswith(database.name)]
        assert any(p.name.endswith("-wal") for p in files)  # the WAL is read too
        return b"".join(p.read_bytes() for p in files)
    assert since is not None
    read = text("SELECT pg_read_binary_file(CAST(:p AS text), :o, :n)")
    async with raw_sql(repo) as conn:
        await conn.execute(text("CHECKPOINT"))
        end, end_offset = (await conn.execute(_WAL_AT)).one()
        relations = await conn.execute(
            text(
                "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'i', 't') AND n.nspname IN ('public', 'pg_toast') "
                "AND pg_relation_filepath(c.oid) IS NOT NULL"
            )
        )
        paths = list(relations.scalars())
        segments = await conn.execute(
            text("SELECT name, size FROM pg_ls_waldir() WHERE name BETWEEN :a AND :b"),
            {"a": since[0], "b": end},
        )
        listed = sorted(segments.all())
        assert listed[0][0] == since[0], "the WAL since the start is kept (wal_kept)"
        whole = text("SELECT pg_read_binary_file(CAST(:p AS text))")
        chunks = [bytes(await conn.scalar(whole, {"p": path}) or b"") for path in paths]
        wal = []
        for name, size in listed:
            first = since[1] if name == since[0] else 0
            last = end_offset if name == end else size
            start = first - first % _WAL_PAGE  # whole pages: their headers are dropped
            path = f"pg_wal/{name}"
            pages = bytes(await conn.scalar(read, {"p": path, "o": start, "n": last - start}))
            wal.append(_wal_records(pages)[max(0, first - start - _wal_header(pages)) :])
        assert any(wal), "the WAL since the start is read"
        return b"".join(chunks) + b"".join(wal)


_WAL_PAGE = 8192
"""PostgreSQL's WAL page (``XLOG_BLCKSZ``)."""


def _wal_header(page: bytes) -> int:
    """The length of a WAL page's header: long (40 bytes) on a segment's first page, where
    ``xlp_info`` has ``XLP_LONG_HEADER``, short (24) elsewhere."""
    return 40 if int.from_bytes(page[2:4], "little") & 0x0002 else 24


def _wal_records(pages: bytes) -> bytes:
    """WAL pages read from a page's start, each page's header dropped: a record that goes
    on over a page's end reads on unbroken, as the server reads it back, so a word
    written across the boundary is found."""
    return b"".join(
        page[_wal_header(page) :]
        for page in (pages[at : at + _WAL_PAGE] for at in range(0, len(pages), _WAL_PAGE))
    )
