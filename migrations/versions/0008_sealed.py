"""Encryption at rest: every personal column sealed with its person's data key.

Each column of :data:`coach.persistence.crypto.SEALED` becomes binary and holds its value
sealed (AES-256-GCM) with the key of the person it belongs to; users are found by a keyed
hash of their identity (``users.identity_hash``), and the identity itself is sealed. The
keys live in the key store, apart from the data: :func:`coach.persistence.migrate.upgrade`
makes one for every stored person before this runs and hands them over in
``config.attributes["keys"]``. The downgrade opens every value again (with the same keys).
A table's rows are read whole into memory while they are converted: fine for what coach
stores per deployment today; a database of many gigabytes wants a batched conversion.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 07:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

from coach.errors import ConfigError
from coach.persistence.crypto import SEALED
from coach.persistence.schema import HexId, UTCDateTime

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = {"state_snapshot", "data", "template", "view", "action", "result", "value"}
_KEYS: dict[str, tuple[str, ...]] = {
    "users": ("id",),
    "sessions": ("id",),
    "phase_outputs": ("id",),
    "session_conversations": ("id",),
    "agent_steps": ("session_id", "seq"),
    "session_state": ("session_id",),
    "state_deltas": ("session_id", "step"),
    "persons": ("user_id",),
    "person_deltas": ("user_id", "step"),
}
"""Each table's primary key, by which its sealed values are written back."""
_OWNER = {"users": "id", "sessions": "user_id", "persons": "user_id", "person_deltas": "user_id"}
"""Where a table names its person directly; the others through ``session_id``."""
_NOT_NULL = {"data", "template", "view", "action", "result", "value", "content", "identity"}
_WAS_TEXT: dict[tuple[str, str], sa.types.TypeEngine[Any]] = {
    ("users", "identity"): sa.String(255),
    ("users", "display_name"): sa.String(255),
    ("state_deltas", "actor_id"): sa.String(255),
    ("person_deltas", "actor_id"): sa.String(255),
}


class _NoKeys:
    """The keys of a database with no people: there is nothing to seal."""

    sealers: dict[str, Any] = {}

    def identity_hash(self, identity: str) -> str:
        raise AssertionError("no people, no identities")  # pragma: no cover


def _keys() -> Any:
    keys = context.config.attributes.get("keys")
    if keys is None and op.get_bind().execute(sa.text("SELECT count(*) FROM users")).scalar():
        raise ConfigError(
            "Migration 0008 seals every person's data and needs the key store: run it with "
            "python -m coach db upgrade (with COACH_MASTER_KEY and COACH_KEYS_URL set)."
        )
    return keys if keys is not None else _NoKeys()


def _column(table: str, name: str, *, sealed: bool) -> sa.ColumnClause[Any]:
    if name in ("id", "session_id", "user_id") and not (
        table == "session_conversations" and name == "id"
    ):
        return sa.column(name, HexId())
    if name == "created_at":
        return sa.column(name, UTCDateTime())
    if name in SEALED[table].columns:
        if sealed or (table, name) == ("agent_steps", "payload"):
            return sa.column(name, sa.LargeBinary())
        return sa.column(name, sa.JSON() if name in _JSON else sa.Text())
    return sa.column(name)


def _table(table: str, *, sealed: bool) -> sa.TableClause:
    names = dict.fromkeys((*_KEYS[table], *SEALED[table].row, *SEALED[table].columns))
    if table not in _OWNER:
        names["session_id"] = None
    elif _OWNER[table] not in names:
        names[_OWNER[table]] = None
    return sa.table(table, *(_column(table, name, sealed=sealed) for name in names))


def _owners(conn: sa.Connection) -> dict[str, str]:
    sessions = sa.table("sessions", sa.column("id", HexId()), sa.column("user_id", HexId()))
    return dict(conn.execute(sa.select(sessions.c.id, sessions.c.user_id)).all())


def _read(conn: sa.Connection, table: str, *, sealed: bool) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in conn.execute(sa.select(_table(table, sealed=sealed)))]


def _write(conn: sa.Connection, table: str, rows: list[dict[str, Any]], *, sealed: bool) -> None:
    if not rows:
        return
    target = _table(table, sealed=sealed)
    keys = _KEYS[table]
    columns = SEALED[table].columns
    stmt = (
        target.update()
        .where(*(target.c[key] == sa.bindparam(f"k_{key}") for key in keys))
        .values({column: sa.bindparam(f"v_{column}") for column in columns})
    )
    params = [
        {**{f"k_{key}": row[key] for key in keys}, **{f"v_{c}": row[c] for c in columns}}
        for row in rows
    ]
    conn.execute(stmt, params)


def _retype(table: str, *, to_binary: bool) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table(table) as batch:
        for column in SEALED[table].columns:
            if (table, column) == ("agent_steps", "payload"):
                continue
            old: sa.types.TypeEngine[Any] = _WAS_TEXT.get(
                (table, column), sa.JSON() if column in _JSON else sa.Text()
            )
            new, before = (sa.LargeBinary(), old) if to_binary else (old, sa.LargeBinary())
            kind = "json" if column in _JSON else "text"
            using = (
                f"convert_to({column}::text, 'UTF8')"
                if to_binary
                else ("'{}'::json" if kind == "json" else "''")
            )
            batch.alter_column(
                column,
                type_=new,
                existing_type=before,
                existing_nullable=column not in _NOT_NULL,
                **({"postgresql_using": using} if postgres else {}),
            )


def _convert(conn: sa.Connection, *, seal: bool) -> dict[str, list[dict[str, Any]]]:
    """Every personal value sealed (or opened) in memory, table by table; rows of a person
    without a key (an erase's leftovers in a copy) are left as they are."""
    keys = _keys()
    owners = _owners(conn)
    converted: dict[str, list[dict[str, Any]]] = {}
    for table, spec in SEALED.items():
        out = []
        for row in _read(conn, table, sealed=not seal):
            owner = row[_OWNER[table]] if table in _OWNER else owners.get(row["session_id"])
            sealer = keys.sealers.get(owner)
            if sealer is None:
                continue
            bound = [row[name] for name in spec.row]
            change = sealer.seal if seal else sealer.open
            for column in spec.columns:
                row[column] = change(table, column, bound, row[column])
            out.append(row)
        converted[table] = out
    return converted


def upgrade() -> None:
    conn = op.get_bind()
    keys = _keys()
    users = sa.table(
        "users",
        sa.column("id", HexId()),
        sa.column("identity", sa.String()),
        sa.column("identity_hash", sa.String()),
    )
    hashes = {
        user_id: keys.identity_hash(identity)
        for user_id, identity in conn.execute(sa.select(users.c.id, users.c.identity))
    }
    converted = _convert(conn, seal=True)
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("identity_hash", sa.String(64), nullable=True))
        batch.drop_constraint("uq_users_identity", type_="unique")
    for table in SEALED:
        _retype(table, to_binary=True)
    for table in SEALED:
        _write(conn, table, converted[table], sealed=True)
    if hashes:
        conn.execute(
            users.update()
            .where(users.c.id == sa.bindparam("k_id"))
            .values(identity_hash=sa.bindparam("v_hash")),
            [{"k_id": user_id, "v_hash": value} for user_id, value in hashes.items()],
        )
    with op.batch_alter_table("users") as batch:
        batch.alter_column("identity_hash", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint("uq_users_identity_hash", ["identity_hash"])


def downgrade() -> None:
    conn = op.get_bind()
    converted = _convert(conn, seal=False)
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("uq_users_identity_hash", type_="unique")
        batch.drop_column("identity_hash")
    for table in SEALED:
        _retype(table, to_binary=False)
    for table in SEALED:
        _write(conn, table, converted[table], sealed=False)
    with op.batch_alter_table("users") as batch:
        batch.create_unique_constraint("uq_users_identity", ["identity"])
