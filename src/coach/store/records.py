"""The frozen records a store returns (never ORM objects)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..state.resume import HistoryMessage, ResumeContext

__all__ = [
    "HistoryMessage",
    "MessageRecord",
    "PhaseOutputRecord",
    "ResumeContext",
    "ResumeResult",
    "SessionRecord",
    "StateRecord",
    "StepPage",
    "UserRecord",
    "session_tree",
]


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A user, keyed by ``identity``."""

    id: str
    identity: str
    display_name: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session; ``completed_phases`` counts manifest phases with a completed output."""

    id: str
    user_id: str
    design_challenge: str | None
    status: str
    current_agent: str | None
    current_phase_id: str | None
    created_at: datetime
    updated_at: datetime
    completed_phases: int = 0
    room: str | None = None
    parent_session_id: str | None = None
    """The session this one branched from, if it is a branch."""
    branched_from_phase: str | None = None
    """The parent's phase the branch starts after."""


@dataclass(frozen=True, slots=True)
class PhaseOutputRecord:
    """The output of one phase (prompts are ``None`` when not requested)."""

    id: str
    session_id: str
    phase_id: str
    phase_name: str
    status: str
    system_prompt: str | None
    user_input: str | None
    output: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One stored conversation message."""

    id: int
    session_id: str
    phase_id: str | None
    role: str
    content: str
    interrupted: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StepPage:
    """Memory steps ``first .. first + len(steps) - 1`` of a session, in order, with what
    each belongs to: the conversation message a message step carries (``None`` for tool
    calls, outputs and handoffs) and the phase (a message's, or that of the message
    before). ``steps`` is empty when the window cannot be loaded (corrupt, cut)."""

    first: int
    steps: list[object]
    message_ids: list[int | None]
    phase_ids: list[str | None]


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A session's zoned state at ``step`` (``0`` and empty zones before the first write)."""

    session_id: str
    step: int
    data: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] = field(default_factory=dict)
    view: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PersonRecord:
    """What a person agreed coach may remember, at ``step`` (``0``: nothing yet)."""

    user_id: str
    step: int
    value: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResumeResult:
    """What :meth:`~coach.store.Store.resume_session` returns (SPEC §5 step 6), read in
    one transaction: everything a live conversation needs to continue the session.

    ``memory`` holds the newest stored agent steps when they load (``[]`` when there are
    none or any is corrupt or missing); ``context.history`` is always the reconstructed
    window, so the caller can choose steps or reconstruction. ``outputs`` are the phase
    outputs without their prompts, ``state`` the zoned state and ``stored_steps`` the
    number of memory steps stored (new steps append after it).
    """

    session: SessionRecord
    next_phase_id: str
    context: ResumeContext
    memory: list[object] = field(default_factory=list)
    outputs: list[PhaseOutputRecord] = field(default_factory=list)
    state: StateRecord | None = None
    stored_steps: int = 0


def session_tree(sessions: Sequence[SessionRecord]) -> list[tuple[SessionRecord, int]]:
    """``sessions`` (newest first) with each branch right under its parent, and its depth.

    A branch whose parent is not among them is listed at the top level.
    """
    ids = {s.id for s in sessions}
    children: dict[str, list[SessionRecord]] = {}
    for s in sessions:
        if s.parent_session_id in ids:
            children.setdefault(s.parent_session_id, []).append(s)
    ordered: list[tuple[SessionRecord, int]] = []

    def visit(s: SessionRecord, depth: int) -> None:
        ordered.append((s, depth))
        for child in children.get(s.id, []):
            visit(child, depth + 1)

    for s in sessions:
        if s.parent_session_id not in ids:
            visit(s, 0)
    return ordered
