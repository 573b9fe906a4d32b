"""Whose key seals what: each session's owner, and that person's sealer.

A write names sessions, not people; the repository finds the key that seals a session's
rows here. The owner of a session never changes, so it is remembered (at most
:data:`~.keystore.KEY_CACHE` sessions): a turn's write reads neither the session's owner
nor a key — the first write or read of a session in this process reads its owner once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sqlalchemy import select

from ..errors import PersonErased
from .crypto import Sealer
from .engine import Database
from .keystore import KEY_CACHE, Vault
from .schema import SESSIONS, USERS

__all__ = ["Owners"]


class Owners:
    """The sealers of sessions' owners and of people, on ``database`` and ``vault``."""

    def __init__(self, database: Database, vault: Vault) -> None:
        self._db = database
        self._vault = vault
        self._of: OrderedDict[str, str] = OrderedDict()

    def remember(self, session_id: str, user_id: str) -> None:
        """Note that ``user_id`` owns ``session_id`` (a session just made or read)."""
        self._of[session_id] = user_id
        self._of.move_to_end(session_id)
        while len(self._of) > KEY_CACHE:
            self._of.popitem(last=False)

    async def of_sessions(
        self, session_ids: Iterable[str], *, skip_erased: bool = False
    ) -> dict[str, Sealer]:
        """Session id -> the sealer of its owner, for the sessions that exist.

        Raises:
            PersonErased: An owner's data key is destroyed (unless ``skip_erased``).
        """
        ids = set(session_ids)
        owners = {sid: self._of[sid] for sid in ids if sid in self._of}
        if missing := ids - owners.keys():
            stmt = select(SESSIONS.c.id, SESSIONS.c.user_id).where(
                SESSIONS.c.id.in_(sorted(missing))
            )
            rows = await self._db.run(
                lambda conn: conn.execute(stmt).all(), write=False, what="read session owners"
            )
            for sid, user_id in rows:
                owners[sid] = user_id
                self.remember(sid, user_id)
        people = await self._vault.sealers(set(owners.values()))
        found = {}
        for sid, user_id in owners.items():
            if user_id in people:
                found[sid] = people[user_id]
            elif not skip_erased:
                raise PersonErased(user_id)
        return found

    async def of_session(self, session_id: str) -> Sealer | None:
        """The sealer of the session's owner; ``None`` for an unknown session."""
        return (await self.of_sessions([session_id])).get(session_id)

    async def of_person(self, user_id: str) -> Sealer | None:
        """The person's sealer; ``None`` if there is no such user.

        Raises:
            PersonErased: The user is stored but their data key is destroyed.
        """
        sealer = (await self._vault.sealers([user_id])).get(user_id)
        if sealer is None:
            stmt = select(USERS.c.id).where(USERS.c.id == user_id)
            found = await self._db.run(
                lambda conn: conn.execute(stmt).first(), write=False, what="read a person"
            )
            if found is not None:
                raise PersonErased(user_id)
        return sealer
