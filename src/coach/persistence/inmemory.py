"""Databases in memory: coach's own repository with no file and no server.

``sqlite://`` is a new, empty database on every connection: the migrations could never
reach the one a repository writes to. A *named* in-memory database — SQLite's ``memdb``
VFS, ``file:/<name>?vfs=memdb`` — is one database for every connection of this process
that opens its name, with SQLite's usual locks (there is no WAL in memory), and it lives
while one of them is open. :func:`memory_database` makes one with the schema of coach's
migrations and holds it, and its key store beside it (:func:`~.keystore.default_keys_url`),
for the block: a repository closed and opened again on it inside the block finds its
data, and nothing is left after it. :func:`coach.testing.memory_store` is the store on one.

The migrations run once per process, into a template database that each new one copies
with SQLite's backup (well under a millisecond, where migrating takes most of a second).
"""

from __future__ import annotations

import atexit
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.engine import URL, make_url

from .keystore import default_keys_url
from .migrate import upgrade

__all__ = ["memory_database", "memory_url"]

_template: sqlite3.Connection | None = None
"""The migrated template, held for the life of the process once made."""


def memory_url() -> URL:
    """The URL of a new named in-memory database (it exists once a connection opens it,
    and is gone when the last one closes)."""
    return make_url(f"sqlite+aiosqlite:///file:/coach-{uuid.uuid4().hex}?vfs=memdb&uri=true")


def _connect(url: URL) -> sqlite3.Connection:
    """A plain sqlite3 connection to the named in-memory database at ``url``."""
    query = "&".join(f"{key}={value}" for key, value in url.query.items() if key != "uri")
    return sqlite3.connect(f"{url.database}?{query}", uri=True, check_same_thread=False)


async def _migrated_template() -> sqlite3.Connection:
    global _template
    if _template is None:
        url = memory_url()
        held = _connect(url)
        try:
            await upgrade(url)
        except BaseException:
            held.close()
            raise
        if _template is None:
            _template = held
            atexit.register(held.close)
        else:  # another task made one meanwhile
            held.close()
    return _template


@asynccontextmanager
async def memory_database(*, migrated: bool = True) -> AsyncIterator[URL]:
    """A new named in-memory database, and its key store, alive until the block ends.

    Args:
        migrated: Give it the schema of coach's migrations; ``False``: empty, as a new
            file is (for :func:`~.migrate.upgrade` or ``create_schema`` to migrate).

    Yields:
        Its URL, for :func:`~coach.persistence.open_repository` (whose default key
        store for it is the one held here).

    Raises:
        StorageError: The migrations failed (the first use in a process runs them).
    """
    url = memory_url()
    held = [_connect(each) for each in (url, default_keys_url(url)) if each is not None]
    try:
        if migrated:
            (await _migrated_template()).backup(held[0])
        yield url
    finally:
        for connection in held:
            connection.close()
