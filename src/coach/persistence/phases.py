"""Phase outputs with the prompts that produced them (SPEC §4.2)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Final

from sqlalchemy import bindparam, func, null, select, update
from sqlalchemy.engine import Connection

from ..errors import InvalidWrite
from ..store import ClosePhase, PhaseOutputRecord, SavePhaseOutput
from .crypto import Sealer
from .schema import PHASE_OUTPUTS, PHASE_STATUSES, new_id
from .sql import AnyRow, AnySelect, check_status, clean_text, fit, json_object, upsert

__all__ = [
    "OUTPUT_COLUMNS",
    "check_phase_output",
    "close_phases",
    "output_record",
    "outputs_select",
    "save_phase_outputs",
]

OUTPUT_COLUMNS: Final = (
    PHASE_OUTPUTS.c.id,
    PHASE_OUTPUTS.c.session_id,
    PHASE_OUTPUTS.c.phase_id,
    PHASE_OUTPUTS.c.phase_name,
    PHASE_OUTPUTS.c.status,
    PHASE_OUTPUTS.c.system_prompt,
    PHASE_OUTPUTS.c.user_input,
    PHASE_OUTPUTS.c.output,
    PHASE_OUTPUTS.c.error,
    PHASE_OUTPUTS.c.created_at,
    PHASE_OUTPUTS.c.updated_at,
)
_PROMPTS: Final = frozenset({"system_prompt", "user_input"})
_TEXTS: Final = ("system_prompt", "user_input", "output", "error")


def output_record(row: AnyRow, sealer: Sealer, *, prompt_marker: bool = False) -> PhaseOutputRecord:
    """A row of :data:`OUTPUT_COLUMNS`, opened with the session owner's ``sealer``. With
    ``prompt_marker`` the system prompt is the clear ``""``/``None`` marker of "there is
    one" (resume reads no prompt)."""
    values = row._asdict()
    marker = values.pop("system_prompt") if prompt_marker else None
    opened = sealer.open_row("phase_outputs", values)
    if prompt_marker:
        opened["system_prompt"] = marker
    return PhaseOutputRecord(**opened)


def check_phase_output(op: SavePhaseOutput) -> SavePhaseOutput:
    """``op`` as it will be stored; refuses an unknown status, or a phase id or name the
    columns cannot hold (nothing is written)."""
    check_status(op.status, PHASE_STATUSES, "phase")
    phase_id = fit(op.phase_id, PHASE_OUTPUTS.c.phase_id, "phase id")
    phase_name = fit(op.phase_name, PHASE_OUTPUTS.c.phase_name, "phase name")
    if (phase_id, phase_name) != (op.phase_id, op.phase_name):
        return dataclasses.replace(op, phase_id=phase_id, phase_name=phase_name)
    return op


def save_phase_outputs(
    conn: Connection, ops: list[tuple[SavePhaseOutput, datetime]], sealers: dict[str, Sealer]
) -> list[PhaseOutputRecord]:
    """Upsert each output (with its time) in order; ``None`` prompts and output keep the
    stored value."""
    records = []
    for op, now in ops:
        sealer = sealers[op.session_id]
        texts = {name: clean_text(getattr(op, name)) for name in _TEXTS}
        row = (op.session_id, op.phase_id)
        stmt = upsert(conn, PHASE_OUTPUTS).values(
            id=new_id(),
            session_id=op.session_id,
            phase_id=op.phase_id,
            phase_name=op.phase_name,
            status=op.status,
            **{name: sealer.seal("phase_outputs", name, row, text) for name, text in texts.items()},
            created_at=now,
            updated_at=now,
        )
        new, old = stmt.excluded, PHASE_OUTPUTS.c
        stmt = stmt.on_conflict_do_update(
            index_elements=["session_id", "phase_id"],
            set_={
                "phase_name": new.phase_name,
                "status": new.status,
                "system_prompt": func.coalesce(new.system_prompt, old.system_prompt),
                "user_input": func.coalesce(new.user_input, old.user_input),
                "output": func.coalesce(new.output, old.output),
                "error": new.error,
                "updated_at": new.updated_at,
                # A phase saved again is open again: it ends where it is next closed.
                "memory_end": null(),
                "state_end": null(),
                "state_snapshot": null(),
            },
        ).returning(*(PHASE_OUTPUTS.c[c.key] for c in OUTPUT_COLUMNS))
        records.append(output_record(conn.execute(stmt).one(), sealer))
    return records


def outputs_select(session_id: str, *, include_prompts: bool) -> AnySelect:
    """The session's outputs in creation order; without prompts they read as ``None``."""
    columns = [
        c if include_prompts or c.key not in _PROMPTS else null().label(c.key)
        for c in OUTPUT_COLUMNS
    ]
    return (
        select(*columns)
        .where(PHASE_OUTPUTS.c.session_id == session_id)
        .order_by(PHASE_OUTPUTS.c.created_at, PHASE_OUTPUTS.c.id)
    )


_CLOSE: Final = (
    update(PHASE_OUTPUTS)
    .where(
        PHASE_OUTPUTS.c.session_id == bindparam("b_session"),
        PHASE_OUTPUTS.c.phase_id == bindparam("b_phase"),
        PHASE_OUTPUTS.c.status == "completed",
    )
    .values(
        memory_end=bindparam("b_memory"),
        state_end=bindparam("b_state"),
        state_snapshot=bindparam("b_zones", type_=PHASE_OUTPUTS.c.state_snapshot.type),
    )
)


def close_phases(conn: Connection, ops: list[ClosePhase], sealers: dict[str, Sealer]) -> None:
    """Record where each completed phase ends (a phase not completed is left alone)."""
    for op in ops:
        row = (op.session_id, op.phase_id)
        zones = sealers[op.session_id].seal("phase_outputs", "state_snapshot", row, op.zones)
        conn.execute(
            _CLOSE,
            {
                "b_session": op.session_id,
                "b_phase": op.phase_id,
                "b_memory": op.memory_end,
                "b_state": op.state_end,
                "b_zones": zones,
            },
        )


def check_close(op: ClosePhase) -> ClosePhase:
    """Refuse positions that cannot be (nothing is written)."""
    if op.memory_end < 0 or op.state_end < 0:
        raise InvalidWrite("a phase cannot end before the start of its session")
    for zone in ("data", "template", "view"):
        json_object(op.zones.get(zone, {}), zone)
    return op
