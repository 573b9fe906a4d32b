"""Alembic environment for coach: batch mode on SQLite.

The database URL comes from, in order: a connection handed over by
:mod:`coach.persistence.migrate` (programmatic use), ``config.attributes["url"]``,
``alembic -x url=...``, ``sqlalchemy.url`` in the ini, and finally the settings
(``COACH_DATABASE_URL`` or the embedded SQLite default).
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from coach.persistence.engine import normalize_url
from coach.persistence.schema import HexId, UTCDateTime, metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    url = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        from coach.settings import Settings

        url = Settings().database_url
    return normalize_url(url).render_as_string(hide_password=False)


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    # Migrations stay free of coach imports: our UTC timestamp is a plain timestamptz.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, HexId):
        return "sa.String(length=32)"  # uuid on PostgreSQL: see migration 0004
    return False


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit the migration SQL (``alembic upgrade head --sql``)."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_standalone() -> None:
    from coach.persistence.migrate import tooling_database

    db = tooling_database(_url())
    try:
        await db.run(_run, write=True, what="migrating the database", attempts=1)
    finally:
        await db.dispose()


def run_migrations_online() -> None:
    """Migrate over a connection handed over by the caller, or over one of its own (as
    ``db upgrade`` does: SQLite's foreign keys off while tables are rebuilt)."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    asyncio.run(_run_standalone())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
