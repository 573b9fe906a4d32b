"""The writes a recorder queues: small immutable records, applied in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..state.zones import DeltaSpec


@dataclass(frozen=True)
class AddMessage:
    """A user or assistant message for ``session_conversations``."""

    session_id: str
    role: str
    content: str
    phase_id: str | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class SavePhaseOutput:
    """A phase output upsert (``running``, ``completed`` or ``failed``)."""

    session_id: str
    phase_id: str
    phase_name: str
    status: str
    system_prompt: str | None = None
    user_input: str | None = None
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class UpdateSession:
    """Session bookkeeping: status, challenge, current agent and phase."""

    session_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AppendSteps:
    """Agent memory steps (chat items) to append at position ``start``."""

    session_id: str
    start: int
    steps: tuple[object, ...]


@dataclass(frozen=True)
class WriteZone:
    """A zone value and the delta that explains it (``zone=None``: a delta alone).

    The live session already applied it in memory and numbered it: the writer only
    persists it, and ``expected_step`` makes a second writer fail loudly.
    """

    session_id: str
    zone: str | None
    value: dict[str, Any] | None
    delta: DeltaSpec
    expected_step: int


WriteOp = AddMessage | SavePhaseOutput | UpdateSession | AppendSteps | WriteZone
