"""Branching by voice: "let's go back to Define and try another direction" (SPEC §8a)."""

from __future__ import annotations

from livekit.agents import RunContext, ToolError, function_tool

from ..errors import BranchRefused, SessionNotFound
from ..store import clean_text
from ..userdata import UserData
from .base import CoachAgentBase, needs_notes
from .restore import resumed_agent


class Branching(CoachAgentBase):
    """The ``branch_session`` tool, for the agents that offer it (coach, strategist)."""

    @function_tool
    @needs_notes
    async def branch_session(self, context: RunContext[UserData], phase_id: str) -> CoachAgentBase:
        """Start a new line of work from the end of a completed phase of the user's
        session, e.g. "let's go back to Define and try another direction". The session as
        it is now stays untouched and can be resumed later; the new branch continues from
        the phase after ``phase_id``.

        Use the open session, or the one select_session_to_load marked.

        Args:
            phase_id: The id of a completed phase to branch from (e.g. define).
        """
        userdata = context.userdata
        source = userdata.session_id or userdata.pending_session_id
        if source is None or userdata.user_id is None:
            raise ToolError(
                "There is no session to branch yet: identify the user and open or select "
                "one of their sessions first."
            )
        phase = clean_text(phase_id).strip().lower()
        try:
            result = await userdata.branch(source, phase)
        except BranchRefused as exc:
            raise ToolError(f"{exc} Tell the user so in plain words.") from None
        except SessionNotFound:
            raise ToolError("No such session. Use an id identify_user listed.") from None
        except TimeoutError:
            raise ToolError(
                "Saving is still catching up, so the branch cannot be made yet. Ask the "
                "user to try again in a moment."
            ) from None
        return resumed_agent(userdata, result, current=self.chat_ctx)
