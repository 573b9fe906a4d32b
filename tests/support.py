"""What test modules share besides the fixtures of ``conftest.py`` (which no test
imports): the memory secret every test repository signs with, and the runtime factory's
type."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from coach.persistence.crypto import MasterKeys
from coach.runtime import Runtime

MEMORY_SECRET = b"coach-test-secret-0123456789abcdef"
"""The HMAC key of every test repository's memory steps."""

MASTER_KEY = "coach-test-master-key-0123456789abcdef"
"""The master key of every test repository (``COACH_MASTER_KEY``)."""
MASTER_KEYS = MasterKeys.of(MASTER_KEY)


def keys_url(database_url: str) -> str | None:
    """The key store of a test database: the default beside a SQLite file (``None``), or
    a SQLite file named after a PostgreSQL database (each test database is new)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return None
    return f"sqlite:///{Path(tempfile.gettempdir()) / f'coach-keys-{url.database}.db'}"


def keys_of(database_url: str) -> dict[str, Any]:
    """``open_repository``'s key arguments for a test database."""
    return {"master_keys": MASTER_KEYS, "keys_url": keys_url(database_url)}


def key_env(database_url: str) -> dict[str, str]:
    """The key settings of a test database, for a child process's environment."""
    store = keys_url(database_url)
    return {"COACH_MASTER_KEY": MASTER_KEY, **({"COACH_KEYS_URL": store} if store else {})}


RuntimeFactory = Callable[[], Awaitable[Runtime]]
"""``open_runtime``: opens another runtime on the test's database."""
