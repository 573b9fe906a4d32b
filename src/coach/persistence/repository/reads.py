"""The repository's reads (:class:`~coach.store.Reads`): each one read transaction,
its rows opened with their person's key."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ...errors import (
    SessionNotFound,
)
from ...state.resume import DEFAULT_MAX_PAIRS
from ...state.zones import Delta
from ...store import (
    MessageRecord,
    PersonRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    StepPage,
    UserRecord,
    identity_keys,
)
from ..conversation import conversation_select, message_record
from ..memory import StepLinks, fetch_steps, read_steps, step_links, stored_count
from ..person import fetch_person, person_deltas
from ..phases import output_record, outputs_select
from ..resume import DEFAULT_MAX_STEPS, read_resume
from ..schema import SESSIONS, STATES, USERS
from ..sessions import (
    recent_sessions_select,
    room_session_select,
    user_record,
    user_select,
    user_sessions_select,
)
from ..zones import delta_record, deltas_select, fetch_state
from .base import RepositoryBase

__all__ = ["ReadMethods"]


class ReadMethods(RepositoryBase):
    """The repository's reads (:class:`~coach.store.Reads`): each one read transaction,"""

    async def find_user(self, identity: str) -> UserRecord | None:
        return await self._find_user(identity_keys(identity))

    async def get_user(self, user_id: str) -> UserRecord | None:
        rows = await self._rows(user_select().where(USERS.c.id == user_id), "get_user")
        return user_record(rows[0], await self.vault.sealer(user_id)) if rows else None

    async def get_session(
        self, session_id: str, *, user_id: str | None = None
    ) -> SessionRecord | None:
        return await self._session(session_id, user_id=user_id, what="get_session")

    async def get_user_sessions(
        self, user_id: str, *, limit: int | None = None
    ) -> list[SessionRecord]:
        stmt = user_sessions_select(self._phase_ids, user_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        return await self._sessions(stmt, "get_user_sessions")

    async def count_user_sessions(self, user_id: str) -> int:
        stmt = select(func.count()).select_from(SESSIONS).where(SESSIONS.c.user_id == user_id)
        return int(await self._read(lambda conn: conn.scalar(stmt) or 0, "count_user_sessions"))

    async def get_past_work(self, user_id: str) -> list[tuple[str, dict[str, Any]]]:
        stmt = (
            select(SESSIONS.c.id, STATES.c.data)
            .join(STATES, STATES.c.session_id == SESSIONS.c.id)
            .where(SESSIONS.c.user_id == user_id)
            .order_by(SESSIONS.c.created_at.desc(), SESSIONS.c.id.desc())
        )
        rows = await self._rows(stmt, "get_past_work")
        sealer = await self._owners.of_person(user_id) if rows else None
        if sealer is None:
            return []
        return [
            (str(sid), dict(sealer.open("session_state", "data", (sid,), data) or {}))
            for sid, data in rows
        ]

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        stmt = recent_sessions_select(self._phase_ids, limit)
        return await self._sessions(stmt, "list_sessions", skip_erased=True)

    async def find_room_session(self, user_id: str, room: str) -> SessionRecord | None:
        stmt = room_session_select(self._phase_ids, user_id, room)
        found = await self._sessions(stmt, "find_room_session")
        return found[0] if found else None

    async def get_phase_outputs(
        self, session_id: str, *, include_prompts: bool = True
    ) -> list[PhaseOutputRecord]:
        stmt = outputs_select(session_id, include_prompts=include_prompts)
        rows = await self._rows(stmt, "get_phase_outputs")
        sealer = await self._owners.of_session(session_id) if rows else None
        return [output_record(row, sealer) for row in rows] if sealer is not None else []

    async def get_session_conversation(
        self,
        session_id: str,
        *,
        phase_id: str | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        from_end: bool = False,
        limit: int | None = None,
    ) -> list[MessageRecord]:
        stmt = conversation_select(
            session_id,
            phase_id=phase_id,
            after_id=after_id,
            before_id=before_id,
            from_end=from_end,
            limit=limit,
        )
        rows = await self._rows(stmt, "get_session_conversation")
        if before_id is not None or from_end:
            rows.reverse()
        sealer = await self._owners.of_session(session_id) if rows else None
        return [message_record(row, sealer) for row in rows] if sealer is not None else []

    async def agent_step_count(self, session_id: str) -> int:
        count = await self._read(lambda conn: stored_count(conn, session_id), "agent_step_count")
        return count or 0

    async def load_agent_state(
        self,
        session_id: str,
        *,
        newest: int | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[object]:
        first, end, rows = await self._read(
            lambda conn: read_steps(conn, session_id, newest=newest, since=since, limit=limit),
            "load_agent_state",
        )
        sealer = await self._owners.of_session(session_id) if rows else None
        return await self._decode(sealer, session_id, rows, first, end) if sealer else []

    async def get_step_page(
        self, session_id: str, *, before: int | None = None, limit: int
    ) -> StepPage:

        def unit(conn: Connection) -> tuple[int, int, list[Any], StepLinks]:
            count = stored_count(conn, session_id) or 0
            end = count if before is None else min(max(before, 0), count)
            first = max(0, end - max(limit, 0))
            rows = fetch_steps(conn, session_id, first, end)
            return first, end, rows, step_links(conn, session_id, first, end)

        first, end, rows, (message_ids, phase_ids) = await self._read(unit, "get_step_page")
        sealer = await self._owners.of_session(session_id) if rows else None
        steps = await self._decode(sealer, session_id, rows, first, end) if sealer else []
        if not steps:
            return StepPage(first, [], [], [])
        return StepPage(first, steps, message_ids, phase_ids)

    async def get_person(self, user_id: str) -> PersonRecord:
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            return PersonRecord(user_id, 0)
        return await self._read(lambda conn: fetch_person(conn, user_id, sealer), "get_person")

    async def get_person_deltas(self, user_id: str) -> list[Delta]:
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            return []
        return await self._read(
            lambda conn: person_deltas(conn, user_id, sealer), "get_person_deltas"
        )

    async def get_state(self, session_id: str) -> StateRecord:
        sealer = await self._owners.of_session(session_id)
        if sealer is None:
            return StateRecord(session_id, 0)
        return await self._read(lambda conn: fetch_state(conn, session_id, sealer), "get_state")

    async def get_deltas(
        self, session_id: str, since_step: int = 0, *, limit: int | None = None
    ) -> list[Delta]:
        stmt = deltas_select(session_id, since_step, limit)
        rows = await self._rows(stmt, "get_deltas")
        sealer = await self._owners.of_session(session_id) if rows else None
        if sealer is None:
            return []
        return [delta_record(row, sealer, ("state_deltas", session_id)) for row in rows]

    async def resume_session(
        self,
        session_id: str,
        *,
        user_id: str,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> ResumeResult:
        if max_pairs < 0:
            raise ValueError("max_pairs must not be negative")
        # The caller's key, and the owner in the query: a foreign id reads no row, as a
        # missing one does.
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise SessionNotFound(session_id)
        loaded = await self._read(
            lambda conn: read_resume(
                conn,
                session_id,
                user_id=user_id,
                sealer=sealer,
                phase_ids=self._phase_ids,
                max_pairs=max_pairs,
                max_steps=max_steps,
            ),
            "resume_session",
        )
        memory = await self._decode(
            sealer,
            session_id,
            list(loaded.step_rows),
            loaded.steps_from,
            loaded.stored_steps,
            loaded.window_texts,
        )
        return ResumeResult(
            session=loaded.session,
            next_phase_id=loaded.next_phase_id,
            context=loaded.context,
            memory=memory,
            outputs=loaded.outputs,
            state=loaded.state,
            stored_steps=loaded.stored_steps,
        )
