"""Run the Alembic migrations programmatically (``python -m coach db upgrade`` uses this).

Usage::

    from coach.persistence.migrate import upgrade, upgrade_sync
    await upgrade("postgresql+asyncpg://coach@db/coach")   # inside an event loop
    upgrade_sync("sqlite:///coach.db")                      # from plain sync code

The migration scripts and ``alembic.ini`` are found with
:func:`coach._resources.resource_path`, so this works in a checkout and from a wheel.
On PostgreSQL the upgrade holds an advisory lock, so workers (or compose's ``migrate``
service and a worker) that migrate at the same time run one after the other; on SQLite
the write lock does the same.

A database already at the newest revision — every start of a surface but the first
after a release — is recognised without Alembic (:func:`_at_head`: one query, and the
revision ids read from the migration scripts' text), since importing Alembic costs more
CPU than the rest of ``sessions list``. Anything else goes through Alembic as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection

from .._resources import resource_path
from ..errors import ConfigError
from .engine import Database, normalize_url, require_shared
from .keystore import HeldKeys, Vault
from .schema import metadata

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "require_current",
    "schema_diff",
    "tooling_database",
    "upgrade",
    "upgrade_sync",
]

logger = logging.getLogger("coach.persistence")

_ADVISORY_LOCK_KEY: Final = 0x636F616368  # "coach"


def alembic_config(url: str | URL | None = None, *, secret: bytes | None = None) -> Config:
    """Return the Alembic config of the shipped migrations, optionally bound to ``url``.

    The URL travels in ``config.attributes`` (not the ini file), so passwords with
    ``%`` need no escaping; so does ``secret``, the memory-step HMAC key that a
    migration converting stored steps needs (without it, the settings' key is used).
    """
    from alembic.config import Config

    config = Config(str(resource_path("alembic.ini")))
    config.set_main_option("script_location", str(resource_path("migrations")))
    if url is not None:
        config.attributes["url"] = normalize_url(url).render_as_string(hide_password=False)
    if secret is not None:
        config.attributes["memory_secret"] = secret
    return config


def head_revision() -> str | None:
    """Return the newest revision of the shipped migrations."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


_REVISION = re.compile(r"^(down_revision|revision)\b[^=\n]*=\s*(None|\"[^\"]*\"|'[^']*')", re.M)


@functools.cache
def scripted_head() -> str | None:
    """The newest revision, read from the migration scripts' text without Alembic; None
    when the scripts are not one plain chain this reading is sure of (then Alembic
    decides). ``head_revision`` is the authority; the tests hold the two equal."""
    links: dict[str, str | None] = {}
    for script in sorted((resource_path("migrations") / "versions").glob("*.py")):
        pairs = [(m[1], m[2]) for m in _REVISION.finditer(script.read_text("utf-8"))]
        found = dict(pairs)
        if sorted(found) != ["down_revision", "revision"] or len(pairs) != 2:
            return None
        if found["revision"] == "None":
            return None
        down = found["down_revision"]
        links[found["revision"][1:-1]] = None if down == "None" else down[1:-1]
    heads = set(links) - set(links.values())
    return heads.pop() if len(heads) == 1 else None


def _at_head(connection: Connection) -> bool:
    """True when the database is at the newest revision (read without Alembic)."""
    head = scripted_head()
    return head is not None and _current(connection) == head


def _upgrade(
    connection: Connection, url: str | URL, secret: bytes | None, keys: object, revision: str
) -> bool:
    """Migrate under the lock; False (and nothing done) when a newer release migrated the
    database past every revision this release knows."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
    if revision == "head" and _at_head(connection):
        return True
    from alembic import command

    current = _current(connection)
    if current is not None and current not in _known_revisions():
        return False
    config = alembic_config(url, secret=secret)
    config.attributes["connection"] = connection
    if keys is not None:
        config.attributes["keys"] = keys
    command.upgrade(config, revision)
    return True


def _user_ids(connection: Connection) -> list[str]:
    if not inspect(connection).has_table("users"):
        return []
    ids = connection.execute(text("SELECT id FROM users")).scalars()
    return [str(user_id).replace("-", "") for user_id in ids]


def tooling_database(url: str | URL) -> Database:
    """A connection of its own for a migration or a check (coach's, or Alembic's own
    command line through ``migrations/env.py``): unbounded in time (a migration may take
    long), and with SQLite's foreign keys off (SQLite asks for a table rebuilt by
    copying, and dropping the old one would cascade). On SQLite it runs in a thread over
    the sqlite3 driver, without SQLAlchemy's asyncio extension: the commands that open
    the database start faster."""
    return Database(
        require_shared(url), pool_size=1, max_overflow=0, timeout=None, foreign_keys=False
    )


async def _held(db: Database, vault: Vault | None, *, create: bool) -> HeldKeys | None:
    """Every stored person's keys, for a migration that seals or opens their data."""
    if vault is None:
        return None

    def user_ids(connection: Connection) -> list[str] | None:
        return None if create and _at_head(connection) else _user_ids(connection)

    ids = await db.run(user_ids, write=False, what="reading the database", attempts=1)
    return None if ids is None else await vault.hold(ids, create=create)


async def upgrade(
    url: str | URL,
    revision: str = "head",
    *,
    secret: bytes | None = None,
    vault: Vault | None = None,
) -> None:
    """Apply the migrations to ``url`` up to ``revision``; idempotent.

    ``secret`` is the memory-step HMAC key (for migrations that re-sign stored steps);
    ``vault`` holds the people's data keys (for the migration that seals their data:
    every stored person gets a key first).

    A database a newer release already migrated is left as it is: this release runs on
    it if that release's migrations kept what it uses (:func:`require_current`).

    Raises:
        StorageError: When the database cannot be reached or a migration fails.
        ConfigError: A newer release migrated it in a way this release cannot use.
    """
    db = tooling_database(url)
    try:
        keys = await _held(db, vault, create=True)

        def migrate(connection: Connection) -> bool:
            return _upgrade(connection, url, secret, keys, revision)

        migrated = await db.run(migrate, write=True, what="migrating the database", attempts=1)
    finally:
        await db.dispose()
    if not migrated:
        await require_current(url)


async def downgrade(url: str | URL, revision: str, *, secret: bytes, vault: Vault) -> None:
    """Undo the migrations after ``revision`` (an operator going back to an older release);
    a migration that sealed personal data opens it again with ``vault``'s keys.

    Raises:
        StorageError: When the database cannot be reached or a migration fails.
    """
    from alembic import command

    db = tooling_database(url)
    try:
        keys = await _held(db, vault, create=False)

        def run(connection: Connection) -> None:
            config = alembic_config(url, secret=secret)
            config.attributes["connection"] = connection
            config.attributes["keys"] = keys
            command.downgrade(config, revision)

        await db.run(run, write=True, what="migrating the database", attempts=1)
    finally:
        await db.dispose()


async def ensure_schema(
    url: str | URL, *, secret: bytes | None = None, vault: Vault | None = None
) -> None:
    """Bring the schema at ``url`` to the newest revision (the embedded-SQLite auto-migrate).

    The same as :func:`upgrade` to ``head``; the caller decides when to use it (the
    worker does for the embedded SQLite default only).
    """
    await upgrade(url, secret=secret, vault=vault)


def upgrade_sync(
    url: str | URL,
    revision: str = "head",
    *,
    secret: bytes | None = None,
    vault: Vault | None = None,
) -> None:
    """:func:`upgrade` for code that runs outside an event loop (CLI, scripts)."""

    async def run() -> None:
        try:
            await upgrade(url, revision, secret=secret, vault=vault)
        finally:
            if vault is not None:
                await vault.aclose()

    asyncio.run(run())


def _current(connection: Connection) -> str | None:
    """The stored revision, as Alembic reads it (None: not migrated), without Alembic but
    for a table of several heads, where Alembic's error says what is wrong."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    stored = [row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version"))]
    if len(stored) <= 1:
        return stored[0] if stored else None
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def current_revision(url: str | URL) -> str | None:
    """Return the revision the database at ``url`` is at (``None`` when unmigrated)."""
    db = tooling_database(url)
    try:
        return await db.run(_current, write=False, what="reading the database", attempts=1)
    finally:
        await db.dispose()


async def require_current(url: str | URL) -> None:
    """Check, before any conversation, that the database is reachable and has the schema
    this release needs.

    That is this release's newest revision — or, during a rolling deploy, a revision of
    a newer release whose migrations were additive: every table and column this release
    uses is there as it expects, and a column added beside them takes a NULL or has a
    default (:func:`incompatibilities`). Workers of the running release then keep taking
    conversations while the new one rolls out.

    Raises:
        StorageError: The database cannot be reached or does not exist.
        ConfigError: It is behind this release (the message names
            ``python -m coach db upgrade``), or a newer release changed it in a way this
            release cannot work with.
    """
    revision = await current_revision(url)
    if revision is not None and revision == scripted_head():
        return
    head = head_revision()
    if revision == head:
        return
    if revision is None or revision in _known_revisions():
        state = "not migrated" if revision is None else f"at revision {revision}"
        raise ConfigError(
            f"The database is {state}; this release needs revision {head}. "
            "Run: python -m coach db upgrade"
        )
    key = (normalize_url(url).render_as_string(hide_password=True), revision)
    found = _VERDICTS.get(key)
    if found is None:
        found = _VERDICTS[key] = incompatibilities(await schema_diff(url))
        if not found:
            logger.warning(
                "the database is at revision %s of a newer release; its schema still has all "
                "this release (%s) uses, so this release runs on it until it is replaced",
                revision,
                head,
            )
    if found:
        raise ConfigError(
            f"The database is at revision {revision} of a newer release, which this release "
            f"({head}) cannot use: {found[0]}"
            + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
            + ". Run the newer release."
        )


_VERDICTS: dict[tuple[str, str], list[str]] = {}
"""What was found about a (database, newer revision) pair: the schema is compared once
per revision, not at every health check."""


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def incompatibilities(diff: list[Any]) -> list[str]:
    """What, in Alembic's differences between this release's models and a database,
    stops this release from working on that database (empty: it can).

    Missing tables, columns, unique indexes and constraints, and columns whose type or
    NULL rule changed, break its statements; a column added beside its own breaks its
    inserts only when it takes no NULL and has no default; and a unique index or a
    constraint added to its tables may refuse what it writes, so that is refused too
    (deploy such a release by stopping the old workers first). Extra tables, plain
    indexes either way and changed defaults do not matter to it.
    """
    found: list[str] = []
    for entry in diff:
        ops = entry if isinstance(entry, list) else [entry]
        for op in ops:
            kind = op[0]
            if kind == "add_table":
                found.append(f"table {op[1].name} is missing")
            elif kind == "add_column":
                found.append(f"column {op[2]}.{op[3].name} is missing")
            elif kind == "remove_column":
                column = op[3]
                if not column.nullable and column.server_default is None:
                    found.append(f"column {op[2]}.{column.name} takes no NULL and has no default")
            elif kind in ("add_index", "remove_index") and op[1].unique:
                missing = "is missing" if kind == "add_index" else "was added"
                found.append(f"unique index {op[1].name} on {op[1].table.name} {missing}")
            elif kind in ("add_constraint", "remove_constraint", "remove_fk"):
                missing = "is missing" if kind == "add_constraint" else "was added"
                table = op[1].table.name
                found.append(f"constraint {op[1].name or '(unnamed)'} on {table} {missing}")
            elif kind == "modify_type":
                found.append(f"column {op[2]}.{op[3]} changed type")
            elif kind == "modify_nullable":  # either way: refused writes, or NULLs read
                found.append(f"column {op[2]}.{op[3]} changed whether it takes NULL")
    return found


def _diff(connection: Connection) -> list[Any]:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def schema_diff(url: str | URL) -> list[Any]:
    """Return Alembic's differences between the tables and the database at ``url``.

    An empty list means the migrated schema and the tables agree (``alembic check``).
    """
    db = tooling_database(url)
    try:
        return await db.run(_diff, write=False, what="reading the database", attempts=1)
    finally:
        await db.dispose()
