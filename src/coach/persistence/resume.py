"""Reading a session for continuation (SPEC §5): one transaction, bounded by the window.

Every statement here is served by an index and limited — the phase outputs (at most one
per manifest phase), the newest ``2 * max_pairs`` messages, the newest ``max_steps``
memory steps — so a resume costs the same at 10,000 turns as at 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import case, literal, null
from sqlalchemy.engine import Connection

from ..errors import NothingToResume, SessionCompleted, SessionFailed, SessionNotFound
from ..state.resume import ResumeContext, completed_phase_ids, next_phase_id, reconstruct_history
from ..store import PhaseOutputRecord, SessionRecord, StateRecord
from .conversation import window_select
from .memory import step_window, steps_select
from .phases import outputs_select
from .schema import PhaseOutput, SessionRow
from .sessions import session_record, session_select
from .sql import AnyRow, AnySelect
from .zones import state_select

__all__ = ["DEFAULT_MAX_STEPS", "Loaded", "read_resume"]

DEFAULT_MAX_STEPS: Final = 200
"""Memory steps a resume loads at most: the newest ones (many times the context an LLM
is sent after pruning, and a fraction of a millisecond each to decode)."""


@dataclass(frozen=True, slots=True)
class _Message:
    role: str
    content: str
    phase_id: str | None
    interrupted: bool


@dataclass(frozen=True, slots=True)
class Loaded:
    """The rows of a resume; memory steps are still encoded (``steps_from .. stored``)."""

    session: SessionRecord
    next_phase_id: str
    context: ResumeContext
    outputs: list[PhaseOutputRecord]
    state: StateRecord
    stored_steps: int
    steps_from: int
    step_rows: Sequence[AnyRow]


def read_resume(
    conn: Connection,
    session_id: str,
    *,
    user_id: str,
    phase_ids: Sequence[str],
    max_pairs: int,
    max_steps: int,
) -> Loaded:
    """Read what continuing ``session_id`` needs, checking the resume rules on the way.

    Raises:
        SessionNotFound: ``Session {id} not found`` (unknown, or not this user's).
        SessionCompleted: ``Session {id} already completed``.
        SessionFailed: ``Session {id} failed and cannot be resumed``.
        NothingToResume: ``Session {id} has no completed phases to resume from``.
    """
    stmt = session_select(phase_ids).add_columns(SessionRow.memory_steps)
    row = (conn.execute(stmt.where(SessionRow.id == session_id))).one_or_none()
    if row is None or row.user_id != user_id:
        raise SessionNotFound(session_id)
    session = session_record(row)
    if session.status == "completed":
        raise SessionCompleted(session_id)
    if session.status == "failed":
        raise SessionFailed(session_id)
    outputs = [PhaseOutputRecord(*r) for r in conn.execute(_outputs_select(session_id))]
    done = completed_phase_ids(outputs)
    if not done:
        raise NothingToResume(session_id)
    messages: list[_Message] = []
    if max_pairs:
        newest = conn.execute(window_select(session_id, 2 * max_pairs))
        messages = [_Message(*r) for r in newest][::-1]
    stored = int(row.memory_steps)
    first, end = step_window(stored, newest=max_steps, since=None)
    step_rows = (conn.execute(steps_select(session_id, first, end))).all() if end else []
    state_row = (conn.execute(state_select(session_id))).one_or_none()
    window = [o for o in outputs if o.status == "completed" and o.system_prompt is not None]
    context = ResumeContext(
        history=reconstruct_history(window[-max_pairs:] if max_pairs else [], messages, max_pairs),
        last_completed_phase=done[-1],
        total_phases=len(phase_ids),
        completed_phases=sum(1 for phase_id in phase_ids if phase_id in done),
    )
    return Loaded(
        session=session,
        next_phase_id=next_phase_id(phase_ids, outputs),
        context=context,
        outputs=[_without_prompts(o) for o in outputs],
        state=StateRecord(*state_row) if state_row is not None else StateRecord(session_id, 0),
        stored_steps=stored,
        steps_from=first,
        step_rows=step_rows,
    )


def _outputs_select(session_id: str) -> AnySelect:
    """The session's outputs with ``user_input`` (the window needs it) but a system prompt
    read only as present (``""``) or not (``None``): it can be long."""
    has_prompt = case((PhaseOutput.system_prompt.is_(None), null()), else_=literal(""))
    base = outputs_select(session_id, include_prompts=True)
    return base.with_only_columns(
        *(
            has_prompt.label("system_prompt") if column.key == "system_prompt" else column
            for column in base.selected_columns
        )
    )


def _without_prompts(output: PhaseOutputRecord) -> PhaseOutputRecord:
    return PhaseOutputRecord(
        output.id,
        output.session_id,
        output.phase_id,
        output.phase_name,
        output.status,
        None,
        None,
        output.output,
        output.error,
        output.created_at,
        output.updated_at,
    )
