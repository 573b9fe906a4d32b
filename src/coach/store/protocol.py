"""The repository protocol: what the agents, ``UserData``, the recorder and the surfaces
need of storage, and nothing of how it is done (no SQLAlchemy here).

:class:`coach.persistence.Repository` implements it over SQLite and PostgreSQL. Every
method is one transaction; reads return frozen records; every write is a batch of
:mod:`~coach.store.ops` (the seed-named single writes are batches of one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..state.zones import Delta, DeltaSpec
from .ops import PhaseDone, WriteOp
from .records import (
    MessageRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    UserRecord,
)

__all__ = ["Store"]


class Store(Protocol):
    """Users, sessions, phase outputs, conversation, memory steps and zoned state."""

    @property
    def phase_ids(self) -> tuple[str, ...]:
        """The manifest's phase ids, in order (progress and resume are counted on them)."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections."""
        ...

    # --- users and sessions ------------------------------------------------------------

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        """The user with ``identity``, created if needed; a given name replaces the stored."""
        ...

    async def find_user(self, identity: str) -> UserRecord | None:
        """The user with ``identity``, or ``None`` (never creates one)."""
        ...

    async def create_session(
        self,
        user_id: str,
        design_challenge: str | None = None,
        *,
        room: str | None = None,
        first_phase: PhaseDone | None = None,
    ) -> SessionRecord:
        """A new ``in_progress`` session (and its empty state) of ``user_id``, with
        ``first_phase`` completed in the same transaction."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or ``None``."""
        ...

    async def get_user_sessions(self, user_id: str) -> list[SessionRecord]:
        """The user's sessions, newest first."""
        ...

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        """The most recently updated sessions of every user."""
        ...

    async def find_room_session(self, user_id: str, room: str) -> SessionRecord | None:
        """The user's most recent in-progress session in ``room``."""
        ...

    async def update_session(self, session_id: str, **fields: Any) -> SessionRecord:
        """Change the given session fields and bump ``updated_at``."""
        ...

    # --- phase outputs -------------------------------------------------------------------

    async def save_phase_output(
        self,
        session_id: str,
        phase_id: str,
        phase_name: str,
        status: str,
        *,
        system_prompt: str | None = None,
        user_input: str | None = None,
        output: str | None = None,
        error: str | None = None,
    ) -> PhaseOutputRecord:
        """Upsert a phase output (SPEC §4.2)."""
        ...

    async def get_phase_outputs(
        self, session_id: str, *, include_prompts: bool = True
    ) -> list[PhaseOutputRecord]:
        """The session's phase outputs in creation order."""
        ...

    # --- conversation --------------------------------------------------------------------

    async def add_session_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        phase_id: str | None = None,
        interrupted: bool = False,
    ) -> int:
        """Append one message; return its id."""
        ...

    async def get_session_conversation(
        self,
        session_id: str,
        *,
        phase_id: str | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> list[MessageRecord]:
        """The conversation in order, optionally of one phase, a page at a time."""
        ...

    # --- memory steps --------------------------------------------------------------------

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        """Store the steps not stored yet of the full list ``steps``; return the count."""
        ...

    async def agent_step_count(self, session_id: str) -> int:
        """How many memory steps the session has stored."""
        ...

    async def load_agent_state(
        self,
        session_id: str,
        *,
        newest: int | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[object]:
        """The memory steps in order (all, the newest N, or from position ``since``; at
        most ``limit``); ``[]`` when any is corrupt or missing."""
        ...

    # --- zoned state -----------------------------------------------------------------------

    async def get_state(self, session_id: str) -> StateRecord:
        """The session's zoned state (step 0 and empty zones before any write)."""
        ...

    async def update_data(
        self,
        session_id: str,
        data: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the data zone and record its delta, atomically."""
        ...

    async def get_deltas(
        self, session_id: str, since_step: int = 0, *, limit: int | None = None
    ) -> list[Delta]:
        """The deltas with ``step > since_step`` in step order."""
        ...

    # --- resume and the group commit -------------------------------------------------------

    async def resume_session(
        self, session_id: str, *, user_id: str, max_pairs: int = 25
    ) -> ResumeResult:
        """Everything a conversation needs to continue the session (SPEC §5), bounded."""
        ...

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        """Apply ``ops`` in one transaction: all of them or none."""
        ...
