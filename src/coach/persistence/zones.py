"""Zoned state and its deltas (SPEC §4.5): a zone and its delta in one transaction.

The ``session_state`` row orders writers: a write moves its ``step`` from the step the
writer expects with a conditional ``UPDATE`` (which also takes the row lock), so a
second writer of the same session fails with ``StaleWrite`` instead of interleaving.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..errors import InvalidWrite, SessionNotFound, StaleWrite
from ..state.zones import Action, Delta, DeltaSpec, ResultMeta, Zone
from ..store import StateRecord, WriteZone
from .crypto import Sealer
from .driver import DriverQuery
from .schema import DELTAS, SESSIONS, STATES
from .sql import MAX_ACTOR, AnyRow, AnySelect, fit, json_object, upsert

__all__ = [
    "check_zone_write",
    "delta_record",
    "delta_values",
    "empty_zones",
    "state_record",
    "deltas_select",
    "fetch_state",
    "write_zones",
]

_STATE: Final = (
    STATES.c.session_id,
    STATES.c.step,
    STATES.c.data,
    STATES.c.template,
    STATES.c.view,
)
_DELTA: Final = (
    DELTAS.c.step,
    DELTAS.c.turn_id,
    DELTAS.c.trigger,
    DELTAS.c.source,
    DELTAS.c.actor_id,
    DELTAS.c.delta_type,
    DELTAS.c.path,
    DELTAS.c.action,
    DELTAS.c.result,
)


def check_zone_write(op: WriteZone) -> WriteZone:
    """``op`` as it will be stored; refuses an unknown zone, a zone value that is not a
    JSON object, a delta that is not a :class:`DeltaSpec`, or delta fields the
    ``state_deltas`` columns cannot hold (nothing is written)."""
    if not isinstance(op.delta, DeltaSpec):
        raise InvalidWrite("delta must be a DeltaSpec")
    if op.zone is not None:
        try:
            zone = Zone(op.zone)
        except ValueError:
            raise InvalidWrite(f"unknown zone: {op.zone!r}") from None
        json_object(op.value, zone.value)
    delta = op.delta
    fitted = {
        "turn_id": fit(delta.turn_id, DELTAS.c.turn_id, "delta turn_id"),
        "actor_id": fit(delta.actor_id, MAX_ACTOR, "delta actor_id"),
        "path": fit(delta.path, DELTAS.c.path, "delta path"),
    }
    json_object(delta.model_dump(mode="json", include={"action", "result"}), "delta")
    if any(getattr(delta, name) != value for name, value in fitted.items()):
        return dataclasses.replace(op, delta=delta.model_copy(update=fitted))
    return op


_ZONES: Final = ("data", "template", "view")
_STATE_ROW: Final = DriverQuery(
    select(*_STATE).where(STATES.c.session_id == bindparam("b_id")), typed=True
)


def fetch_state(conn: Connection, session_id: str, sealer: Sealer) -> StateRecord:
    """The session's zoned state (step 0 and empty zones before any write)."""
    rows = _STATE_ROW.rows(conn, {"b_id": session_id})
    return state_record(rows[0], sealer) if rows else StateRecord(session_id, 0)


def state_record(row: AnyRow, sealer: Sealer) -> StateRecord:
    """A stored state row (``session_id, step, data, template, view``), opened."""
    opened = sealer.open_row("session_state", row._asdict())
    return StateRecord(row.session_id, row.step, *(opened[zone] for zone in _ZONES))


def empty_zones(session_id: str, sealer: Sealer) -> dict[str, bytes | None]:
    """The three zones of a new state row, empty and sealed."""
    return {zone: sealer.seal("session_state", zone, (session_id,), {}) for zone in _ZONES}


def deltas_select(session_id: str, since_step: int, limit: int | None) -> AnySelect:
    """Deltas after ``since_step`` in step order (served by the primary key)."""
    stmt = (
        select(*_DELTA)
        .where(DELTAS.c.session_id == session_id, DELTAS.c.step > since_step)
        .order_by(DELTAS.c.step)
    )
    return stmt.limit(limit) if limit is not None else stmt


def delta_values(delta: Delta, now: datetime) -> dict[str, Any]:
    """A delta's columns as a row stores them (state and person deltas alike)."""
    return {
        "step": delta.step,
        "turn_id": delta.turn_id,
        "trigger": delta.trigger,
        "source": delta.source,
        "actor_id": delta.actor_id,
        "delta_type": delta.delta_type,
        "path": delta.path,
        "action": delta.action.model_dump(mode="json"),
        "result": delta.result.model_dump(mode="json"),
        "created_at": now,
    }


def delta_record(row: AnyRow, sealer: Sealer, owner: tuple[str, str]) -> Delta:
    """A stored delta, opened; ``owner`` is ``(table, id)`` of its log: ``state_deltas``
    and the session's id, or ``person_deltas`` and the user's."""
    table, owner_id = owner
    bound = (owner_id, row.step)
    return Delta(
        step=row.step,
        turn_id=row.turn_id,
        trigger=row.trigger,
        source=row.source,
        actor_id=sealer.open(table, "actor_id", bound, row.actor_id),
        delta_type=row.delta_type,
        path=row.path,
        action=Action.model_validate(sealer.open(table, "action", bound, row.action) or {}),
        result=ResultMeta.model_validate(sealer.open(table, "result", bound, row.result) or {}),
    )


def write_zones(
    conn: Connection, session_id: str, ops: Sequence[WriteZone], now: datetime, sealer: Sealer
) -> tuple[StateRecord, list[Delta]]:
    """Apply one session's zone writes, in order, as one state update and one delta insert.

    The first op's ``expected_step`` (``None``: whatever is stored) must be the stored
    step; each later op must expect the step the one before it made.

    Raises:
        StaleWrite: A step is not the expected one, or a delta exists at a new step.
        SessionNotFound: There is no such session.
    """
    expected = ops[0].expected_step
    if expected is not None and any(
        op.expected_step not in (None, expected + offset) for offset, op in enumerate(ops)
    ):
        raise StaleWrite(f"Session {session_id} zone writes are not contiguous in one batch")
    values: dict[str, Any] = {"updated_at": now}
    for op in ops:
        if op.zone is not None:
            values[op.zone] = op.value
    for zone in values.keys() & set(_ZONES):
        values[zone] = sealer.seal("session_state", zone, (session_id,), values[zone])
    row = _move_step(conn, session_id, expected, len(ops), values, now, sealer)
    state = state_record(row, sealer)
    first = state.step - len(ops) + 1
    deltas = [op.delta.at_step(step) for step, op in enumerate(ops, start=first)]
    rows = [
        sealer.seal_row("state_deltas", {"session_id": session_id, **delta_values(delta, now)})
        for delta in deltas
    ]
    try:
        conn.execute(DELTAS.insert(), rows)
    except IntegrityError as exc:
        raise StaleWrite(f"Session {session_id} already has a delta at step {first}") from exc
    return state, deltas


def _move_step(
    conn: Connection,
    session_id: str,
    expected: int | None,
    count: int,
    values: dict[str, Any],
    now: datetime,
    sealer: Sealer,
) -> AnyRow:
    """Advance the state row by ``count`` steps from ``expected``; return it afterwards."""
    for _ in range(2):
        stmt = STATES.update().where(STATES.c.session_id == session_id)
        if expected is None:
            stmt = stmt.values(step=STATES.c.step + count, **values)
        else:
            stmt = stmt.where(STATES.c.step == expected).values(step=expected + count, **values)
        row = (conn.execute(stmt.returning(*(STATES.c[c.key] for c in _STATE)))).first()
        if row is not None:
            return row
        stored = conn.scalar(select(STATES.c.step).where(STATES.c.session_id == session_id))
        if stored is not None:
            raise StaleWrite(f"Session {session_id} state is at step {stored}, not {expected}")
        # No state row (a session stored before states existed): create it at step 0.
        if conn.scalar(select(SESSIONS.c.id).where(SESSIONS.c.id == session_id)) is None:
            raise SessionNotFound(session_id)
        conn.execute(
            upsert(conn, STATES)
            .values(
                session_id=session_id,
                step=0,
                **empty_zones(session_id, sealer),
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["session_id"])
        )
    raise AssertionError("unreachable")  # pragma: no cover
