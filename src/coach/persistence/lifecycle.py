"""Erasing data (voice conversations are personal data): a session, a person, and
sessions past a retention period — each in one transaction, everything of them.

Rows are deleted table by table (children first) rather than left to the foreign keys'
cascades, so an erase does not depend on how a connection was configured.

Erasing sessions (not a whole person) also takes them out of the same person's other
sessions, in the same transaction (:func:`erase_sessions`, the rules in
:mod:`coach.state.retention`): the tool results and search queries in their memory
steps (re-encoded and re-signed through the codec), the search results in their zones
and phase snapshots, and the queries in their delta log. A memory step is otherwise
never rewritten; this is the one exception.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from sqlalchemy import bindparam, delete, select
from sqlalchemy.engine import Connection

from ..errors import CorruptBlob
from ..state.retention import Redactor, RemovedSession
from ..store import WriteZone
from .codec import EncodedStep, StepCodec
from .crypto import Sealer
from .schema import (
    AGENT_STEPS,
    CONVERSATIONS,
    DELTAS,
    PERSON_DELTAS,
    PERSONS,
    PHASE_OUTPUTS,
    SESSIONS,
    STATES,
    USERS,
)
from .zones import state_record, write_zones

__all__ = ["delete_sessions", "delete_user", "erase_sessions"]

log = logging.getLogger("coach.persistence")

_CHILDREN: Final = (DELTAS, STATES, AGENT_STEPS, CONVERSATIONS, PHASE_OUTPUTS)
_CHUNK: Final = 500


def delete_sessions(conn: Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions and every row of theirs; return how many sessions there were."""
    deleted = 0
    for start in range(0, len(session_ids), _CHUNK):
        ids = list(session_ids[start : start + _CHUNK])
        for table in _CHILDREN:
            conn.execute(delete(table).where(table.c.session_id.in_(ids)))
        deleted += conn.execute(delete(SESSIONS).where(SESSIONS.c.id.in_(ids))).rowcount
    return deleted


def delete_user(conn: Connection, user_id: str) -> int:
    """Delete the person, all their sessions and what coach remembered about them; return
    how many sessions that was."""
    ids = list(conn.scalars(select(SESSIONS.c.id).where(SESSIONS.c.user_id == user_id)))
    deleted = delete_sessions(conn, ids)
    for table in (PERSON_DELTAS, PERSONS):  # what coach remembered about them
        conn.execute(delete(table).where(table.c.user_id == user_id))
    conn.execute(delete(USERS).where(USERS.c.id == user_id))
    return deleted


def erase_sessions(
    conn: Connection,
    codec: StepCodec,
    session_ids: Sequence[str],
    now: datetime,
    sealers: dict[str, Sealer],
) -> int:
    """Delete the sessions like :func:`delete_sessions`, after taking what the same
    people's other sessions hold of them out of those sessions (``sealers``: user id ->
    sealer of their owners; a person without one was erased, and is only deleted);
    return how many sessions there were."""
    removed: list[RemovedSession] = []
    users: set[str] = set()
    for start in range(0, len(session_ids), _CHUNK):
        ids = list(session_ids[start : start + _CHUNK])
        removed += _removed(conn, ids, users, sealers)
    if removed:
        gone = set(session_ids)
        others = conn.execute(
            select(SESSIONS.c.id, SESSIONS.c.user_id)
            .where(SESSIONS.c.user_id.in_(users))
            .order_by(SESSIONS.c.id)
        ).all()
        redactor = Redactor(removed)
        for other, owner in others:
            if other not in gone:
                _redact_session(conn, codec, redactor, other, now, sealers[owner])
    return delete_sessions(conn, session_ids)


def _removed(
    conn: Connection, ids: list[str], users: set[str], sealers: dict[str, Sealer]
) -> list[RemovedSession]:
    """The sessions as other sessions may quote them (adding their owners to ``users``)."""
    owners = {
        sid: (user_id, sealers[user_id], challenge)
        for sid, user_id, challenge in conn.execute(
            select(SESSIONS.c.id, SESSIONS.c.user_id, SESSIONS.c.design_challenge).where(
                SESSIONS.c.id.in_(ids)
            )
        )
        if user_id in sealers
    }
    work: dict[str, list[dict[str, object]]] = {sid: [] for sid in owners}
    for sid, data in conn.execute(
        select(STATES.c.session_id, STATES.c.data).where(STATES.c.session_id.in_(list(owners)))
    ):
        work[sid].append(dict(owners[sid][1].open("session_state", "data", (sid,), data) or {}))
    for sid, phase_id, snapshot in conn.execute(
        select(
            PHASE_OUTPUTS.c.session_id, PHASE_OUTPUTS.c.phase_id, PHASE_OUTPUTS.c.state_snapshot
        ).where(
            PHASE_OUTPUTS.c.session_id.in_(list(owners)),
            PHASE_OUTPUTS.c.state_snapshot.is_not(None),
        )
    ):
        zones = owners[sid][1].open("phase_outputs", "state_snapshot", (sid, phase_id), snapshot)
        work[sid].append(dict((zones or {}).get("data") or {}))
    found = []
    for sid, (user_id, sealer, challenge) in owners.items():
        users.add(user_id)
        opened = sealer.open("sessions", "design_challenge", (sid,), challenge)
        found.append(RemovedSession(sid, opened, tuple(work[sid])))
    return found


_STEP_UPDATE: Final = (
    AGENT_STEPS.update()
    .where(AGENT_STEPS.c.session_id == bindparam("b_id"), AGENT_STEPS.c.seq == bindparam("b_seq"))
    .values(
        codec=bindparam("b_codec"),
        version=bindparam("b_version"),
        signature=bindparam("b_signature"),
        payload=bindparam("b_payload"),
    )
)


def _redact_session(
    conn: Connection,
    codec: StepCodec,
    redactor: Redactor,
    session_id: str,
    now: datetime,
    sealer: Sealer,
) -> None:
    """Take what ``redactor`` finds out of one session: zones (with their deltas), phase
    snapshots, the delta log's queries and the memory steps' tool items."""
    row = conn.execute(
        select(STATES.c.session_id, STATES.c.step, STATES.c.data, STATES.c.template, STATES.c.view)
        .where(STATES.c.session_id == session_id)
        .with_for_update()
    ).one_or_none()
    if row is not None:
        state = state_record(row, sealer)
        zones = {"data": state.data, "template": state.template, "view": state.view}
        if (changed := redactor.zones(zones)) is not None:
            ops = [
                WriteZone(session_id, zone, changed.zones[zone], delta, state.step + offset)
                for offset, (zone, delta) in enumerate(changed.deltas)
            ]
            write_zones(conn, session_id, ops, now, sealer)
    for out in conn.execute(
        select(PHASE_OUTPUTS.c.id, PHASE_OUTPUTS.c.phase_id, PHASE_OUTPUTS.c.state_snapshot).where(
            PHASE_OUTPUTS.c.session_id == session_id, PHASE_OUTPUTS.c.state_snapshot.is_not(None)
        )
    ).all():
        bound = (session_id, out.phase_id)
        opened = sealer.open("phase_outputs", "state_snapshot", bound, out.state_snapshot)
        if (snapshot := redactor.zones(opened)) is not None:
            sealed = sealer.seal("phase_outputs", "state_snapshot", bound, snapshot.zones)
            conn.execute(
                PHASE_OUTPUTS.update()
                .where(PHASE_OUTPUTS.c.id == out.id)
                .values(state_snapshot=sealed)
            )
    for delta in conn.execute(
        select(DELTAS.c.step, DELTAS.c.action).where(DELTAS.c.session_id == session_id)
    ).all():
        bound_delta = (session_id, delta.step)
        opened_action = sealer.open("state_deltas", "action", bound_delta, delta.action)
        if (action := redactor.action(opened_action or {})) is not None:
            conn.execute(
                DELTAS.update()
                .where(DELTAS.c.session_id == session_id, DELTAS.c.step == delta.step)
                .values(action=sealer.seal("state_deltas", "action", bound_delta, action))
            )
    _redact_steps(conn, codec, redactor, session_id, sealer)


def _redact_steps(
    conn: Connection, codec: StepCodec, redactor: Redactor, session_id: str, sealer: Sealer
) -> None:
    """Rewrite the tool items that quote an erased session, each decoded (signature and
    allow-list checked) and encoded and signed again by ``codec`` at its position.
    Messages whose text is a conversation row are the session's own words: not read."""
    rows = conn.execute(
        select(
            AGENT_STEPS.c.seq,
            AGENT_STEPS.c.codec,
            AGENT_STEPS.c.version,
            AGENT_STEPS.c.signature,
            AGENT_STEPS.c.payload,
        ).where(AGENT_STEPS.c.session_id == session_id, AGENT_STEPS.c.message_id.is_(None))
    )
    updates = []
    for row in rows:
        try:
            payload = sealer.open("agent_steps", "payload", (session_id, row.seq), row.payload)
            step = codec.decode(session_id, EncodedStep(*row[:4], payload))
        except CorruptBlob as exc:  # never loaded either; nothing of it can be trusted
            log.warning("a memory step cannot be checked for erased sessions: %s", exc)
            continue
        if (rewritten := redactor.step(step)) is None:
            continue
        encoded = codec.sign(session_id, row.seq, codec.dumps(rewritten))
        updates.append(
            {
                "b_id": session_id,
                "b_seq": row.seq,
                "b_codec": encoded.codec,
                "b_version": encoded.version,
                "b_signature": encoded.signature,
                "b_payload": sealer.seal(
                    "agent_steps", "payload", (session_id, row.seq), encoded.payload
                ),
            }
        )
    if updates:
        conn.execute(_STEP_UPDATE, updates)
