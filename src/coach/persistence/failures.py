"""Which driver errors may pass by themselves: :func:`is_transient` decides whether
:class:`~.engine.Database` runs a unit of work again, and whether the
:class:`~coach.errors.StorageError` it raises says ``transient``."""

from __future__ import annotations

from typing import Final

from sqlalchemy.exc import DBAPIError

__all__ = ["describe", "is_resource_error", "is_transient"]

_TRANSIENT_SQLSTATES: Final = frozenset(
    {"40001", "40P01", "55P03", "57P01", "08000", "08003", "08006"}
)
_LOCKED_MESSAGES: Final = ("database is locked", "database is busy", "database table is locked")
_RESOURCE_MESSAGES: Final = (
    "database or disk is full",
    "disk i/o error",
    "readonly database",
    "unable to open database file",
)
"""SQLite failures of the machine, not of the data: they pass once space or write
access is back, and the connection that saw them is replaced (it may stay read-only)."""


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    for obj in (orig, getattr(orig, "__cause__", None), exc):
        code = getattr(obj, "sqlstate", None) or getattr(obj, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


def is_transient(exc: BaseException, *, committing: bool = False) -> bool:
    """Return True when retrying the whole transaction may succeed.

    A lost connection during ``COMMIT`` is *not* transient: the commit may have landed,
    and retrying would write twice.
    """
    if isinstance(exc, DBAPIError):
        text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
        if any(message in text for message in _LOCKED_MESSAGES):
            return True
        if is_resource_error(exc):
            return not committing
        state = _sqlstate(exc)
        if state in ("40001", "40P01"):
            return True  # serialization failure / deadlock: rolled back, safe to rerun
        if committing:
            return False
        return exc.connection_invalidated or state in _TRANSIENT_SQLSTATES
    if isinstance(exc, (OSError, TimeoutError)):
        return not committing
    return False


def is_resource_error(exc: BaseException) -> bool:
    """A full disk, an I/O error or a read-only file (see ``_RESOURCE_MESSAGES``)."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).lower()
    return any(message in text for message in _RESOURCE_MESSAGES)


def describe(exc: BaseException) -> str:
    """A driver error in one line: its type and first line (at most 300 characters)."""
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}".splitlines()[0][:300]
