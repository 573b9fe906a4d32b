"""Reading a session for continuation (SPEC §5): one transaction, bounded by the window.

Every statement here is served by an index and limited — the phase outputs (at most one
per manifest phase), the newest ``2 * max_pairs`` messages, the memory steps of those
messages' exchanges (the newest ``max_steps`` at most) — so a resume costs the same at
10,000 turns as at 100.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import bindparam, case, literal, null, select
from sqlalchemy.engine import Connection

from ..errors import NothingToResume, SessionCompleted, SessionFailed, SessionNotFound
from ..state.resume import ResumeContext, completed_phase_ids, next_phase_id, reconstruct_history
from ..store import PhaseOutputRecord, SessionRecord, StateRecord
from .conversation import WindowMessage, fetch_window
from .crypto import Sealer
from .driver import DriverQuery
from .memory import fetch_steps_from_message, step_window
from .phases import OUTPUT_COLUMNS, output_record
from .schema import PHASE_OUTPUTS, SESSIONS
from .sessions import session_record, session_select
from .sql import AnyRow
from .zones import fetch_state

__all__ = ["DEFAULT_MAX_STEPS", "Loaded", "read_resume", "resume_context"]

DEFAULT_MAX_STEPS: Final = 100
"""Memory steps a resume loads at most: the newest ones — from the step of the oldest
message of the reconstructed window (SPEC §5) on, when the window is full, so the steps
are the window's exchanges with the tool calls between them."""


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
    window_texts: dict[int, str]
    """The window's messages, opened, by id: the steps that carry them reuse the text."""


def read_resume(
    conn: Connection,
    session_id: str,
    *,
    user_id: str,
    sealer: Sealer,
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
    by_id, outputs_of = _statements(tuple(phase_ids))
    # The owner is in the query: a foreign id reads no row, exactly as a missing one.
    found = by_id.rows(conn, {"b_id": session_id, "b_user": user_id})
    if not found:
        raise SessionNotFound(session_id)
    row = found[0]
    session = session_record(row, sealer)
    if session.status == "completed":
        raise SessionCompleted(session_id)
    if session.status == "failed":
        raise SessionFailed(session_id)
    outputs = [
        output_record(r, sealer, prompt_marker=True)
        for r in outputs_of.rows(conn, {"b_id": session_id})
    ]
    done = completed_phase_ids(outputs)
    if not done:
        raise NothingToResume(session_id)
    messages: list[WindowMessage] = []
    older = False
    if max_pairs:
        # One message more than the window: whether older ones exist.
        messages = fetch_window(conn, session_id, 2 * max_pairs + 1, sealer)
        older = len(messages) > 2 * max_pairs
        messages = messages[-2 * max_pairs :]
    stored = int(row.memory_steps)
    first, end = step_window(stored, newest=max_steps)
    # With messages older than the window, the steps of those exchanges are not in the
    # resumed context: they are neither read nor decoded. (Steps that carry no message
    # id — stored apart from their message — are read up to ``max_steps``.)
    oldest = messages[0].id if older else None
    first, step_rows = fetch_steps_from_message(conn, session_id, first, end, oldest)
    return Loaded(
        session=session,
        next_phase_id=next_phase_id(phase_ids, outputs),
        context=resume_context(outputs, done, messages, phase_ids, max_pairs),
        outputs=[_without_prompts(o) for o in outputs],
        state=fetch_state(conn, session_id, sealer),
        stored_steps=stored,
        steps_from=first,
        step_rows=step_rows,
        window_texts={message.id: message.content for message in messages},
    )


def resume_context(
    outputs: Sequence[PhaseOutputRecord],
    done: Sequence[str],
    messages: Sequence[WindowMessage],
    phase_ids: Sequence[str],
    max_pairs: int,
) -> ResumeContext:
    """The context a resume hands its agent: the history of the completed outputs that
    had a prompt and the window's ``messages`` (oldest first), and where the phases stand
    (``done``: the completed phase ids, at least one)."""
    window = [o for o in outputs if o.status == "completed" and o.system_prompt is not None]
    return ResumeContext(
        history=reconstruct_history(window[-max_pairs:] if max_pairs else [], messages, max_pairs),
        last_completed_phase=done[-1],
        total_phases=len(phase_ids),
        completed_phases=sum(1 for phase_id in phase_ids if phase_id in done),
    )


@functools.lru_cache(maxsize=8)
def _statements(phase_ids: tuple[str, ...]) -> tuple[DriverQuery, DriverQuery]:
    """The session (with its stored step count) and its outputs, by ``b_id``: built and
    compiled once per manifest, run on the driver's cursor (a Core statement's execution
    costs several times what SQLite takes to run these).

    The outputs carry ``user_input`` (the window needs it) but the system prompt only as
    present (``""``) or not (``None``): it can be long.
    """
    by_id = (
        session_select(phase_ids)
        .add_columns(SESSIONS.c.memory_steps)
        .where(SESSIONS.c.id == bindparam("b_id"), SESSIONS.c.user_id == bindparam("b_user"))
    )
    has_prompt = case((PHASE_OUTPUTS.c.system_prompt.is_(None), null()), else_=literal(""))
    outputs = (
        select(
            *(has_prompt.label(c.key) if c.key == "system_prompt" else c for c in OUTPUT_COLUMNS)
        )
        .where(PHASE_OUTPUTS.c.session_id == bindparam("b_id"))
        .order_by(PHASE_OUTPUTS.c.created_at, PHASE_OUTPUTS.c.id)
    )
    return DriverQuery(by_id, typed=True), DriverQuery(outputs, typed=True)


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
