"""A store in memory, for trying prompts and flows without a file or a server.

It is not a second implementation: it is coach's own
:class:`~coach.persistence.Repository` — the one that runs on a SQLite file and on
PostgreSQL, with the same rules for branching, erasing, retention and sealing — on a
SQLite database that lives in this process's memory (:mod:`coach.persistence.inmemory`),
with its key store in memory beside it. The contract suite runs against it as it runs
against SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from ..persistence import Repository, open_repository
from ..persistence.crypto import MasterKeys
from ..persistence.inmemory import memory_database

__all__ = ["memory_store"]


@asynccontextmanager
async def memory_store(
    *,
    phase_ids: Sequence[str] | None = None,
    clock: Callable[[], datetime] | None = None,
    secret: bytes | None = None,
    master_key: str | None = None,
) -> AsyncIterator[Repository]:
    """Open a store in memory for the block; it is closed, and its data gone, after it.

    Every store is a database of its own: two open at once share nothing. Usage::

        async with memory_store() as store:
            user = await store.get_or_create_user("alice")
            session = await store.create_session(user.id, "Make commuting less lonely")

    Args:
        phase_ids: The manifest's phase ids, in order (default: the shipped manifest's).
        clock: Returns the current UTC time (default: the real clock).
        secret: The HMAC key that signs memory steps (default: a random one).
        master_key: The master key that wraps the people's data keys, at least 32
            characters (default: a random one).

    Yields:
        The open store: a :class:`~coach.store.Store`, as a
        :class:`~coach.persistence.Repository`.

    Raises:
        ConfigError: ``master_key`` is too short, or ``secret`` is not bytes.
    """
    options: dict[str, Any] = {}
    if phase_ids is not None:
        options["phase_ids"] = phase_ids
    if clock is not None:
        options["clock"] = clock
    masters = MasterKeys.of(master_key if master_key is not None else secrets.token_urlsafe(32))
    async with memory_database() as url:
        store = await open_repository(
            url,
            secret=secrets.token_bytes(32) if secret is None else secret,
            master_keys=masters,
            **options,
        )
        async with store:
            yield store
