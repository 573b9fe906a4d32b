"""The one write path: a batch of :mod:`~coach.store.ops` checked, then applied in one
transaction as a few statements — not a few per op.

The recorder's group commit and every seed-named single write (a batch of one) come
through here, so they share the same checks and the same statements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection

from ..errors import InvalidWrite
from ..state.zones import Delta
from ..store import (
    AddMessage,
    AppendSteps,
    ClosePhase,
    PhaseOutputRecord,
    SavePhaseOutput,
    StateRecord,
    UpdateSession,
    WriteOp,
    WriteZone,
)
from .codec import StepCodec
from .conversation import message_row
from .crypto import Sealer
from .driver import insert_messages, insert_steps
from .memory import encode_rows, message_text
from .phases import check_close, check_phase_output, close_phases, save_phase_outputs
from .sessions import apply_session_write, claim_memory, session_values
from .zones import check_zone_write, write_zones

__all__ = ["Applied", "Plan"]


@dataclass
class Applied:
    """What a batch wrote: message ids, phase outputs and each session's new state."""

    message_ids: list[int] = field(default_factory=list)
    phase_outputs: list[PhaseOutputRecord] = field(default_factory=list)
    states: dict[str, tuple[StateRecord, list[Delta]]] = field(default_factory=dict)


@dataclass
class Plan:
    """A batch grouped by kind, every op checked before any database work."""

    now: datetime
    messages: list[dict[str, Any]] = field(default_factory=list)
    appends: dict[str, tuple[int, list[object]]] = field(default_factory=dict)
    phase_outputs: list[tuple[SavePhaseOutput, datetime]] = field(default_factory=list)
    session_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    zone_writes: dict[str, list[WriteZone]] = field(default_factory=dict)
    closes: list[ClosePhase] = field(default_factory=list)
    step_rows: list[dict[str, Any]] = field(default_factory=list)
    text_links: list[tuple[int, int]] = field(default_factory=list)
    """(step row, message row) pairs: the step's text is that message's."""
    session_ids: set[str] = field(default_factory=set)
    """Every session the batch writes."""

    @classmethod
    def of(cls, ops: Sequence[WriteOp], codec: StepCodec, clock: Callable[[], datetime]) -> Plan:
        """Check and group ``ops``; memory steps are encoded here.

        A message step whose text is also a message of the batch (the recorder queues
        both for every user and assistant message) is stored without that text: the
        conversation row keeps it once.

        The batch is stamped with one time — its messages a microsecond apart, in order,
        so that a message's session, time and role name it —; each phase output with its
        own (they are listed in creation order).

        Raises:
            InvalidRole: A message with a bad role.
            InvalidWrite: Bad input in any op (nothing is written).
        """
        plan = cls(now=clock())
        for op in ops:
            plan._add(op, clock)
        unmatched: dict[tuple[str, str, str], deque[int]] = {}
        for index, row in enumerate(plan.messages):
            key = (row["session_id"], row["role"], row["content"])
            unmatched.setdefault(key, deque()).append(index)
        for sid, (start, steps) in plan.appends.items():
            shared: list[str | None] = []
            for step in steps:
                said = message_text(step)
                waiting = unmatched.get((sid, *said)) if said is not None else None
                if said is not None and waiting:
                    position = len(plan.step_rows) + len(shared)
                    plan.text_links.append((position, waiting.popleft()))
                    shared.append(said[1])
                else:
                    shared.append(None)
            plan.step_rows += encode_rows(codec, sid, start, steps, shared=shared)
        return plan

    def _add(self, op: WriteOp, clock: Callable[[], datetime]) -> None:
        sid = getattr(op, "session_id", None)
        if not isinstance(sid, str):
            raise InvalidWrite(f"unknown write op: {type(op).__name__}")
        self.session_ids.add(sid)
        if isinstance(op, AddMessage):
            # One microsecond apart: a message's time names it (its seal binds the time).
            at = self.now + timedelta(microseconds=len(self.messages))
            self.messages.append(message_row(op, at))
        elif isinstance(op, AppendSteps):
            if op.start < 0:
                raise InvalidWrite("start must not be negative")
            if sid not in self.appends:
                self.appends[sid] = (op.start, list(op.steps))
                return
            start, steps = self.appends[sid]
            if op.start != start + len(steps):
                raise InvalidWrite(f"memory steps of session {sid} are not contiguous in a batch")
            steps.extend(op.steps)
        elif isinstance(op, SavePhaseOutput):
            self.phase_outputs.append((check_phase_output(op), clock()))
        elif isinstance(op, WriteZone):
            self.zone_writes.setdefault(sid, []).append(check_zone_write(op))
        elif isinstance(op, ClosePhase):
            self.closes.append(check_close(op))
        elif isinstance(op, UpdateSession):
            fields = {**self.session_fields.get(sid, {}), **session_values(op.fields)}
            self.session_fields[sid] = fields
        else:
            raise InvalidWrite(f"unknown write op: {type(op).__name__}")

    def apply(self, conn: Connection, sealers: dict[str, Sealer]) -> Applied:
        """Write the batch on ``conn`` (inside the caller's transaction), every personal
        field sealed with its session owner's sealer (``sealers``: session id -> sealer,
        one for each of :attr:`session_ids`).

        The sessions it updates are locked first, in id order, when there are several —
        on PostgreSQL by the statement that claims the memory positions of every session
        with nothing else to change (:func:`claim_memory`). Each other session is then
        updated in one statement (its claim with it); then zone writes, then the
        inserts.

        Raises:
            SessionNotFound: An op names an unknown session.
            StaleWrite: Memory steps whose ``start`` is not the stored count, or a zone
                write whose expected step is not the stored step.
        """
        applied, now = Applied(), self.now
        claims = {sid: (start, len(steps)) for sid, (start, steps) in self.appends.items()}
        updated = sorted(claims.keys() | self.session_fields.keys())
        claim_memory(
            conn,
            {sid: claims[sid] for sid in claims if sid not in self.session_fields},
            lock=updated if len(updated) > 1 else (),
        )
        for sid in sorted(self.session_fields):
            values = {**self.session_fields[sid], "updated_at": now}
            if "design_challenge" in values:
                values = sealers[sid].seal_row("sessions", {"id": sid, **values})
                del values["id"]
            apply_session_write(conn, sid, values, steps=claims.get(sid))
        for sid in sorted(self.zone_writes):
            applied.states[sid] = write_zones(conn, sid, self.zone_writes[sid], now, sealers[sid])
        if self.messages:
            rows = [
                sealers[row["session_id"]].seal_row("session_conversations", row)
                for row in self.messages
            ]
            applied.message_ids = insert_messages(conn, rows)
        for step, message in self.text_links:
            self.step_rows[step]["message_id"] = applied.message_ids[message]
        insert_steps(
            conn,
            [sealers[row["session_id"]].seal_row("agent_steps", row) for row in self.step_rows],
        )
        if self.phase_outputs:
            applied.phase_outputs = save_phase_outputs(conn, self.phase_outputs, sealers)
        close_phases(conn, self.closes, sealers)  # after the outputs: a phase completes, then ends
        return applied
