"""``UserData``: the one state object the three agents share through ``RunContext``.

Tools change it; transfer tools read it to decide where the conversation goes next.
It never holds a database session: reads go through ``store`` (one transaction per
call) and writes through ``recorder`` (queued, off the voice turn's path).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import metrics
from ..errors import (
    BranchRefused,
    NoOpenSession,
    NotIdentified,
    SavingBehind,
    SessionNotFound,
    StaleWrite,
)
from ..prompts import AgentKind, Phase, PromptBook
from ..state.brief import DEFAULT_MAX_TOKENS as DEFAULT_BRIEF_TOKENS
from ..state.brief import BriefInput, PhaseDecision, render_brief
from ..state.design import Change, empty_data
from ..state.person import person_lines
from ..state.shapes import Evaluation, Person, empty_person, person_of
from ..state.zones import Action, Delta, DeltaSpec, ResultMeta, Source, Trigger
from ..store import (
    PhaseDone,
    ResumeResult,
    SavePhaseOutput,
    SessionRecord,
    Store,
    UpdateSession,
    UserRecord,
)
from .live_state import LiveState
from .recorder import Recorder

FLUSH_BEFORE_LOAD = 5.0
"""Seconds a resume waits for this process's queued writes to be stored."""

SessionStatus = Literal["new", "in_progress", "completed", "failed"]


@dataclass
class UserData:
    """Shared state of one conversation (one ``AgentSession``)."""

    prompts: PromptBook
    store: Store
    recorder: Recorder
    state: LiveState
    """The session's zoned state (data, template, view) and the current turn."""
    identity: str | None = None
    """The user's key: the authenticated participant identity, or ``--user`` in chat."""
    room: str | None = None
    """The LiveKit room of this conversation (None in chat): sessions remember it."""
    user_id: str | None = None
    user_name: str | None = None
    session_id: str | None = None
    pending_session_id: str | None = None
    design_challenge: str | None = None
    status: SessionStatus = "new"
    current_phase_id: str | None = None
    current_agent: AgentKind = "coach"
    phase_outputs: dict[str, str] = field(default_factory=dict)
    """Completed phases' outputs by phase id."""
    person: Person = field(default_factory=empty_person)
    """What the person agreed coach may remember (SPEC §4.6), as last read or written."""
    person_step: int = 0
    past_sessions: tuple[SessionRecord, ...] = ()
    """The user's sessions as last listed (identify, greeting): what can be loaded."""
    resumed: ResumeResult | None = None
    """What ``load_state`` restored, kept so the next agent can rebuild its context."""
    stored_steps: int = 0
    """How many memory steps the resumed session had stored (new ones append after)."""
    flush_before_load: float = FLUSH_BEFORE_LOAD
    """Seconds a load or branch waits for this process's queued writes to be stored."""
    max_resume_pairs: int = 25
    max_history_tokens: int = 100_000
    max_history_lines: int = 50_000
    brief_max_tokens: int = DEFAULT_BRIEF_TOKENS
    item_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Sizes of chat items already measured for context limits, by item id."""
    export: tuple[str, tuple[str, ...]] | None = None
    """The caller's export being fetched (``coach.export_my_data``): its id and chunks."""
    forget_token: tuple[str, str, float] | None = None
    """A ``coach.forget_me`` confirmation pending: token, identity, monotonic expiry."""

    @property
    def evaluation(self) -> Evaluation | None:
        """The session's evaluation: the data zone's, where the evaluator records it."""
        return self.state.data["evaluation"]

    def clear_person(self) -> None:
        """Hold nothing more of the person, who was just erased: no user, no session, no
        record (the identity stays: it is who the job serves)."""
        self.user_id = self.user_name = self.session_id = self.pending_session_id = None
        self.design_challenge = self.current_phase_id = None
        self.status = "new"
        self.phase_outputs = {}
        self.state.data, self.state.template = empty_data(), None
        self.person = empty_person()
        self.person_step = 0
        self.past_sessions = ()
        self.resumed = None
        self.stored_steps = 0
        self.export = self.forget_token = None
        self.state.session_id = None

    # --- phases --------------------------------------------------------------------

    def phase(self, phase_id: str) -> Phase:
        """The manifest entry of a phase."""
        return self.prompts.manifest.get(phase_id)

    def next_phase(self, owner: AgentKind | None = None) -> Phase | None:
        """The first phase (of ``owner``, if given) without a completed output."""
        for phase in self.prompts.manifest.phases:
            if phase.id not in self.completed_phases and owner in (None, phase.owner):
                return phase
        return None

    @property
    def completed_phases(self) -> list[str]:
        """Phase ids with a completed output, in manifest order."""
        return [p for p in self.prompts.manifest.ids if p in self.phase_outputs]

    # --- the phase lifecycle: every tool that starts or ends a phase goes through here --

    def open_session(self, action: str = "record a phase") -> str:
        """The open session's id.

        Raises:
            NoOpenSession: no session is open (``action`` says what needed one).
        """
        if self.session_id is None:
            raise NoOpenSession(action)
        return self.session_id

    def start_phase(
        self, phase: Phase, agent: AgentKind, *, system_prompt: str, user_input: str
    ) -> None:
        """Make ``phase`` current, run by ``agent``: a ``running`` phase output stores the
        prompts the model is sent from now on — unless the phase is already done (a
        resumed session whose last phase is complete must not see it run again)."""
        session_id = self.open_session("start a phase")
        self.current_phase_id = phase.id
        if phase.id not in self.phase_outputs:
            self._phase_output(session_id, phase, "running", system_prompt, user_input)
        self._session_changed(session_id, current_agent=agent, current_phase_id=phase.id)

    def complete_phase(self, phase: Phase, output: str) -> None:
        """End ``phase`` with ``output``: stored as completed, and in the brief from now on."""
        self._phase_output(self.open_session(), phase, "completed", output=output)
        self.phase_outputs[phase.id] = output

    async def capture_challenge(self, phase: Phase, challenge: str, *, system_prompt: str) -> None:
        """Record the design challenge as ``phase``'s output. The first capture creates
        the session, with the challenge and the completed phase in one transaction (a
        session is never listed without a phase to resume from, whenever the process
        dies); a later one restates the open session's challenge.

        Raises:
            NoOpenSession: the user is not identified yet (there is no one to own it).
        """
        if self.session_id is None:
            if self.user_id is None:
                raise NoOpenSession("capture a challenge")
            done = PhaseDone(phase.id, phase.name, system_prompt, challenge, challenge)
            session = await self.store.create_session(
                self.user_id, challenge, room=self.room, first_phase=done
            )
            self.session_id = session.id
            self.state.attach(session.id)
        else:
            self._session_changed(self.session_id, design_challenge=challenge)
            self._phase_output(self.session_id, phase, "running", system_prompt, challenge)
            self._phase_output(self.session_id, phase, "completed", output=challenge)
        self.design_challenge = challenge
        self.status = "in_progress"
        self.current_phase_id = phase.id
        self.phase_outputs[phase.id] = challenge

    def finish(self) -> None:
        """Mark the open session completed."""
        session_id = self.open_session("finish the session")
        self.status = "completed"
        self._session_changed(session_id, status="completed")

    def _phase_output(
        self,
        session_id: str,
        phase: Phase,
        status: Literal["running", "completed"],
        system_prompt: str | None = None,
        user_input: str | None = None,
        *,
        output: str | None = None,
    ) -> None:
        """Queue ``phase``'s output: ``running`` with the prompts the model is sent, or
        ``completed`` with what it decided."""
        self.recorder.submit(
            SavePhaseOutput(
                session_id, phase.id, phase.name, status, system_prompt, user_input, output
            )
        )

    def _session_changed(self, session_id: str, **fields: Any) -> None:
        """Queue the session's bookkeeping (status, challenge, agent, phase, room)."""
        self.recorder.submit(UpdateSession(session_id, fields))

    def brief(self) -> str:
        """The session brief every agent's instructions carry (SPEC §3a), from stored
        state only: the challenge, each completed phase's decision, the board's work,
        the evaluation and what the person agreed coach may remember."""
        decisions = tuple(
            PhaseDecision(phase.id, phase.name, self.phase_outputs[phase.id])
            for phase in self.prompts.manifest.phases
            if phase.id in self.phase_outputs and phase.owner == "strategist"
        )
        current = self.current_phase_id
        given = BriefInput(
            challenge=self.design_challenge,
            decisions=decisions,
            current_phase=(
                self.phase(current).name
                if current is not None and current not in self.phase_outputs
                else None
            ),
            data=self.state.data,
            person=tuple(person_lines(self.person)),
        )
        return render_brief(given, max_tokens=self.brief_max_tokens)

    # --- the person ----------------------------------------------------------------

    async def identify(self, user: UserRecord, *, listed: int) -> None:
        """Who is talking is ``user``, known before they said their name (a room's
        participant): their id, their name (unless one is known), their newest
        ``listed`` sessions (what the conversation may search or load from) and what they
        agreed coach may remember."""
        self.user_id = user.id
        self.user_name = self.user_name or user.display_name
        self.past_sessions = tuple(await self.store.get_user_sessions(user.id, limit=listed))
        await self.load_person()

    async def load_person(self) -> None:
        """Read what the identified user agreed coach may remember."""
        if self.user_id is None:
            return
        record = await self.store.get_person(self.user_id)
        self.person = person_of(record.value)
        self.person_step = record.step

    async def change_person(
        self,
        value: Person,
        change: Change,
        action: Action,
        *,
        trigger: Trigger | None = None,
        source: Source | None = None,
        actor_id: str | None = None,
    ) -> Delta:
        """Store a new person record with the delta explaining it (one transaction).

        Raises:
            StaleWrite: another conversation of this person changed it first (this
                object then holds the stored record; nothing of this change was kept).
            NotIdentified: no user is identified.
        """
        user_id = self.identified("change what is remembered")
        turn = self.state.turn
        spec = DeltaSpec(
            turn_id=turn.turn_id,
            trigger=trigger or turn.trigger,
            source=source or turn.source,
            actor_id=actor_id or turn.actor_id,
            delta_type=change.delta_type,
            path=change.path,
            action=action,
            result=ResultMeta(count=change.count, fields=change.fields),
        )
        try:
            record, delta = await self.store.update_person(
                user_id, dict(value), spec, expected_step=self.person_step
            )
        except StaleWrite:
            await self.load_person()
            raise
        self.person, self.person_step = person_of(record.value), record.step
        return delta

    def identified(self, action: str) -> str:
        """The identified user's id (``NotIdentified``, naming ``action``, if none is)."""
        if self.user_id is None:
            raise NotIdentified(action)
        return self.user_id

    def next_agent_kind(self) -> AgentKind:
        """Which agent should own the conversation given what is completed."""
        phase = self.next_phase()
        return phase.owner if phase is not None else "evaluator"

    # --- sessions ------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Wait until what this process has queued is stored — a load or a branch reads
        it back — for at most :attr:`flush_before_load` seconds.

        Raises:
            SavingBehind: it was not stored in time (the database is slow or away).
        """
        try:
            async with asyncio.timeout(self.flush_before_load):
                await self.recorder.flush()
        except TimeoutError:
            raise SavingBehind(self.flush_before_load) from None

    async def owned_session(self, session_id: str) -> SessionRecord:
        """This user's session ``session_id``, read with the user's id: another user's
        session is as unknown as a missing one.

        Raises:
            SessionNotFound: no such session of this user.
            NotIdentified: no user is identified.
        """
        user_id = self.identified("read a session")
        found = await self.store.get_session(session_id, user_id=user_id)
        if found is None:
            raise SessionNotFound(session_id)
        return found

    async def branch(
        self, session_id: str, phase_id: str | None = None, *, after_message: int | None = None
    ) -> ResumeResult:
        """Branch this user's session from the end of ``phase_id`` — or after the turn of
        conversation row ``after_message`` — and load the branch.

        Raises:
            SessionNotFound: not this user's session (the same answer as unknown).
            BranchRefused: that phase cannot be branched from (words for the user).
            SavingBehind: queued writes could not be stored in time; nothing changed.
            NotIdentified: no user is identified.
        """
        await self.catch_up()  # the source as this process last saw it
        await self.owned_session(session_id)
        if after_message is not None:
            branch = await self.store.branch_session(session_id, after_message=after_message)
            return await self.load_state(branch.id)
        names = {p.id: p.name for p in self.prompts.manifest.phases}
        if phase_id is None or phase_id not in names:
            known = ", ".join(names)
            raise BranchRefused(
                session_id,
                phase_id or "",
                f"There is no phase called {phase_id!r} (phases: {known}).",
            )
        done = {
            o.phase_id
            for o in await self.store.get_phase_outputs(session_id, include_prompts=False)
            if o.status == "completed"
        }
        if phase_id not in done:
            raise BranchRefused(
                session_id,
                phase_id,
                f"{names[phase_id]} is not completed yet, so there is nothing to branch.",
            )
        branch = await self.store.branch_session(session_id, phase_id)
        return await self.load_state(branch.id)

    async def load_state(self, session_id: str) -> ResumeResult:
        """Load a stored session of this user into this object.

        Every read happens before any field changes, so a failure leaves this object as
        it was and an event recorded meanwhile never sees half a switch.

        Raises:
            ResumeError: the session is unknown, not this user's, finished, or has
                nothing to resume (the message is meant for the user).
            SavingBehind: this process's queued writes could not be stored in time
                (the database is unavailable); nothing changed.
            NotIdentified: no user is identified.
        """
        user_id = self.identified("load a session")
        with metrics.RESUME_LATENCY.time():
            # Writes this process still has queued for the session (a reconnect right
            # after a disconnect) must be stored before its state and step are read back.
            await self.catch_up()
            result = await self.store.resume_session(
                session_id, user_id=user_id, max_pairs=self.max_resume_pairs
            )
        self.resumed = result
        self.stored_steps = result.stored_steps
        self.state.attach(session_id, result.state)
        self.pending_session_id = None
        self.design_challenge = result.session.design_challenge
        self.status = "in_progress"
        self.phase_outputs = {
            o.phase_id: o.output or "" for o in result.outputs if o.status == "completed"
        }
        self.current_phase_id = result.next_phase_id
        self.session_id = result.session.id  # last: the recorder follows this field
        if self.room is not None and result.session.room != self.room:
            self._session_changed(session_id, room=self.room)
        return result
