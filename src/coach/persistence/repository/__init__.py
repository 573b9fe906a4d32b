"""The repository: the seed-named API over SQLite or PostgreSQL, implementing
:class:`~coach.store.Store` (whose docstrings give each method's contract).

A small façade in four parts: :mod:`.base` (the database, the keys and the one write
path), :mod:`.reads`, :mod:`.lifecycle` and :mod:`.writes`. Every public method is one
unit of work — one transaction on one connection, run by
:class:`~coach.persistence.engine.Database` — and returns frozen records. Every write,
the recorder's group commit and each seed-named single write alike (a batch of one), is
checked and applied by :class:`~coach.persistence.batch.Plan`; the statements live in
one module per aggregate (:mod:`~coach.persistence.sessions`, ``phases``,
``conversation``, ``memory``, ``zones``, ``resume``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy.engine import URL

from ...errors import ConfigError
from ..crypto import MasterKeys
from ..engine import DEFAULT_TIMEOUT, Database
from ..keystore import Vault
from ..migrate import require_current, upgrade
from ..schema import utcnow
from .lifecycle import LifecycleMethods
from .reads import ReadMethods
from .writes import WriteMethods

__all__ = ["Repository", "open_repository"]


class Repository(ReadMethods, LifecycleMethods, WriteMethods):
    """Async access to everything coach stores (:class:`~coach.store.Store`); safe to
    share between tasks. Every personal field is sealed with its person's data key
    (:mod:`~coach.persistence.crypto`) before it reaches a statement, and opened after it
    is read; the keys come from ``vault``."""


async def open_repository(
    url: str | URL,
    *,
    secret: bytes,
    master_keys: MasterKeys,
    keys_url: str | URL | None = None,
    create_schema: bool = False,
    check_schema: bool = False,
    phase_ids: Sequence[str] | None = None,
    pool_size: int = 5,
    max_overflow: int = 10,
    call_timeout: float = DEFAULT_TIMEOUT,
    clock: Callable[[], datetime] = utcnow,
) -> Repository:
    """Open the repository on ``url``.

    Args:
        url: A SQLAlchemy URL (``sqlite:///...`` or ``postgresql://...``, any driver).
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        master_keys: The master keys that wrap the people's data keys
            (``Settings.master_keys``).
        keys_url: The key store (``COACH_KEYS_URL``; default: a SQLite file beside a
            SQLite database, see :func:`~.keystore.default_keys_url`).
        create_schema: Run the Alembic migrations first (SQLite; PostgreSQL fleets run
            ``python -m coach db upgrade`` instead).
        check_schema: Check first that the database is reachable and migrated
            (:func:`~.migrate.require_current`): a surface fails at start, not mid-turn.
        phase_ids: The manifest's phase ids, in order (default: the shipped manifest's).
        pool_size: Connections (PostgreSQL pool; SQLite worker threads).
        max_overflow: PostgreSQL pool overflow.
        call_timeout: Seconds one PostgreSQL call may take, retries included
            (``COACH_DB_TIMEOUT``); then it fails as a transient StorageError.
        clock: Returns the current UTC time (tests pass a fixed clock).

    Raises:
        ConfigError: ``secret`` is not bytes (a str is a mistake: say where it happens),
            or the key store is not named, or is the data database.
    """
    if not isinstance(secret, bytes):
        raise ConfigError(
            f"open_repository: secret must be bytes (Settings.memory_secret), "
            f"not {type(secret).__name__}"
        )
    vault = Vault.open(url, master_keys=master_keys, keys_url=keys_url)
    try:
        if create_schema:
            await upgrade(url, secret=secret, vault=vault)
        elif check_schema:
            await require_current(url)
    except BaseException:
        await vault.aclose()
        raise
    database = Database(url, pool_size=pool_size, max_overflow=max_overflow, timeout=call_timeout)
    return Repository(database, secret=secret, vault=vault, phase_ids=phase_ids, clock=clock)
