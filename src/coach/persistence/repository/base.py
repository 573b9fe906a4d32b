"""The repository's base: the database and the keys it runs on, the plumbing of reads
and the one write path every write takes (:class:`~coach.persistence.batch.Plan`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Self, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ...errors import (
    PersonErased,
    SessionNotFound,
    StorageError,
)
from ...prompts import load_manifest
from ...store import (
    AppendSteps,
    SessionRecord,
    UserRecord,
    WriteOp,
)
from ..batch import Applied, Plan
from ..codec import StepCodec
from ..crypto import Sealer
from ..engine import Database
from ..keystore import Vault
from ..memory import decode_or_empty
from ..owners import Owners
from ..schema import SESSIONS, USERS, utcnow
from ..sessions import (
    session_record,
    session_select,
    user_record,
    user_select,
)

__all__ = ["RepositoryBase"]

T = TypeVar("T")

_STEPS_ON_LOOP: Final = 64
"""Memory steps encoded or decoded on the event loop at most (~20 µs each for a turn's
items); a larger batch or load — a flush after an outage, a long history — goes to a
worker thread, where a thread hand-off is cheap next to the work."""


class RepositoryBase:
    """What every part of the repository stands on: the database, the keys, the codec of
    memory steps and the one write path; safe to share between tasks.

    Every personal field is sealed with its person's data key
    (:mod:`~coach.persistence.crypto`) before it reaches a statement, and opened after it
    is read; the keys come from ``vault``.

    Args:
        database: Where the units of work run; closed by :meth:`aclose`.
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        vault: The people's data keys; closed by :meth:`aclose`.
        phase_ids: The manifest's phase ids, in order; used for progress and resume
            (default: the shipped manifest's).
        clock: Returns the current UTC time; tests pass a fixed clock.
    """

    def __init__(
        self,
        database: Database,
        *,
        secret: bytes,
        vault: Vault,
        phase_ids: Sequence[str] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        phase_ids = load_manifest().ids if phase_ids is None else tuple(phase_ids)
        if not phase_ids:
            raise ValueError("phase_ids must name at least one phase")
        self.database = database
        """Where the units of work run (its ``url``, ``dialect`` and ``sync_engine``)."""
        self._db = database
        self.vault = vault
        """The people's data keys."""
        self._owners = Owners(database, vault)
        self._codec = StepCodec(secret)
        self._phase_ids = tuple(phase_ids)
        self._clock = clock

    @property
    def phase_ids(self) -> tuple[str, ...]:
        """The manifest's phase ids, in order."""
        return self._phase_ids

    async def aclose(self) -> None:
        await self._db.dispose()
        await self.vault.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _read(self, op: Callable[[Connection], T], what: str) -> T:
        return await self._db.run(op, write=False, what=what)

    async def _rows(self, stmt: Any, what: str) -> list[Any]:
        return await self._read(lambda conn: list(conn.execute(stmt).all()), what)

    async def _sessions(
        self, stmt: Any, what: str, *, skip_erased: bool = False
    ) -> list[SessionRecord]:
        """The sessions ``stmt`` selects, opened; a session of an erased person raises
        :class:`PersonErased` (or, with ``skip_erased``, is left out)."""
        rows = await self._rows(stmt, what)
        sealers = await self.vault.sealers({row.user_id for row in rows})
        records = []
        for row in rows:
            sealer = sealers.get(row.user_id)
            if sealer is None:
                if skip_erased:
                    continue
                raise PersonErased(row.user_id)
            self._owners.remember(row.id, row.user_id)
            records.append(session_record(row, sealer))
        return records

    async def _session(
        self, session_id: str, *, user_id: str | None = None, what: str
    ) -> SessionRecord | None:
        """The session ``session_id`` (only ``user_id``'s, when given: the owner is in the
        query, so a foreign id reads no row, as a missing one), or ``None``."""
        stmt = session_select(self._phase_ids).where(SESSIONS.c.id == session_id)
        if user_id is not None:
            stmt = stmt.where(SESSIONS.c.user_id == user_id)
        found = await self._sessions(stmt, what)
        return found[0] if found else None

    async def _apply(
        self,
        ops: Sequence[WriteOp],
        what: str,
        *,
        before: Callable[[Connection], object] | None = None,
    ) -> Applied:
        """The one write path: check ``ops``, then write them in one transaction."""
        steps = sum(len(op.steps) for op in ops if isinstance(op, AppendSteps))
        if steps <= _STEPS_ON_LOOP:
            plan = Plan.of(ops, self._codec, self._clock)
        else:
            plan = await asyncio.to_thread(Plan.of, ops, self._codec, self._clock)
        sessions = plan.session_ids
        sealers = await self._owners.of_sessions(sessions)
        if missing := sorted(sessions - sealers.keys()):
            raise SessionNotFound(missing[0])

        def unit(conn: Connection) -> Applied:
            if before is not None:
                before(conn)
            return plan.apply(conn, sealers)

        try:
            return await self._db.run(unit, write=True, what=what)
        except StorageError as exc:
            # A message or phase output of an unknown session breaks its foreign key;
            # name the session (only on this failure path does it cost a read).
            if isinstance(exc.__cause__, IntegrityError):
                stmt = select(SESSIONS.c.id).where(SESSIONS.c.id.in_(sessions))
                found = {sid for (sid,) in await self._rows(stmt, what)}
                if missing := sorted(sessions - found):
                    raise SessionNotFound(missing[0]) from exc
            raise

    async def _decode(
        self,
        sealer: Sealer,
        session_id: str,
        rows: list[Any],
        first: int,
        end: int,
        known: Mapping[int, str] | None = None,
    ) -> list[object]:
        args = (self._codec, sealer, session_id, rows, first, end, known)
        if len(rows) <= _STEPS_ON_LOOP:
            return decode_or_empty(*args)
        return await asyncio.to_thread(decode_or_empty, *args)

    async def _user_row(self, spellings: Sequence[str]) -> Any:
        """The stored row of the first of ``spellings`` of an identity there is, found by
        its keyed hash; ``None``."""
        hashes = [await self.vault.identity_hash(key) for key in spellings]
        stmt = (
            user_select()
            .add_columns(USERS.c.identity_hash)
            .where(USERS.c.identity_hash.in_(hashes))
        )
        rows = {row.identity_hash: row for row in await self._rows(stmt, "find_user")}
        return next((rows[h] for h in hashes if h in rows), None)

    async def _find_user(self, spellings: Sequence[str]) -> UserRecord | None:
        row = await self._user_row(spellings)
        return user_record(row, await self.vault.sealer(row.id)) if row is not None else None
