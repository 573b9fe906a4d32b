"""The writes a store applies: small immutable records.

Every write goes through :meth:`~coach.store.Store.write_batch` as a list of these — the
recorder's group commit and the seed-named single calls alike (a single call is a batch
of one), so they share one validation and one set of statements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..state.zones import DeltaSpec

__all__ = [
    "AddMessage",
    "AppendSteps",
    "ClosePhase",
    "PhaseDone",
    "SavePhaseOutput",
    "UpdateSession",
    "WriteOp",
    "WriteZone",
]


@dataclass(frozen=True)
class AddMessage:
    """A user, assistant or system message for ``session_conversations``."""

    session_id: str
    role: str
    content: str
    phase_id: str | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class SavePhaseOutput:
    """A phase output upsert (``running``, ``completed`` or ``failed``).

    ``system_prompt``, ``user_input`` and ``output`` keep their stored value when
    ``None``; ``status`` and ``error`` always take the new value.
    """

    session_id: str
    phase_id: str
    phase_name: str
    status: str
    system_prompt: str | None = None
    user_input: str | None = None
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class PhaseDone:
    """A phase completed as its session is created (the challenge): stored in the same
    transaction, so a listed session always has something to resume from."""

    phase_id: str
    phase_name: str
    system_prompt: str | None
    user_input: str | None
    output: str | None


@dataclass(frozen=True)
class UpdateSession:
    """Session bookkeeping: ``fields`` name what changes (status, design_challenge,
    current_agent, current_phase_id, room)."""

    session_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AppendSteps:
    """Agent memory steps (LiveKit chat items) to store at ``start, start + 1, ...``.

    ``start`` must be the stored count; otherwise the write fails with ``StaleWrite``.
    """

    session_id: str
    start: int
    steps: tuple[object, ...]


@dataclass(frozen=True)
class WriteZone:
    """A zone value and the delta that explains it (``zone=None``: a delta alone).

    ``expected_step`` is the step the writer last saw: a different stored step fails the
    write with ``StaleWrite`` (``None``: whatever is stored — a single call).
    """

    session_id: str
    zone: str | None
    value: Mapping[str, Any] | None
    delta: DeltaSpec
    expected_step: int | None = None


@dataclass(frozen=True)
class ClosePhase:
    """Where a completed phase ends — recorded once the turn that completed it is over,
    so that a branch from it starts at a whole turn: the memory steps before
    ``memory_end``, the state at ``state_end`` and its zones (``zones``: data,
    template, view as they were then)."""

    session_id: str
    phase_id: str
    memory_end: int
    state_end: int
    zones: dict[str, Any]


WriteOp = AddMessage | SavePhaseOutput | UpdateSession | AppendSteps | WriteZone | ClosePhase
"""Any write a store accepts."""
