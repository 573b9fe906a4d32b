"""Pure resume logic (SPEC §5): the next phase and the reconstructed history window.

No I/O: the repository reads the rows, these functions decide. A *pair* is two history
messages (one exchange); the window keeps the last ``max_pairs`` pairs, i.e. the last
``2 * max_pairs`` messages, so the repository can read exactly that many rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "COMPLETED",
    "DEFAULT_MAX_PAIRS",
    "HistoryMessage",
    "OutputLike",
    "MessageLike",
    "ResumeContext",
    "completed_phase_ids",
    "next_phase_id",
    "reconstruct_history",
]

COMPLETED = "completed"
DEFAULT_MAX_PAIRS = 25


class OutputLike(Protocol):
    """What the resume logic reads of a phase output."""

    @property
    def phase_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def user_input(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...


class MessageLike(Protocol):
    """What the resume logic reads of a stored conversation message."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def phase_id(self) -> str | None: ...
    @property
    def interrupted(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One message of a resumed session's history."""

    role: str
    content: str
    phase_id: str | None = None
    interrupted: bool = False


@dataclass(frozen=True, slots=True)
class ResumeContext:
    """What an agent needs to continue a session (SPEC §5 step 6)."""

    history: list[HistoryMessage]
    last_completed_phase: str
    total_phases: int
    completed_phases: int


class _StatusLike(Protocol):
    @property
    def phase_id(self) -> str: ...
    @property
    def status(self) -> str: ...


def completed_phase_ids(outputs: Sequence[_StatusLike]) -> list[str]:
    """Return the ids of completed phases, in the order of ``outputs``, without repeats."""
    seen: dict[str, None] = {}
    for output in outputs:
        if output.status == COMPLETED:
            seen.setdefault(output.phase_id, None)
    return list(seen)


def next_phase_id(phase_ids: Sequence[str], outputs: Sequence[_StatusLike]) -> str:
    """Return the first phase of the manifest without a completed output.

    Args:
        phase_ids: The manifest's phase ids, in order.
        outputs: The session's phase outputs (any order).

    Returns:
        The next phase id; the last phase of the manifest when every phase is
        completed (its owner agent then finishes the session).

    Raises:
        ValueError: If ``phase_ids`` is empty.
    """
    if not phase_ids:
        raise ValueError("the phase manifest is empty")
    done = set(completed_phase_ids(outputs))
    for phase_id in phase_ids:
        if phase_id not in done:
            return phase_id
    return phase_ids[-1]


def reconstruct_history(
    outputs: Sequence[OutputLike],
    conversation: Sequence[MessageLike],
    max_pairs: int = DEFAULT_MAX_PAIRS,
) -> list[HistoryMessage]:
    """Rebuild an LLM history for a session whose memory steps cannot be used.

    Every completed phase output that has a system prompt gives a pair
    (user = its ``user_input``, assistant = its ``output``), in the order given; the
    stored conversation follows. Of that sequence the last ``max_pairs`` pairs
    (``2 * max_pairs`` messages) are kept.

    Args:
        outputs: Phase outputs, oldest first.
        conversation: Conversation messages, oldest first.
        max_pairs: How many pairs to keep; ``0`` gives an empty history.

    Returns:
        The history, oldest first.

    Raises:
        ValueError: If ``max_pairs`` is negative.
    """
    if max_pairs < 0:
        raise ValueError("max_pairs must not be negative")
    if max_pairs == 0:
        return []
    messages: list[HistoryMessage] = []
    for output in outputs:
        if output.status != COMPLETED or output.system_prompt is None:
            continue
        messages.append(HistoryMessage("user", output.user_input or "", output.phase_id))
        messages.append(HistoryMessage("assistant", output.output or "", output.phase_id))
    messages.extend(
        HistoryMessage(m.role, m.content, m.phase_id, m.interrupted) for m in conversation
    )
    return messages[-2 * max_pairs :]
