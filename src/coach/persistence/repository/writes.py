"""The group commit and the seed-named single writes (:class:`~coach.store.BatchWriter`,
:class:`~coach.store.SeedWrites`): each a batch through the one write path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from ...errors import (
    SessionNotFound,
)
from ...state.zones import Delta, DeltaSpec, Zone
from ...store import (
    AddMessage,
    AppendSteps,
    PhaseOutputRecord,
    SavePhaseOutput,
    StateRecord,
    WriteOp,
    WriteZone,
)
from ..batch import Plan
from ..memory import stored_count
from .base import RepositoryBase

__all__ = ["WriteMethods"]


class WriteMethods(RepositoryBase):
    """The group commit and the seed-named single writes (:class:`~coach.store.BatchWriter`,"""

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        if ops:
            await self._apply(ops, "write_batch")

    async def save_phase_output(
        self,
        session_id: str,
        phase_id: str,
        phase_name: str,
        status: str,
        *,
        system_prompt: str | None = None,
        user_input: str | None = None,
        output: str | None = None,
        error: str | None = None,
    ) -> PhaseOutputRecord:
        op = SavePhaseOutput(
            session_id, phase_id, phase_name, status, system_prompt, user_input, output, error
        )
        return (await self._apply([op], "save_phase_output")).phase_outputs[0]

    async def add_session_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        phase_id: str | None = None,
        interrupted: bool = False,
    ) -> int:
        op = AddMessage(session_id, role, content, phase_id, interrupted)
        return (await self._apply([op], "add_session_message")).message_ids[0]

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        steps = list(steps)
        sealers = await self._owners.of_sessions([session_id])

        def unit(conn: Connection) -> int:
            stored = stored_count(conn, session_id, lock=True)
            if stored is None or session_id not in sealers:
                raise SessionNotFound(session_id)
            if len(steps) > stored:
                new = AppendSteps(session_id, stored, tuple(steps[stored:]))
                Plan.of([new], self._codec, self._clock).apply(conn, sealers)
            return max(stored, len(steps))

        return await self._db.run(unit, write=True, what="save_agent_state")

    async def _zoned_write(
        self,
        session_id: str,
        zone: Zone | None,
        value: Mapping[str, Any] | None,
        delta: DeltaSpec,
        expected_step: int | None,
    ) -> tuple[StateRecord, Delta]:
        name = zone.value if zone is not None else None
        op = WriteZone(session_id, name, value, delta, expected_step)
        applied = await self._apply([op], f"update_{name}" if name else "add_delta")
        state, deltas = applied.states[session_id]
        return state, deltas[-1]

    async def update_data(
        self,
        session_id: str,
        data: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        return await self._zoned_write(session_id, Zone.DATA, data, delta, expected_step)

    async def update_template(
        self,
        session_id: str,
        template: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        return await self._zoned_write(session_id, Zone.TEMPLATE, template, delta, expected_step)

    async def update_view(
        self,
        session_id: str,
        view: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        return await self._zoned_write(session_id, Zone.VIEW, view, delta, expected_step)

    async def add_delta(
        self, session_id: str, delta: DeltaSpec, *, expected_step: int | None = None
    ) -> tuple[StateRecord, Delta]:
        return await self._zoned_write(session_id, None, None, delta, expected_step)
