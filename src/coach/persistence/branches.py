"""Branching a session (SPEC §8a): a new session holding another exactly as it was when
one of its phases ended, in one transaction; the original is only read.

Where a phase ends is recorded once the turn that completed it is over
(``phase_outputs.memory_end``, ``state_end``, ``state_snapshot``; see
:class:`~coach.store.ClosePhase`), so the copy is of whole turns: the phase outputs up to
that phase, the memory steps before ``memory_end`` (re-signed for the branch, each
checked first), the conversation messages those steps carry and every message before
them, the zones as they were then and the delta log up to ``state_end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.engine import Connection

from ..errors import BranchRefused, CorruptBlob, SessionNotFound
from .codec import EncodedStep, StepCodec
from .schema import AgentStep, SessionConversation, new_id
from .sql import AGENT_STEPS, CONVERSATIONS, DELTAS, PHASE_OUTPUTS, SESSIONS, STATES

__all__ = ["branch"]

_C = SessionConversation

_LAST_CARRIED: Final = (
    select(_C.created_at, _C.id)
    .join(AgentStep, AgentStep.message_id == _C.id)
    .where(AgentStep.session_id == bindparam("b_id"), AgentStep.seq < bindparam("b_end"))
    .order_by(_C.created_at.desc(), _C.id.desc())
    .limit(1)
)


def branch(
    conn: Connection,
    codec: StepCodec,
    source_id: str,
    phase_id: str,
    *,
    phase_ids: Sequence[str],
    now: datetime,
) -> str:
    """Create the branch of ``source_id`` from the end of ``phase_id``; return its id.

    Raises:
        SessionNotFound: There is no such session.
        BranchRefused: The phase is unknown, not completed, the last one, or its end was
            not recorded (completed before this release); or a step does not verify.
    """
    source = conn.execute(SESSIONS.select().where(SESSIONS.c.id == source_id)).one_or_none()
    if source is None:
        raise SessionNotFound(source_id)
    if phase_id not in phase_ids:
        raise BranchRefused(source_id, phase_id, f"There is no phase called {phase_id!r}.")
    ended = conn.execute(
        PHASE_OUTPUTS.select().where(
            PHASE_OUTPUTS.c.session_id == source_id, PHASE_OUTPUTS.c.phase_id == phase_id
        )
    ).one_or_none()
    name = ended.phase_name if ended is not None else phase_id
    if ended is None or ended.status != "completed":
        raise BranchRefused(
            source_id, phase_id, f"{name} is not completed yet, so there is nothing to branch."
        )
    if ended.memory_end is None or ended.state_end is None:
        raise BranchRefused(
            source_id,
            phase_id,
            f"{name} was completed before branching existed; branch from a later phase.",
        )
    index = list(phase_ids).index(phase_id)
    if index + 1 == len(phase_ids):
        raise BranchRefused(
            source_id, phase_id, f"{name} is the last phase: there is nothing after it to redo."
        )
    upcoming = phase_ids[index + 1]
    memory_end, state_end = ended.memory_end, ended.state_end

    branch_id = new_id()
    conn.execute(
        SESSIONS.insert().values(
            id=branch_id,
            user_id=source.user_id,
            design_challenge=source.design_challenge,
            status="in_progress",
            current_agent=None,  # set by the agent that takes it up
            current_phase_id=upcoming,
            room=None,
            memory_steps=memory_end,
            parent_session_id=source_id,
            branched_from_phase=phase_id,
            created_at=now,
            updated_at=now,
        )
    )
    _copy_outputs(conn, source_id, branch_id, phase_ids[: index + 1])
    messages = _copy_messages(conn, source_id, branch_id, memory_end)
    _copy_steps(conn, codec, source_id, branch_id, memory_end, messages, phase_id)
    snapshot = ended.state_snapshot or {}
    conn.execute(
        STATES.insert().values(
            session_id=branch_id,
            step=state_end,
            data=snapshot.get("data", {}),
            template=snapshot.get("template", {}),
            view=snapshot.get("view", {}),
            created_at=now,
            updated_at=now,
        )
    )
    _copy_rows(conn, DELTAS, source_id, branch_id, DELTAS.c.step <= state_end)
    return branch_id


def _copy_rows(conn: Connection, table: Any, source_id: str, branch_id: str, *where: Any) -> None:
    """Copy ``table``'s rows of the source that match ``where``, as the branch's."""
    rows = conn.execute(table.select().where(table.c.session_id == source_id, *where)).all()
    if rows:
        conn.execute(table.insert(), [{**row._asdict(), "session_id": branch_id} for row in rows])


def _copy_outputs(conn: Connection, source_id: str, branch_id: str, phases: Sequence[str]) -> None:
    rows = conn.execute(
        PHASE_OUTPUTS.select()
        .where(PHASE_OUTPUTS.c.session_id == source_id, PHASE_OUTPUTS.c.phase_id.in_(phases))
        .order_by(PHASE_OUTPUTS.c.created_at, PHASE_OUTPUTS.c.id)
    ).all()
    copies = [{**row._asdict(), "id": new_id(), "session_id": branch_id} for row in rows]
    if copies:
        conn.execute(PHASE_OUTPUTS.insert(), copies)


def _copy_messages(
    conn: Connection, source_id: str, branch_id: str, memory_end: int
) -> dict[int, int]:
    """Copy the messages up to the last one the kept steps carry; old id -> new id."""
    last = conn.execute(_LAST_CARRIED, {"b_id": source_id, "b_end": memory_end}).one_or_none()
    if last is None:
        return {}
    at, last_id = last
    rows = conn.execute(
        CONVERSATIONS.select()
        .where(
            CONVERSATIONS.c.session_id == source_id,
            or_(
                CONVERSATIONS.c.created_at < at,
                and_(CONVERSATIONS.c.created_at == at, CONVERSATIONS.c.id <= last_id),
            ),
        )
        .order_by(CONVERSATIONS.c.created_at, CONVERSATIONS.c.id)
    ).all()
    copies = [
        {k: v for k, v in row._asdict().items() if k != "id"} | {"session_id": branch_id}
        for row in rows
    ]
    insert = CONVERSATIONS.insert().returning(CONVERSATIONS.c.id, sort_by_parameter_order=True)
    new_ids = list(conn.scalars(insert, copies).all())
    return {row.id: new for row, new in zip(rows, new_ids, strict=True)}


def _copy_steps(
    conn: Connection,
    codec: StepCodec,
    source_id: str,
    branch_id: str,
    memory_end: int,
    messages: dict[int, int],
    phase_id: str,
) -> None:
    """Copy steps ``0 .. memory_end - 1``: each verified as the source's, then signed as
    the branch's (the same payload; the signature binds the session)."""
    rows = conn.execute(
        select(*AGENT_STEPS.c, _C.content)
        .outerjoin(_C, _C.id == AgentStep.message_id)
        .where(AgentStep.session_id == source_id, AgentStep.seq < memory_end)
        .order_by(AgentStep.seq)
    ).all()
    if len(rows) != memory_end:
        raise BranchRefused(
            source_id, phase_id, "Its stored memory is incomplete, so it cannot be branched."
        )
    copies = []
    for step in rows:
        text = step.content
        stored = EncodedStep(step.seq, step.codec, step.version, step.signature, step.payload, text)
        try:
            codec.decode(source_id, stored)
        except CorruptBlob:
            raise BranchRefused(
                source_id, phase_id, "Its stored memory does not verify, so it cannot be branched."
            ) from None
        signature = codec.signature(
            branch_id, step.seq, step.payload, codec=step.codec, version=step.version, text=text
        )
        copies.append(
            {
                "session_id": branch_id,
                "seq": step.seq,
                "codec": step.codec,
                "version": step.version,
                "signature": signature,
                "payload": step.payload,
                "message_id": messages.get(step.message_id) if step.message_id else None,
                "created_at": step.created_at,
            }
        )
    if copies:
        conn.execute(AGENT_STEPS.insert(), copies)
