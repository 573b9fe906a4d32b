"""The shapes of the writes :meth:`Repository.write_batch` applies (group commit).

Structural types, so the recorder's own small op records (``coach.recording.ops``) fit
without persistence importing the recorder: any object with these attributes works.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..state.zones import DeltaSpec

__all__ = [
    "AppendStepsOp",
    "MessageOp",
    "PhaseOutputOp",
    "SessionUpdateOp",
    "WriteOpLike",
    "ZoneWriteOp",
]


@runtime_checkable
class AppendStepsOp(Protocol):
    """Memory steps to store at ``start, start + 1, ...`` (see ``append_agent_steps``)."""

    @property
    def session_id(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def steps(self) -> Sequence[object]: ...


@runtime_checkable
class PhaseOutputOp(Protocol):
    """A phase output upsert (see ``save_phase_output``)."""

    @property
    def session_id(self) -> str: ...
    @property
    def phase_id(self) -> str: ...
    @property
    def phase_name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def user_input(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...


@runtime_checkable
class MessageOp(Protocol):
    """A conversation message (see ``add_session_message``)."""

    @property
    def session_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def phase_id(self) -> str | None: ...
    @property
    def interrupted(self) -> bool: ...


@runtime_checkable
class SessionUpdateOp(Protocol):
    """Session bookkeeping (see ``update_session``): ``fields`` name what changes."""

    @property
    def session_id(self) -> str: ...
    @property
    def fields(self) -> Mapping[str, Any]: ...


@runtime_checkable
class ZoneWriteOp(Protocol):
    """A zoned state write and its delta (see ``update_data`` and friends).

    ``zone`` is ``"data"``, ``"template"`` or ``"view"`` — or ``None`` for a delta
    without a zone write (``add_delta``). ``expected_step`` guards against a second
    writer: the write fails with ``StaleWrite`` if the stored step differs.
    """

    @property
    def session_id(self) -> str: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def value(self) -> dict[str, Any] | None: ...
    @property
    def delta(self) -> DeltaSpec: ...
    @property
    def expected_step(self) -> int | None: ...


WriteOpLike = AppendStepsOp | PhaseOutputOp | MessageOp | SessionUpdateOp | ZoneWriteOp
