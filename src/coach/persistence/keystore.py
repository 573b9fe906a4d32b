"""The key store: every person's data key, wrapped, in a database of its own.

``COACH_KEYS_URL`` names it: by default a SQLite file beside the embedded database
(``coach.db`` → ``coach.keys.db``); a deployment on PostgreSQL names another database.
It is kept apart from the data on purpose: a key stored with the data would be in every
backup of it, and an erase could never reach those copies. Back it up apart, and keep
its backups short-lived: an erase reaches a backup of the data at once, and a backup of
the key store when that backup expires.

One table, ``data_keys`` (owner, master key id, wrapped key, time), made on first use;
it has no migrations. :class:`Vault` is what the repository holds: it unwraps the keys
and keeps them in this process's memory while they are used, so a turn's write costs no
key store read.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from sqlalchemy import Column, LargeBinary, MetaData, String, Table, delete, func, select, update
from sqlalchemy.engine import URL, Connection, make_url

from ..errors import ConfigError, PersonErased
from .crypto import LOOKUP_OWNER, MasterKeys, Sealer, new_data_key
from .engine import Database, is_memory, normalize_url, require_directory
from .schema import UTCDateTime, utcnow
from .sql import upsert

__all__ = ["KEY_CACHE", "HeldKeys", "KeyStore", "Vault", "default_keys_url"]

T = TypeVar("T")

KEY_CACHE: Final = 4096
"""Data keys one process keeps unwrapped at most (the least recently used go first)."""

_METADATA = MetaData()
DATA_KEYS: Final = Table(
    "data_keys",
    _METADATA,
    Column("owner_id", String(64), primary_key=True),
    Column("key_id", String(16), nullable=False),
    Column("wrapped", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)


def default_keys_url(database_url: str | URL) -> URL | None:
    """The key store beside a SQLite file (``x/coach.db`` → ``x/coach.keys.db``); a named
    in-memory database's beside it in memory (``file:/x`` → ``file:/x.keys``, see
    :mod:`.inmemory`), ``sqlite://``'s a store in memory of its own; ``None`` for any
    other database (it must be named: ``COACH_KEYS_URL``)."""
    url = normalize_url(database_url)
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:":
        return make_url("sqlite://")
    if is_memory(url):
        return url.set(database=f"{url.database}.keys")
    stem, dot, suffix = url.database.rpartition(".")
    path = f"{stem}.keys.{suffix}" if dot and "/" not in suffix else f"{url.database}.keys"
    return url.set(database=path, query={})


class KeyStore:
    """The wrapped data keys (one unit of work per call, on a :class:`Database`)."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._ready = False

    @property
    def url(self) -> URL:
        """Where the keys are."""
        return self._db.url

    async def _run(self, op: Callable[[Connection], T], *, write: bool, what: str) -> T:
        if not self._ready:
            await self._db.run(
                lambda conn: _METADATA.create_all(conn), write=True, what="open the key store"
            )
            self._ready = True
        return await self._db.run(op, write=write, what=what)

    async def fetch(self, owners: Iterable[str]) -> dict[str, tuple[str, bytes]]:
        """``owner -> (master key id, wrapped key)`` of the owners that have one."""
        wanted = sorted(set(owners))
        if not wanted:
            return {}
        stmt = select(DATA_KEYS.c.owner_id, DATA_KEYS.c.key_id, DATA_KEYS.c.wrapped).where(
            DATA_KEYS.c.owner_id.in_(wanted)
        )

        def unit(conn: Connection) -> dict[str, tuple[str, bytes]]:
            return {row[0]: (row[1], bytes(row[2])) for row in conn.execute(stmt)}

        return await self._run(unit, write=False, what="read data keys")

    async def add(self, owner: str, key_id: str, wrapped: bytes) -> tuple[str, bytes]:
        """Store ``owner``'s key unless one is stored already; return the stored one
        (two workers making the same person's key at once agree on the first)."""

        def unit(conn: Connection) -> tuple[str, bytes]:
            stmt = upsert(conn, DATA_KEYS).values(
                owner_id=owner, key_id=key_id, wrapped=wrapped, created_at=utcnow()
            )
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["owner_id"]))
            row = conn.execute(
                select(DATA_KEYS.c.key_id, DATA_KEYS.c.wrapped).where(DATA_KEYS.c.owner_id == owner)
            ).one()
            return row[0], bytes(row[1])

        return await self._run(unit, write=True, what="store a data key")

    async def destroy(self, owners: Sequence[str]) -> int:
        """Delete the owners' keys; return how many there were."""
        stmt = delete(DATA_KEYS).where(DATA_KEYS.c.owner_id.in_(list(owners)))
        return await self._run(
            lambda conn: int(conn.execute(stmt).rowcount), write=True, what="destroy data keys"
        )

    async def rewrap(self, masters: MasterKeys) -> tuple[int, int]:
        """Re-wrap every key not wrapped by the current master key under it, in one
        transaction; the data is not touched. Returns ``(re-wrapped, already current)``."""
        current = masters.current

        def unit(conn: Connection) -> tuple[int, int]:
            rows = conn.execute(
                select(DATA_KEYS.c.owner_id, DATA_KEYS.c.key_id, DATA_KEYS.c.wrapped)
            )
            stale = [row for row in rows if row[1] != current.key_id]
            for owner, key_id, wrapped in stale:
                key = masters.unwrap(owner, key_id, bytes(wrapped))
                conn.execute(
                    update(DATA_KEYS)
                    .where(DATA_KEYS.c.owner_id == owner)
                    .values(key_id=current.key_id, wrapped=current.wrap(owner, key))
                )
            total = conn.scalar(select(func.count()).select_from(DATA_KEYS)) or 0
            return len(stale), int(total) - len(stale)

        return await self._run(unit, write=True, what="re-wrap data keys")

    async def aclose(self) -> None:
        """Close the key store's connections."""
        await self._db.dispose()


def _keyed_hash(lookup: bytes, identity: str) -> str:
    return hmac.new(lookup, identity.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class HeldKeys:
    """Keys held for a whole-database job (a migration): every person's sealer and the
    lookup key, usable from sync code."""

    sealers: dict[str, Sealer]
    lookup: bytes

    def identity_hash(self, identity: str) -> str:
        """The keyed hash of :meth:`Vault.identity_hash`."""
        return _keyed_hash(self.lookup, identity)


class Vault:
    """The repository's keys: each person's :class:`~.crypto.Sealer`, unwrapped on first
    use and kept (at most :data:`KEY_CACHE`), and the keyed hash that finds a user.

    Args:
        store: The key store.
        masters: The master keys from the settings.
    """

    def __init__(self, store: KeyStore, masters: MasterKeys) -> None:
        self.store = store
        self.masters = masters
        self._sealers: OrderedDict[str, Sealer] = OrderedDict()
        self._lookup: bytes | None = None

    @classmethod
    def open(
        cls, database_url: str | URL, *, master_keys: MasterKeys, keys_url: str | URL | None
    ) -> Vault:
        """The vault of the data at ``database_url``, its keys at ``keys_url`` (default:
        :func:`default_keys_url`).

        Raises:
            ConfigError: No key store is named for a database that is not SQLite, or it
                is the data database itself.
        """
        data = normalize_url(database_url)
        if keys_url is None and data.get_backend_name() == "sqlite":
            require_directory(data)  # the keys go beside it: a bad path names the data's
        url = normalize_url(keys_url) if keys_url is not None else default_keys_url(data)
        if url is None:
            raise ConfigError(
                f"COACH_KEYS_URL is required with a {data.get_backend_name()} database: the "
                "people's data keys live in a database apart from their data (another "
                "database on another server, or a SQLite file), so that an erase also "
                "reaches the data's backups."
            )
        if _same_database(url, data):
            raise ConfigError(
                "COACH_KEYS_URL names the data database itself: the keys must live apart "
                "from the data, or every backup of the data holds the keys to it."
            )
        return cls(KeyStore(Database(url, pool_size=1, max_overflow=1)), master_keys)

    async def sealer(self, user_id: str) -> Sealer:
        """The person's sealer.

        Raises:
            PersonErased: The person has no data key: it was destroyed by an erase.
        """
        found = await self.sealers([user_id])
        if user_id not in found:
            raise PersonErased(user_id)
        return found[user_id]

    async def sealers(self, user_ids: Iterable[str]) -> dict[str, Sealer]:
        """The sealers of the people that have a data key (erased ones are left out)."""
        ids = set(user_ids)
        found = {uid: self._sealers[uid] for uid in ids if uid in self._sealers}
        for uid in found:
            self._sealers.move_to_end(uid)
        missing = ids - found.keys()
        if missing:
            for uid, (key_id, wrapped) in (await self.store.fetch(missing)).items():
                found[uid] = self._keep(uid, self.masters.unwrap(uid, key_id, wrapped))
        return found

    async def create(self, user_id: str) -> Sealer:
        """The person's sealer, making their data key if they have none."""
        if user_id in self._sealers:
            return self._sealers[user_id]
        return self._keep(user_id, await self._ensure(user_id))

    async def _ensure(self, owner: str) -> bytes:
        current = self.masters.current
        key_id, wrapped = await self.store.add(
            owner, current.key_id, current.wrap(owner, new_data_key())
        )
        return self.masters.unwrap(owner, key_id, wrapped)

    async def destroy(self, user_ids: Sequence[str]) -> int:
        """Destroy the people's data keys (here and in the key store): what any copy of
        the data holds of them can no longer be read. Returns how many were destroyed."""
        for uid in user_ids:
            self._sealers.pop(uid, None)
        return await self.store.destroy(user_ids)

    async def identity_hash(self, identity: str) -> str:
        """The keyed hash an identity is looked up by (64 hex digits)."""
        return _keyed_hash(await self._lookup_key(), identity)

    async def _lookup_key(self) -> bytes:
        if self._lookup is None:
            self._lookup = await self._ensure(LOOKUP_OWNER)
        return self._lookup

    async def hold(self, user_ids: Iterable[str], *, create: bool) -> HeldKeys:
        """The people's sealers (made for those without one, with ``create``) and the
        lookup key, for a job over the whole database."""
        ids = sorted(set(user_ids))
        sealers = {uid: await self.create(uid) for uid in ids} if create else {}
        if not create:
            sealers = await self.sealers(ids)
        return HeldKeys(sealers, await self._lookup_key())

    def _keep(self, user_id: str, key: bytes) -> Sealer:
        sealer = Sealer(user_id, key)
        self._sealers[user_id] = sealer
        while len(self._sealers) > KEY_CACHE:
            self._sealers.popitem(last=False)
        return sealer

    async def aclose(self) -> None:
        """Close the key store."""
        await self.store.aclose()


def _same_database(a: URL, b: URL) -> bool:
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        return bool(a.database) and a.database not in (":memory:",) and a.database == b.database
    return (a.host, a.port, a.database) == (b.host, b.port, b.database)
