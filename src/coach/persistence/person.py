"""The person record and its deltas (SPEC §4.6): a value and its delta in one transaction.

Like a session's zoned state: the ``persons`` row orders writers — a write moves its
``step`` from the step the writer expects — so two conversations of the same person
never interleave their changes silently (``StaleWrite``). Both tables cascade from
``users``: erasing the person erases what coach remembered.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..errors import InvalidWrite, StaleWrite
from ..state.zones import Delta, DeltaSpec
from ..store import PersonRecord
from .crypto import Sealer
from .schema import PERSON_DELTAS, PERSONS, USERS
from .sql import MAX_ACTOR, fit, json_object, upsert
from .zones import delta_record, delta_values

__all__ = ["fetch_person", "person_deltas", "write_person"]


def fetch_person(conn: Connection, user_id: str, sealer: Sealer) -> PersonRecord:
    """The user's person record (step 0 and no facts before any write)."""
    row = conn.execute(
        select(PERSONS.c.step, PERSONS.c.value).where(PERSONS.c.user_id == user_id)
    ).one_or_none()
    if row is None:
        return PersonRecord(user_id, 0)
    return PersonRecord(
        user_id, row.step, dict(sealer.open("persons", "value", (user_id,), row.value))
    )


def person_deltas(conn: Connection, user_id: str, sealer: Sealer) -> list[Delta]:
    """The person record's deltas in step order."""
    columns = [PERSON_DELTAS.c[c] for c in _DELTA_COLUMNS]
    rows = conn.execute(
        select(*columns).where(PERSON_DELTAS.c.user_id == user_id).order_by(PERSON_DELTAS.c.step)
    )
    return [delta_record(row, sealer, ("person_deltas", user_id)) for row in rows]


_DELTA_COLUMNS: Final = (
    "step",
    "turn_id",
    "trigger",
    "source",
    "actor_id",
    "delta_type",
    "path",
    "action",
    "result",
)


def write_person(
    conn: Connection,
    user_id: str,
    value: Mapping[str, Any],
    spec: DeltaSpec,
    expected_step: int | None,
    now: datetime,
    sealer: Sealer,
) -> tuple[PersonRecord, Delta]:
    """Store ``value`` at the next step with the delta ``spec`` describes.

    Raises:
        InvalidWrite: ``value`` or the delta cannot be stored, or there is no such user.
        StaleWrite: the stored step is not ``expected_step``.
    """
    json_object(value, "person")
    spec = spec.model_copy(
        update={
            "turn_id": fit(spec.turn_id, PERSON_DELTAS.c.turn_id, "delta turn_id"),
            "actor_id": fit(spec.actor_id, MAX_ACTOR, "delta actor_id"),
        }
    )
    if conn.scalar(select(USERS.c.id).where(USERS.c.id == user_id)) is None:
        raise InvalidWrite(f"No user {user_id[:40]}: nothing was remembered.")
    sealed = sealer.seal("persons", "value", (user_id,), value)
    conn.execute(
        upsert(conn, PERSONS)
        .values(user_id=user_id, step=0, value=sealed, created_at=now, updated_at=now)
        .on_conflict_do_nothing(index_elements=["user_id"])
    )
    stmt = PERSONS.update().where(PERSONS.c.user_id == user_id)
    if expected_step is None:
        stmt = stmt.values(step=PERSONS.c.step + 1, value=sealed, updated_at=now)
    else:
        stmt = stmt.where(PERSONS.c.step == expected_step).values(
            step=expected_step + 1, value=sealed, updated_at=now
        )
    step = conn.execute(stmt.returning(PERSONS.c.step)).scalar()
    if step is None:
        stored = conn.scalar(select(PERSONS.c.step).where(PERSONS.c.user_id == user_id))
        raise StaleWrite(f"The person record is at step {stored}, not {expected_step}")
    delta = spec.at_step(step)
    try:
        row = sealer.seal_row("person_deltas", {"user_id": user_id, **delta_values(delta, now)})
        conn.execute(PERSON_DELTAS.insert().values(**row))
    except IntegrityError as exc:
        raise StaleWrite(f"The person record already has a delta at step {step}") from exc
    return PersonRecord(user_id, step, dict(value)), delta
