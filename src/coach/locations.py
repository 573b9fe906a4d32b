"""Where coach keeps its data: the per-user data directory (the embedded database and the
keys made for it), and the database URLs coach opens.

Light on purpose: ``--help`` names the default database, and every command checks
``COACH_DATABASE_URL`` when it reads its settings; neither loads pydantic or SQLAlchemy
for it (about 0.3 s of CPU each at start).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import platformdirs

APP_NAME = "coach"

DATABASE_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
}
"""The URL schemes coach opens, and the driver each one is opened with."""

URL_PATTERN = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)
"""SQLAlchemy's own pattern of a URL string (``sqlalchemy.engine.url._parse_url``), so that
a URL is judged as the engine will read it without importing SQLAlchemy: a test holds
:func:`check_database_url` to ``make_url`` on generated URLs."""


def check_database_url(url: str) -> str:
    """``url`` if coach can open it; otherwise ``ValueError`` naming what is wrong with it."""
    example = "e.g. sqlite+aiosqlite:///path/to/coach.db or postgresql+asyncpg://user@host/db"
    if "://" not in url:
        raise ValueError(f"{url!r} is not a database URL: it has no scheme ({example})")
    parsed = URL_PATTERN.match(url)
    if parsed is None:
        scheme = url.split("://")[0]
        raise ValueError(f"{scheme!r}:// is not a valid URL scheme ({example})")
    if parsed["port"] is not None:  # make_url's own ValueError for a port not a number
        int(parsed["port"])
    driver = parsed["name"]
    if driver not in DATABASE_DRIVERS:
        known = ", ".join(sorted(set(DATABASE_DRIVERS.values())))
        close = difflib.get_close_matches(driver, DATABASE_DRIVERS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"unknown database driver {driver!r} ({hint}coach opens {known})")
    return url


def default_data_dir() -> Path:
    """The per-user directory that holds the embedded database and the dev secret."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_database_path() -> Path:
    """The embedded database's file when ``COACH_DATABASE_URL`` is not set."""
    return default_data_dir() / "coach.db"
