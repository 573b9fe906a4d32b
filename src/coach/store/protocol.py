"""The storage contract, split by caller: what each part of coach needs of storage, and
nothing of how it is done (no SQLAlchemy here).

* :class:`Reads` — users, sessions, phases, conversation, memory steps, the person and
  the zones as the surfaces, the agents and resume read them;
* :class:`BatchWriter` — the recorder's group commit;
* :class:`Lifecycle` — people and sessions made, branched and erased (the conversation's
  and the operators' writes that are not a turn's);
* :class:`SeedWrites` — the seed-named single writes (SPEC §4), each a batch of one;
* :class:`Store` — all of them, with the manifest's phase ids and ``aclose``.

:class:`coach.persistence.Repository` implements :class:`Store` over SQLite and
PostgreSQL, and each method's contract is written here only. Every method is one
transaction; reads return frozen records; every write is a batch of
:mod:`~coach.store.ops`. Errors are those of :mod:`coach.errors`:
``InvalidWrite``/``InvalidRole`` for bad input (nothing is written),
``SessionNotFound``, ``StaleWrite`` when another writer got there first, and
``StorageError`` when the database fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ..state.zones import Delta, DeltaSpec
from .ops import PhaseDone, WriteOp
from .records import (
    MessageRecord,
    PersonRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    StepPage,
    UserRecord,
)

__all__ = ["BatchWriter", "Lifecycle", "Reads", "SeedWrites", "Store"]


class Reads(Protocol):
    """What the surfaces, the agents and resume read."""

    async def find_user(self, identity: str) -> UserRecord | None:
        """The user with ``identity``, or ``None`` (never creates one; a user stored
        before identities were normalised is found by the spelling stored). An identity
        that :func:`~coach.store.check_identity` refuses is ``InvalidWrite``; a stored
        person whose data key is destroyed is ``PersonErased``."""
        ...

    async def get_user(self, user_id: str) -> UserRecord | None:
        """The user with id ``user_id``, or ``None``."""
        ...

    async def get_session(
        self, session_id: str, *, user_id: str | None = None
    ) -> SessionRecord | None:
        """The session, or ``None``; with ``user_id``, only if it is that user's (one
        query: a foreign id reads no row, as a missing one)."""
        ...

    async def get_user_sessions(
        self, user_id: str, *, limit: int | None = None
    ) -> list[SessionRecord]:
        """The user's sessions, newest first (``limit`` at most, applied in the query),
        each with its completed-phase count (``PersonErased`` if their key is destroyed)."""
        ...

    async def count_user_sessions(self, user_id: str) -> int:
        """How many sessions the user has."""
        ...

    async def get_past_work(self, user_id: str) -> list[tuple[str, dict[str, Any]]]:
        """``(session_id, data zone)`` of each of the user's sessions, newest first, in
        one read (not one per session)."""
        ...

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        """The most recently updated sessions of every user (the operator's view); those
        of erased people (in a copy taken before the erase) are left out."""
        ...

    async def find_room_session(self, user_id: str, room: str) -> SessionRecord | None:
        """The user's most recent in-progress session in ``room`` (a reconnect continues it)."""
        ...

    async def get_phase_outputs(
        self, session_id: str, *, include_prompts: bool = True
    ) -> list[PhaseOutputRecord]:
        """The session's phase outputs in creation order; without ``include_prompts``
        the (possibly long) prompts are not read and are ``None``."""
        ...

    async def get_session_conversation(
        self,
        session_id: str,
        *,
        phase_id: str | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        from_end: bool = False,
        limit: int | None = None,
    ) -> list[MessageRecord]:
        """The conversation in time order (ties by insertion), optionally of one phase;
        ``limit`` messages at most: from the start, after message ``after_id``, or — with
        ``before_id`` or ``from_end`` — the ``limit`` newest before message ``before_id``
        (or overall). Always oldest first."""
        ...

    async def get_step_page(
        self, session_id: str, *, before: int | None = None, limit: int
    ) -> StepPage:
        """The ``limit`` newest memory steps before position ``before`` (or overall), with
        the message and phase each belongs to (see :class:`StepPage`)."""
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
        """The memory steps in order: all (the seed contract), the ``newest`` N, or from
        position ``since`` on, ``limit`` at most. ``[]`` (logged) when any asked for is
        missing, corrupt, tampered with or foreign; nothing rejected is ever executed."""
        ...

    async def get_person(self, user_id: str) -> PersonRecord:
        """What the user agreed coach may remember (step 0 and no facts before any write)."""
        ...

    async def get_person_deltas(self, user_id: str) -> list[Delta]:
        """The person record's deltas in step order."""
        ...

    async def get_state(self, session_id: str) -> StateRecord:
        """The session's zoned state (step 0 and empty zones before any write)."""
        ...

    async def get_deltas(
        self, session_id: str, since_step: int = 0, *, limit: int | None = None
    ) -> list[Delta]:
        """The deltas with ``step > since_step`` in step order, ``limit`` at most."""
        ...

    async def resume_session(
        self, session_id: str, *, user_id: str, max_pairs: int = 25
    ) -> ResumeResult:
        """Everything a conversation needs to continue the session (SPEC §5), in one
        bounded read: the same cost at 10,000 turns as at 100. Raises
        ``SessionNotFound`` (unknown, or not ``user_id``'s), ``SessionCompleted``,
        ``SessionFailed`` or ``NothingToResume`` with the spec's messages."""
        ...


class BatchWriter(Protocol):
    """What the recorder needs: the group commit, and where a session's memory and state
    stand (to continue after a conflict)."""

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        """Apply ``ops`` in one transaction, each with the semantics of the single write
        of the same name: all of them or none."""
        ...

    async def agent_step_count(self, session_id: str) -> int: ...  # as in Reads

    async def get_state(self, session_id: str) -> StateRecord: ...  # as in Reads


class Lifecycle(Protocol):
    """People and sessions made, branched and erased, and the person's record."""

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        """The user with ``identity`` (the LiveKit identity, or ``--user`` in chat),
        created if needed, race-safe; a given ``display_name`` replaces the stored one.
        An identity that :func:`~coach.store.check_identity` refuses is ``InvalidWrite``."""
        ...

    async def create_session(
        self,
        user_id: str,
        design_challenge: str | None = None,
        *,
        room: str | None = None,
        first_phase: PhaseDone | None = None,
    ) -> SessionRecord:
        """A new ``in_progress`` session (and its empty state) of ``user_id`` in LiveKit
        room ``room``, with ``first_phase`` stored as completed in the same transaction
        (the challenge), so a listed session always has a phase to resume from."""
        ...

    async def branch_session(
        self, session_id: str, phase_id: str | None = None, *, after_message: int | None = None
    ) -> SessionRecord:
        """A new session of the same user (``parent_session_id``, ``branched_from_phase``)
        holding ``session_id`` exactly as it was when ``phase_id`` ended: the phase
        outputs up to it, the conversation and memory steps of its whole turns, the
        zones then and the delta log up to then; the next phase is the one after. The
        original is not changed. ``SessionNotFound`` for an unknown session;
        ``BranchRefused`` (words for the user) for a phase that is unknown, not
        completed, the last, or whose end was not recorded.

        With ``after_message`` (a conversation row id) instead of ``phase_id``: the
        session as it was after that message's turn (up to the next user message) — its
        messages, memory steps, zones and deltas then, the phases completed by then, the
        next phase after those; ``branched_from_phase`` is the last of them (or
        ``"message N"``). ``BranchRefused`` for a message not in the session, for both
        or neither given, or for a turn whose zones were not recorded (a step between a
        phase's end and the latest: deltas hold causes, not values)."""
        ...

    async def update_person(
        self,
        user_id: str,
        value: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[PersonRecord, Delta]:
        """Replace the person record and record its delta, atomically, like a zone; the
        step goes up by one (``StaleWrite`` if it is not ``expected_step``; an unknown user
        is ``InvalidWrite``)."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Erase a session with every row of it, in one transaction (False: unknown).

        In the same transaction, what the same person's other sessions hold of it is
        taken out (the rules of :mod:`coach.state.retention`): tool results that list or
        quote it and a search query that found its work (memory steps, re-signed), its
        search results (data zone, with a delta that moves the state on), a brief that
        showed them (template zone, rendered again), the same in phase snapshots, and the
        query in the search's delta. What was said in those sessions is not changed."""
        ...

    async def delete_user(self, identity: str) -> int | None:
        """Erase a person: their data key first — what any copy of the database holds of
        them can then be read by no one — then the user and all their sessions, in one
        transaction; how many sessions that was (``None``: no such person)."""
        ...

    async def prune_sessions(
        self, *, older_than: datetime, status: str | None = None, dry_run: bool = False
    ) -> list[SessionRecord]:
        """Erase the sessions last updated before ``older_than`` (with ``status``, if
        given) in one transaction, each as :meth:`delete_session` does (its quotes in the
        same people's other sessions included), and return them; ``dry_run`` erases
        nothing."""
        ...


class SeedWrites(Protocol):
    """The seed-named single writes (SPEC §4): each is a batch of one, with the
    semantics of its op in :meth:`BatchWriter.write_batch`."""

    async def add_session_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        phase_id: str | None = None,
        interrupted: bool = False,
    ) -> int:
        """Append one message (role user, assistant or system); return its id."""
        ...

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
        """Upsert a phase output (SPEC §4.2): ``system_prompt``, ``user_input`` and
        ``output`` keep their stored value when ``None``; ``status`` (running, completed
        or failed) and ``error`` always take the new value."""
        ...

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        """Store the steps of the full list ``steps`` not stored yet (append-only, one row
        per step); return the stored count afterwards."""
        ...

    async def update_data(
        self,
        session_id: str,
        data: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the data zone and record its delta, atomically; the step goes up by one
        (``StaleWrite`` if it is not ``expected_step``)."""
        ...

    async def update_template(
        self,
        session_id: str,
        template: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the template zone and record its delta, as :meth:`update_data`."""
        ...

    async def update_view(
        self,
        session_id: str,
        view: Mapping[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the view zone and record its delta, as :meth:`update_data`."""
        ...

    async def add_delta(
        self, session_id: str, delta: DeltaSpec, *, expected_step: int | None = None
    ) -> tuple[StateRecord, Delta]:
        """Record a delta that changes no zone (a search that found nothing)."""
        ...


class Store(Reads, BatchWriter, Lifecycle, SeedWrites, Protocol):
    """Everything coach stores: users, sessions, phase outputs, conversation, memory
    steps, zoned state and the person."""

    @property
    def phase_ids(self) -> tuple[str, ...]:
        """The manifest's phase ids, in order (progress and resume are counted on them)."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections."""
        ...
