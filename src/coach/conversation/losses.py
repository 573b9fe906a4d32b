"""What the recorder reports: its health (:class:`RecorderStats`), what it could not
store (:class:`Losses`), and how a storage failure is classed (passing, timed out)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import StaleWrite, StorageError

__all__ = [
    "LAG_WINDOW",
    "Losses",
    "RecorderStats",
    "describe",
    "is_transient",
    "reason",
    "timed_out",
]


@dataclass(frozen=True)
class RecorderStats:
    """A snapshot of the recorder's health."""

    queue_depth: int
    """Writes queued and not yet committed."""
    write_lag: float
    """Seconds the oldest uncommitted write has waited (0 when idle)."""
    errors: int
    """Database errors seen (each retry counts)."""
    dropped: int
    """Writes given up on because they can never succeed (logged with the reason)."""
    written: int
    """Writes committed since start."""
    batches: int
    """Transactions committed since start."""
    commit_lag_p50: float = 0.0
    """Median seconds from queued to committed, over the last :data:`LAG_WINDOW` writes."""
    commit_lag_p95: float = 0.0
    commit_lag_max: float = 0.0
    max_batch: int = 0
    """Writes per transaction at most now (smaller while batches time out)."""


def is_transient(exc: BaseException) -> bool:
    """Whether a storage error may go away by itself (connection lost, database locked).

    Only failures the store marked as passing count; bad content (a value the database
    refuses) and conflicts never do. A connection lost during COMMIT does count — the
    writer checks whether the batch landed before it writes it again.
    """
    return isinstance(exc, StorageError) and not isinstance(exc, StaleWrite) and exc.transient


def describe(exc: BaseException) -> dict[str, str]:
    # Error types only: driver messages can quote what the user said (STYLE: no
    # transcripts in logs).
    cause = exc.__cause__
    return {"error": type(exc).__name__, "cause": type(cause).__name__ if cause else "-"}


def reason(exc: BaseException) -> str:
    """``StorageError (ConnectionRefusedError)``: the error's type and its cause's."""
    cause = exc.__cause__
    return f"{type(exc).__name__} ({type(cause).__name__})" if cause else type(exc).__name__


@dataclass(frozen=True)
class Losses:
    """What the recorder could not store: the truth a surface reports at exit."""

    dropped: int
    """Writes refused for good while running (a value the database refuses, a conflict)."""
    unwritten: int
    """Writes still queued when the shutdown timeout ran out (the database stayed down)."""
    reasons: tuple[str, ...]
    """Distinct causes, most frequent first (error types only: no user text)."""

    @property
    def count(self) -> int:
        """Writes lost in all."""
        return self.dropped + self.unwritten

    def __str__(self) -> str:
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten} still queued when the database stayed unavailable")
        if self.dropped:
            parts.append(f"{self.dropped} refused by the database")
        why = f"; cause: {', '.join(self.reasons)}" if self.reasons else ""
        return f"{self.count} write(s) were not saved ({' and '.join(parts)}{why})"


LAG_WINDOW = 1_000
"""Commits the stats' lag percentiles are taken over."""


def timed_out(exc: BaseException) -> bool:
    """Whether the database took longer than its deadline (a stalled or overloaded server)."""
    return isinstance(exc, TimeoutError) or isinstance(exc.__cause__, TimeoutError)
