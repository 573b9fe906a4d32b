"""People and sessions made, branched and erased (:class:`~coach.store.Lifecycle`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from ...errors import (
    BranchRefused,
    InvalidWrite,
    SessionNotFound,
    StorageError,
)
from ...state.zones import Delta, DeltaSpec
from ...store import (
    PersonRecord,
    PhaseDone,
    SavePhaseOutput,
    SessionRecord,
    UserRecord,
    check_identity,
    clean_text,
    identity_keys,
)
from ...store.text import MAX_IDENTITY
from ..branches import branch, branch_after_message
from ..lifecycle import delete_user, erase_sessions
from ..person import write_person
from ..schema import SESSION_STATUSES, USERS, new_id, utcnow
from ..sessions import (
    expired_select,
    insert_session,
    insert_user,
    session_record,
)
from ..sql import check_status
from .base import RepositoryBase

__all__ = ["LifecycleMethods"]


class LifecycleMethods(RepositoryBase):
    """People and sessions made, branched and erased (:class:`~coach.store.Lifecycle`)."""

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        identity = check_identity(identity)
        display_name = clean_text(display_name)
        if display_name is not None and len(display_name) > MAX_IDENTITY:
            raise InvalidWrite(f"A display name can have at most {MAX_IDENTITY} characters.")
        identity_hash = await self.vault.identity_hash(identity)
        for _ in range(3):
            found = await self._find_user([identity])
            if found is not None:
                if display_name is not None and display_name != found.display_name:
                    return await self._rename(found, display_name)
                return found
            user_id = new_id()
            sealer = await self.vault.create(user_id)
            now = self._clock()
            add = functools.partial(
                insert_user,
                user_id=user_id,
                identity_hash=identity_hash,
                identity=identity,
                display_name=display_name,
                sealer=sealer,
                now=now,
            )
            created = await self._db.run(add, write=True, what="get_or_create_user")
            if created is not None:
                return created
            await self.vault.destroy([user_id])  # another worker created them first
        raise StorageError(f"get_or_create_user failed: {identity_hash[:12]} keeps changing")

    async def _rename(self, user: UserRecord, display_name: str) -> UserRecord:
        sealer = await self.vault.sealer(user.id)
        sealed = sealer.seal("users", "display_name", (user.id,), display_name)
        stmt = (
            USERS.update()
            .where(USERS.c.id == user.id)
            .values(display_name=sealed, updated_at=self._clock())
        )
        await self._db.run(lambda conn: conn.execute(stmt), write=True, what="get_or_create_user")
        return dataclasses.replace(user, display_name=display_name)

    async def create_session(
        self,
        user_id: str,
        design_challenge: str | None = None,
        *,
        room: str | None = None,
        first_phase: PhaseDone | None = None,
    ) -> SessionRecord:
        now = self._clock()
        session = SessionRecord(
            *(new_id(), user_id, design_challenge, "in_progress", None, None, now, now),
            room=room,
        )
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise StorageError(f"create_session failed: there is no user {user_id[:40]}")
        self._owners.remember(session.id, user_id)
        ops = []
        if first_phase is not None:
            done = first_phase
            ops.append(
                SavePhaseOutput(
                    *(session.id, done.phase_id, done.phase_name, "completed"),
                    *(done.system_prompt, done.user_input, done.output),
                )
            )
            if done.phase_id in self._phase_ids:
                session = dataclasses.replace(session, completed_phases=1)
        await self._apply(
            ops, "create_session", before=lambda conn: insert_session(conn, session, sealer)
        )
        return session

    async def branch_session(
        self, session_id: str, phase_id: str | None = None, *, after_message: int | None = None
    ) -> SessionRecord:
        now = self._clock()
        point = phase_id if after_message is None else after_message
        if point is None or (phase_id is not None and after_message is not None):
            raise BranchRefused(
                session_id, phase_id or "", "Branch from a phase or from a message, not both."
            )
        sealer = await self._owners.of_session(session_id)
        if sealer is None:
            raise SessionNotFound(session_id)
        ids, codec = self._phase_ids, self._codec

        def unit(conn: Connection) -> str:
            if isinstance(point, int):
                return branch_after_message(
                    conn, codec, session_id, point, phase_ids=ids, now=now, sealer=sealer
                )
            return branch(conn, codec, session_id, point, phase_ids=ids, now=now, sealer=sealer)

        branch_id = await self._db.run(unit, write=True, what="branch_session")
        self._owners.remember(branch_id, sealer.owner_id)
        found = await self._session(branch_id, what="branch_session")
        if found is None:  # erased as soon as it was made
            raise SessionNotFound(branch_id)
        return found

    async def update_person(
        self,
        user_id: str,
        value: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[PersonRecord, Delta]:
        now = utcnow()
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise InvalidWrite(f"No user {user_id[:40]}: nothing was remembered.")
        return await self._db.run(
            lambda conn: write_person(conn, user_id, value, delta, expected_step, now, sealer),
            write=True,
            what="update_person",
        )

    async def delete_session(self, session_id: str) -> bool:
        now = self._clock()
        owners = await self._owners.of_sessions([session_id], skip_erased=True)
        people = {sealer.owner_id: sealer for sealer in owners.values()}
        deleted = await self._db.run(
            lambda conn: erase_sessions(conn, self._codec, [session_id], now, people),
            write=True,
            what="delete_session",
        )
        return deleted > 0

    async def delete_user(self, identity: str) -> int | None:
        row = await self._user_row(identity_keys(identity))
        if row is None:
            return None
        user_id = row.id
        await self.vault.destroy([user_id])
        return await self._db.run(
            lambda conn: delete_user(conn, user_id), write=True, what="delete_user"
        )

    async def prune_sessions(
        self, *, older_than: datetime, status: str | None = None, dry_run: bool = False
    ) -> list[SessionRecord]:
        if status is not None:
            check_status(status, SESSION_STATUSES, "session")

        stmt = expired_select(self._phase_ids, older_than, status)
        users = {row.user_id for row in await self._rows(stmt, "prune_sessions")}
        people = await self.vault.sealers(users)
        now = self._clock()

        def unit(conn: Connection) -> list[SessionRecord]:
            rows = conn.execute(stmt).all()
            if not dry_run:
                erase_sessions(conn, self._codec, [row.id for row in rows], now, people)
            return [
                session_record(row, people[row.user_id])
                if row.user_id in people
                else SessionRecord(row.id, row.user_id, None, *row[3:12])
                for row in rows
            ]

        return await self._db.run(unit, write=not dry_run, what="prune_sessions")
