"""DesignCoach: the entry agent. Identifies the user, then starts or resumes a session."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from livekit.agents import RunContext, ToolError, function_tool

from ..conversation.userdata import UserData
from ..errors import InvalidWrite, ResumeError, SavingBehind, StorageError
from ..state import design
from ..store import SessionRecord, clean_text, session_tree
from .base import CoachAgentBase, agent_for, needs_notes
from .branching import Branching
from .memory import PersonMemory
from .restore import resume_into

logger = logging.getLogger("coach.agents")

MAX_NAME = 80
MAX_CHALLENGE = 2_000
_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
_ECHO = 64
"""Characters of a refused argument quoted back to the model."""


def identity_from_name(name: str) -> str:
    """The chat/console identity for a spoken name: lower-case, spaces to dashes."""
    return "-".join(name.lower().split())


LISTED = 5
"""Sessions a greeting or ``identify_user`` lists (the newest): a person with hundreds
pays for five, and is told how many more there are."""


async def listed_sessions(userdata: UserData, user_id: str) -> tuple[list[SessionRecord], int]:
    """The user's newest :data:`LISTED` sessions and how many older ones there are."""
    sessions = await userdata.store.get_user_sessions(user_id, limit=LISTED)
    more = 0
    if len(sessions) == LISTED:
        more = await userdata.store.count_user_sessions(user_id) - LISTED
    return sessions, more


def describe_sessions(userdata: UserData, sessions: Sequence[SessionRecord], more: int = 0) -> str:
    """One line per session: id, challenge, date, status and progress; a branch is
    listed under the session it branched from (``↳ branch of ... from Define``); then
    how many older sessions were not listed."""
    total = len(userdata.prompts.manifest.phases)
    names = {p.id: p.name for p in userdata.prompts.manifest.phases}

    def line(s: SessionRecord, depth: int) -> str:
        indent = "  " * depth
        branch = ""
        if s.parent_session_id is not None:
            phase = names.get(s.branched_from_phase or "", s.branched_from_phase)
            branch = f"↳ branch of {s.parent_session_id} from {phase}: "
        return (
            f'{indent}- {branch}session_id {s.id}: "{s.design_challenge or "no challenge yet"}", '
            f"started {s.created_at:%Y-%m-%d}, {s.status.replace('_', ' ')}, "
            f"{s.completed_phases} of {total} phases done"
        )

    lines = [line(s, depth) for s, depth in session_tree(sessions)]
    if more:
        lines.append(
            f"- and {more} older session(s), not listed here (the person can open them "
            "from the sessions panel of the web client)"
        )
    return "\n".join(lines)


class DesignCoach(PersonMemory, Branching):
    """Greets, identifies the user, captures a new challenge or loads an earlier session."""

    kind = "coach"
    _known_sessions: Sequence[SessionRecord] | None = None
    _more_sessions = 0

    async def on_takeover(self, userdata: UserData) -> None:
        # A known identity (room participant, --user) is identified before the greeting,
        # so the first reply can already offer to resume.
        if userdata.identity is None or userdata.user_id is not None:
            return
        name = userdata.user_name or userdata.identity
        try:
            user = await userdata.store.get_or_create_user(userdata.identity, display_name=name)
            sessions, self._more_sessions = await listed_sessions(userdata, user.id)
        except StorageError as exc:
            # Greet anyway; identify_user looks again (and says so if it still cannot).
            logger.warning("cannot look the user up before greeting (%s)", type(exc).__name__)
            return
        userdata.user_id, userdata.user_name = user.id, user.display_name or name
        userdata.past_sessions = tuple(sessions)
        self._known_sessions = sessions
        await userdata.load_person()
        await self.refresh_instructions()

    def greeting(self, userdata: UserData) -> str:
        sessions = self._known_sessions
        if sessions is None or userdata.prompts.agents["coach"].returning_greeting is None:
            return super().greeting(userdata)
        return userdata.prompts.render(
            "coach",
            "returning_greeting",
            user_name=userdata.user_name,
            sessions=describe_sessions(userdata, sessions, self._more_sessions) or "(none yet)",
        )

    @function_tool
    @needs_notes
    async def identify_user(self, context: RunContext[UserData], name: str) -> str:
        """Identify the person you are talking to and look up their earlier sessions.

        Call this as soon as you know the person's name.

        Args:
            name: The person's name, as they said it.
        """
        userdata = context.userdata
        name = " ".join(clean_text(name).split())
        if not name or len(name) > MAX_NAME:
            raise ToolError(f"The name must be 1 to {MAX_NAME} characters. Ask for it again.")
        identity = userdata.identity or identity_from_name(name)
        try:
            user = await userdata.store.get_or_create_user(identity, display_name=name)
        except InvalidWrite as exc:
            raise ToolError(f"{exc} Ask for the name again.") from None
        userdata.user_id, userdata.user_name = user.id, name
        sessions, more = await listed_sessions(userdata, user.id)
        userdata.past_sessions = tuple(sessions)
        await userdata.load_person()
        await self.refresh_instructions()
        if not sessions:
            return (
                f"{name} is new here. Ask what they want to design or redesign, "
                "for whom and why, then call capture_design_challenge."
            )
        return (
            f"{name} has {len(sessions) + more} earlier session(s), most recent first:\n"
            + describe_sessions(userdata, sessions, more)
            + "\nOffer to resume the most recent in-progress one, pick another, or start fresh."
        )

    @function_tool
    @needs_notes
    async def select_session_to_load(self, context: RunContext[UserData], session_id: str) -> str:
        """Mark one of the user's earlier sessions to be loaded.

        Use only a session_id that identify_user listed. After this, ask the user to say
        "continue" and then call load_selected_session.

        Args:
            session_id: The id of the session to resume, exactly as listed.
        """
        userdata = context.userdata
        if userdata.user_id is None:
            raise ToolError("Identify the user first (ask for their name, call identify_user).")
        session_id = clean_text(session_id).strip().lower()
        session = (
            await userdata.store.get_session(session_id, user_id=userdata.user_id)
            if _SESSION_ID.match(session_id)
            else None
        )
        if session is None:
            # The same answer for unknown, malformed and other users' ids: nothing leaks.
            raise ToolError(
                f"No such session: {session_id[:_ECHO]}. Use an id identify_user listed."
            )
        userdata.pending_session_id = session.id
        return (
            f'Session "{session.design_challenge}" is ready to load. Ask the user to say '
            '"continue" when they are ready, then call load_selected_session.'
        )

    @function_tool
    @needs_notes
    async def load_selected_session(self, context: RunContext[UserData]) -> CoachAgentBase:
        """Load the selected session and hand the user to the colleague who continues it.

        Call this only after select_session_to_load and the user's confirmation.
        """
        userdata = context.userdata
        session_id = userdata.pending_session_id
        if session_id is None:
            raise ToolError("No session is selected. Call select_session_to_load first.")
        try:
            resumed = await resume_into(userdata, session_id, current=self.chat_ctx)
        except ResumeError as exc:
            userdata.pending_session_id = None
            raise ToolError(
                f"{exc}. Explain this to the user in plain words and offer to start fresh."
            ) from None
        except SavingBehind:
            raise ToolError(
                "Saving is still catching up, so the session cannot be loaded yet. Ask the "
                "user to say continue again in a moment."
            ) from None
        return resumed.agent

    @function_tool
    @needs_notes
    async def capture_design_challenge(self, context: RunContext[UserData], challenge: str) -> str:
        """Record the design challenge the user wants to work on; starts a new session.

        Args:
            challenge: One or two sentences: what to design or redesign, for whom, and why.
        """
        userdata = context.userdata
        challenge = clean_text(challenge).strip()
        if userdata.user_id is None:
            raise ToolError("Identify the user first (ask for their name, call identify_user).")
        if not challenge or len(challenge) > MAX_CHALLENGE:
            raise ToolError(f"The challenge must be 1 to {MAX_CHALLENGE} characters.")
        phase = userdata.prompts.manifest.owned_by("coach")[0]
        prompt = self.sent_instructions  # what the model had when it called this tool
        await userdata.capture_challenge(phase, challenge, system_prompt=prompt)
        self.show_in_view(userdata)
        data, change = design.set_challenge(userdata.state.data, challenge)
        self.change_data(userdata, data, change, "capture_design_challenge", challenge=challenge)
        await self.refresh_instructions()
        return "Challenge recorded. Confirm it in one sentence, then call transfer_to_strategist."

    @function_tool
    async def transfer_to_strategist(self, context: RunContext[UserData]) -> CoachAgentBase:
        """Hand the user to the Design Strategist once the challenge is captured."""
        userdata = context.userdata
        if userdata.session_id is None or userdata.design_challenge is None:
            raise ToolError("Capture the design challenge first (capture_design_challenge).")
        return agent_for("strategist")(userdata, chat_ctx=self.chat_ctx)
