"""Branching a session (SPEC §8a): a new session holding another exactly as it was when
one of its phases ended (:func:`branch`) or after one of its turns
(:func:`branch_after_message`), in one transaction; the original is only read.

Where a phase ends is recorded once the turn that completed it is over
(``phase_outputs.memory_end``, ``state_end``, ``state_snapshot``; see
:class:`~coach.store.ClosePhase`), so the copy is of whole turns: the phase outputs up to
that phase, the memory steps before ``memory_end`` (re-signed for the branch, each
checked first), the conversation messages those steps carry and every message before
them, the zones as they were then and the delta log up to ``state_end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.engine import Connection

from ..errors import BranchRefused, CorruptBlob, SessionNotFound
from .codec import EncodedStep, StepCodec
from .crypto import Sealer
from .memory import opened_steps
from .schema import AGENT_STEPS, CONVERSATIONS, DELTAS, PHASE_OUTPUTS, SESSIONS, STATES, new_id

__all__ = ["branch", "branch_after_message"]

_C = CONVERSATIONS.c

_LAST_CARRIED: Final = (
    select(_C.created_at, _C.id)
    .join(AGENT_STEPS, AGENT_STEPS.c.message_id == _C.id)
    .where(AGENT_STEPS.c.session_id == bindparam("b_id"), AGENT_STEPS.c.seq < bindparam("b_end"))
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
    sealer: Sealer,
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

    bound = (source_id, phase_id)
    snapshot = sealer.open("phase_outputs", "state_snapshot", bound, ended.state_snapshot) or {}
    return _create(
        conn,
        codec,
        sealer,
        source,
        _Cut(phase_id, upcoming, phase_ids[: index + 1], memory_end, state_end, snapshot, None),
        now=now,
    )


def branch_after_message(
    conn: Connection,
    codec: StepCodec,
    source_id: str,
    message_id: int,
    *,
    phase_ids: Sequence[str],
    now: datetime,
    sealer: Sealer,
) -> str:
    """Create the branch of ``source_id`` as it was after the turn of conversation row
    ``message_id``; return its id.

    The turn ends where the next user message starts one: the branch holds the messages
    before that one, the memory steps before the first step carrying it (or a later
    message) — so never a call without its output —, the deltas written by the end of
    the turn (``created_at`` up to the turn's last message) and the phases completed by
    then (``memory_end`` within the kept steps; one with no recorded end by its time).
    The zones are the ones recorded at that very step: the live state when the turn is
    the latest, else a phase's snapshot, else none (step 0). Deltas hold causes, not
    values, so a step in between cannot be rebuilt: that is refused.

    Raises:
        SessionNotFound: There is no such session.
        BranchRefused: The message is not one of the session's; the zones of that turn
            were not recorded; or a step does not verify.
    """
    source = conn.execute(SESSIONS.select().where(SESSIONS.c.id == source_id)).one_or_none()
    if source is None:
        raise SessionNotFound(source_id)
    where = f"message {message_id}"
    said = conn.execute(
        select(_C.created_at, _C.id).where(_C.session_id == source_id, _C.id == message_id)
    ).one_or_none()
    if said is None:
        raise BranchRefused(
            source_id,
            where,
            f"Message {message_id} is not in this session, so it cannot be branched from.",
        )
    after = or_(
        _C.created_at > said.created_at, and_(_C.created_at == said.created_at, _C.id > said.id)
    )
    following = conn.execute(
        select(_C.created_at, _C.id)
        .where(_C.session_id == source_id, _C.role == "user", after)
        .order_by(_C.created_at, _C.id)
        .limit(1)
    ).one_or_none()
    state = conn.execute(STATES.select().where(STATES.c.session_id == source_id)).one_or_none()
    last_said = None
    if following is None:  # the latest turn: everything so far
        memory_end, kept = int(source.memory_steps), _C.session_id == source_id
        state_end = int(state.step) if state is not None else 0
    else:
        at, next_id = following
        kept = or_(_C.created_at < at, and_(_C.created_at == at, _C.id < next_id))
        first = conn.scalar(
            select(func.min(AGENT_STEPS.c.seq))
            .join(CONVERSATIONS, _C.id == AGENT_STEPS.c.message_id)
            .where(AGENT_STEPS.c.session_id == source_id, ~kept)
        )
        memory_end = int(source.memory_steps) if first is None else int(first)
        last_said = conn.scalar(
            select(func.max(_C.created_at)).where(_C.session_id == source_id, kept)
        )
        state_end = int(
            conn.scalar(
                select(func.max(DELTAS.c.step)).where(
                    DELTAS.c.session_id == source_id, DELTAS.c.created_at <= last_said
                )
            )
            or 0
        )
    outputs = conn.execute(
        PHASE_OUTPUTS.select().where(PHASE_OUTPUTS.c.session_id == source_id)
    ).all()
    snapshot = _zones_at(sealer, state, outputs, state_end)
    if snapshot is None:
        raise BranchRefused(
            source_id,
            where,
            "The board changed during that part of the session and its state then was "
            "not recorded; branch from the end of a phase or from the latest turn.",
        )
    done = {
        o.phase_id
        for o in outputs
        if o.status == "completed"
        and (
            following is None
            or (
                o.memory_end <= memory_end
                if o.memory_end is not None
                else o.created_at <= last_said
            )
        )
    }
    completed = [p for p in phase_ids if p in done]
    at_phase = completed[-1] if completed else None
    index = phase_ids.index(at_phase) if at_phase is not None else -1
    upcoming = phase_ids[index + 1] if index + 1 < len(phase_ids) else None
    cut = _Cut(where, upcoming, completed, memory_end, state_end, snapshot, kept)
    return _create(conn, codec, sealer, source, cut, now=now, branched_from=at_phase)


@dataclass(frozen=True)
class _Cut:
    """Where a branch is cut: what of the source it holds."""

    label: str
    """The phase id or ``message N``, for refusals."""
    upcoming: str | None
    phases: Sequence[str]
    memory_end: int
    state_end: int
    zones: dict[str, Any]
    messages: Any
    """The condition on conversation rows to keep; ``None``: up to the last one the
    kept steps carry (the phase branch), or all of them."""


def _zones_at(
    sealer: Sealer, state: Any, outputs: Sequence[Any], step: int
) -> dict[str, Any] | None:
    """The zones as recorded at state ``step``: the live row, a phase snapshot, or empty
    at step 0; ``None`` when nothing recorded them."""
    if state is not None and int(state.step) == step:
        opened = sealer.open_row("session_state", state._asdict())
        return {zone: opened[zone] for zone in ("data", "template", "view")}
    for output in outputs:
        if output.state_end == step and output.state_snapshot is not None:
            bound = (output.session_id, output.phase_id)
            return dict(
                sealer.open("phase_outputs", "state_snapshot", bound, output.state_snapshot)
            )
    return {} if step == 0 else None


def _moved(sealer: Sealer, table: str, row: Any, **changes: Any) -> dict[str, Any]:
    """A source row as the branch's: opened where it was, changed, sealed where it goes."""
    opened = sealer.open_row(table, row._asdict()) | changes
    return sealer.seal_row(table, opened)


def _create(
    conn: Connection,
    codec: StepCodec,
    sealer: Sealer,
    source: Any,
    cut: _Cut,
    *,
    now: datetime,
    branched_from: str | None = None,
) -> str:
    """Insert the branch session and copy into it what ``cut`` keeps of ``source``."""
    source_id = source.id
    branch_id = new_id()
    challenge = sealer.open("sessions", "design_challenge", (source_id,), source.design_challenge)
    conn.execute(
        SESSIONS.insert().values(
            id=branch_id,
            user_id=source.user_id,
            design_challenge=sealer.seal("sessions", "design_challenge", (branch_id,), challenge),
            status="in_progress",
            current_agent=None,  # set by the agent that takes it up
            current_phase_id=cut.upcoming,
            room=None,
            memory_steps=cut.memory_end,
            parent_session_id=source_id,
            branched_from_phase=branched_from if branched_from is not None else cut.label,
            created_at=now,
            updated_at=now,
        )
    )
    _copy_outputs(conn, sealer, source_id, branch_id, cut.phases)
    messages = _copy_messages(conn, sealer, source_id, branch_id, cut.memory_end, cut.messages)
    _copy_steps(conn, codec, sealer, source_id, branch_id, cut.memory_end, messages, cut.label)
    snapshot = cut.zones
    zones = {zone: snapshot.get(zone, {}) for zone in ("data", "template", "view")}
    conn.execute(
        STATES.insert().values(
            **sealer.seal_row("session_state", {"session_id": branch_id, **zones}),
            step=cut.state_end,
            created_at=now,
            updated_at=now,
        )
    )
    deltas = conn.execute(
        DELTAS.select().where(DELTAS.c.session_id == source_id, DELTAS.c.step <= cut.state_end)
    ).all()
    if deltas:
        copies = [_moved(sealer, "state_deltas", row, session_id=branch_id) for row in deltas]
        conn.execute(DELTAS.insert(), copies)
    return branch_id


def _copy_outputs(
    conn: Connection, sealer: Sealer, source_id: str, branch_id: str, phases: Sequence[str]
) -> None:
    rows = conn.execute(
        PHASE_OUTPUTS.select()
        .where(PHASE_OUTPUTS.c.session_id == source_id, PHASE_OUTPUTS.c.phase_id.in_(phases))
        .order_by(PHASE_OUTPUTS.c.created_at, PHASE_OUTPUTS.c.id)
    ).all()
    copies = [
        _moved(sealer, "phase_outputs", row, id=new_id(), session_id=branch_id) for row in rows
    ]
    if copies:
        conn.execute(PHASE_OUTPUTS.insert(), copies)


def _copy_messages(
    conn: Connection, sealer: Sealer, source_id: str, branch_id: str, memory_end: int, kept: Any
) -> dict[int, int]:
    """Copy the messages ``kept`` selects (``None``: up to the last one the kept steps
    carry); old id -> new id."""
    if kept is None:
        last = conn.execute(_LAST_CARRIED, {"b_id": source_id, "b_end": memory_end}).one_or_none()
        if last is None:
            return {}
        at, last_id = last
        kept = or_(
            CONVERSATIONS.c.created_at < at,
            and_(CONVERSATIONS.c.created_at == at, CONVERSATIONS.c.id <= last_id),
        )
    rows = conn.execute(
        CONVERSATIONS.select()
        .where(CONVERSATIONS.c.session_id == source_id, kept)
        .order_by(CONVERSATIONS.c.created_at, CONVERSATIONS.c.id)
    ).all()
    if not rows:
        return {}
    copies = []
    for row in rows:
        copy = _moved(sealer, "session_conversations", row, session_id=branch_id)
        del copy["id"]
        copies.append(copy)
    insert = CONVERSATIONS.insert().returning(CONVERSATIONS.c.id, sort_by_parameter_order=True)
    new_ids = list(conn.scalars(insert, copies).all())
    return {row.id: new for row, new in zip(rows, new_ids, strict=True)}


def _copy_steps(
    conn: Connection,
    codec: StepCodec,
    sealer: Sealer,
    source_id: str,
    branch_id: str,
    memory_end: int,
    messages: dict[int, int],
    phase_id: str,
) -> None:
    """Copy steps ``0 .. memory_end - 1``: each verified as the source's, then signed as
    the branch's (the same payload; the signature binds the session)."""
    rows = conn.execute(
        select(
            *AGENT_STEPS.c,
            _C.content,
            _C.created_at.label("message_at"),
            _C.role.label("message_role"),
        )
        .outerjoin(CONVERSATIONS, _C.id == AGENT_STEPS.c.message_id)
        .where(AGENT_STEPS.c.session_id == source_id, AGENT_STEPS.c.seq < memory_end)
        .order_by(AGENT_STEPS.c.seq)
    ).all()
    if len(rows) != memory_end:
        raise BranchRefused(
            source_id, phase_id, "Its stored memory is incomplete, so it cannot be branched."
        )
    copies = []
    for step in rows:
        try:
            ((_, _, _, _, payload, text),) = opened_steps(sealer, source_id, [step])
            stored = EncodedStep(step.seq, step.codec, step.version, step.signature, payload, text)
            codec.decode(source_id, stored)
        except CorruptBlob:
            raise BranchRefused(
                source_id, phase_id, "Its stored memory does not verify, so it cannot be branched."
            ) from None
        signature = codec.signature(
            branch_id, step.seq, payload, codec=step.codec, version=step.version, text=text
        )
        copies.append(
            {
                "session_id": branch_id,
                "seq": step.seq,
                "codec": step.codec,
                "version": step.version,
                "signature": signature,
                "payload": sealer.seal("agent_steps", "payload", (branch_id, step.seq), payload),
                "message_id": messages.get(step.message_id) if step.message_id else None,
                "created_at": step.created_at,
            }
        )
    if copies:
        conn.execute(AGENT_STEPS.insert(), copies)
