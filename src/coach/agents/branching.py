"""Branching by voice: "let's go back to Define and try another direction" (SPEC §8a)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from livekit.agents import RunContext, ToolError, function_tool, llm

from ..conversation.userdata import UserData
from ..errors import BranchRefused, SavingBehind, SessionNotFound
from ..store import MessageRecord, clean_text
from .base import CoachAgentBase, needs_notes
from .restore import BranchPoint, resume_into

_STOP = frozenset(
    "a an and back before go the to we us it of on in at that this was were our "
    "let lets let's i you me my idea ideas about".split()
)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w']+", text.lower()) if len(w) > 1 and w not in _STOP]


def message_before(
    messages: Sequence[MessageRecord], described: str, *, asking_now: bool = False
) -> MessageRecord:
    """The message whose turn the branch keeps last, for "go back to before <described>":
    the message just before the turn in which one of ``messages`` matches every word of
    ``described`` (its small words aside). ``asking_now``: the latest turn is the one
    asking (the open session), so it is not searched.

    Raises:
        ToolError: No message matches, several turns do (the user should be more
            specific), or the match is in the first turn (nothing comes before it).
    """
    words = _words(described)
    if not words:
        raise ToolError("Ask the user which moment they mean, in a few words that were said.")
    turn_of: list[int] = []  # each message's turn start (the index of its user message)
    for index, message in enumerate(messages):
        starts = message.role == "user" or not turn_of
        turn_of.append(index if starts else turn_of[-1])
    hits = [
        i
        for i, m in enumerate(messages)
        if m.role in ("user", "assistant") and all(w in _words(m.content) for w in words)
    ]
    latest = turn_of[-1] if asking_now and turn_of else None
    turns = sorted({turn_of[i] for i in hits} - {latest})
    if not turns:
        raise ToolError(
            f"No message of this session mentions {described!r}. Ask the user to describe "
            "the moment in other words."
        )
    if len(turns) > 1:
        quotes = "; ".join(repr(_quote(messages[t].content)) for t in turns[:3])
        raise ToolError(
            f"Several moments mention {described!r} ({quotes}). Ask the user to be more "
            "specific about which one they mean."
        )
    if turns[0] == 0:
        raise ToolError(
            "That is the very start of the session: there is nothing before it to keep. "
            "Offer to start a new session instead."
        )
    return messages[turns[0] - 1]


def _quote(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Branching(CoachAgentBase):
    """The ``branch_session`` tool, for the agents that offer it (coach, strategist)."""

    @function_tool
    @needs_notes
    async def branch_session(
        self,
        context: RunContext[UserData],
        phase_id: str | None = None,
        before: str | None = None,
    ) -> CoachAgentBase | tuple[CoachAgentBase, str]:
        """Start a new line of work from an earlier point of the user's session: the end
        of a completed phase ("let's go back to Define and try another direction"), or
        just before a moment they describe ("go back to before we picked the lockers
        idea"). The session as it is now stays untouched and can be resumed later.

        Use the open session, or the one select_session_to_load marked. Give exactly one
        of the two arguments.

        Args:
            phase_id: The id of a completed phase to branch from (e.g. define); the
                branch continues from the phase after it.
            before: A few words that were said at the moment to go back before (e.g.
                "lockers"); the branch holds everything up to the turn before it.
        """
        userdata = context.userdata
        source = userdata.session_id or userdata.pending_session_id
        if source is None or userdata.user_id is None:
            raise ToolError(
                "There is no session to branch yet: identify the user and open or select "
                "one of their sessions first."
            )
        if (phase_id is None) == (before is None):
            raise ToolError("Give either phase_id or before (the words of the moment), not both.")
        told: str | None = None  # what the model is told beside the handoff
        try:
            if before is not None:
                point, told = await self._moment_before(userdata, source, clean_text(before))
            else:
                point = BranchPoint(phase_id=clean_text(phase_id or "").strip().lower())
            current = self._visit_ctx(userdata, source)
            branched = await resume_into(userdata, source, current=current, branch=point)
        except BranchRefused as exc:
            raise ToolError(f"{exc} Tell the user so in plain words.") from None
        except SessionNotFound:
            raise ToolError("No such session. Use an id identify_user listed.") from None
        except SavingBehind:
            raise ToolError(
                "Saving is still catching up, so the branch cannot be made yet. Ask the "
                "user to try again in a moment."
            ) from None
        return branched.agent if told is None else (branched.agent, told)

    def _visit_ctx(self, userdata: UserData, source: str) -> llm.ChatContext:
        """What of this visit the branch's agent carries on with: all of it, or — when
        the open session is the one branched — only the turn asking (the rest is the
        source's, after the branch point)."""
        if source != userdata.session_id:
            return self.chat_ctx
        items = self.chat_ctx.items
        users = [
            n for n, i in enumerate(items) if isinstance(i, llm.ChatMessage) and i.role == "user"
        ]
        return llm.ChatContext(items[users[-1] :] if users else [])

    async def _moment_before(
        self, userdata: UserData, source: str, described: str
    ) -> tuple[BranchPoint, str]:
        """Where "before <described>" is in ``source``, and what to tell the model of it."""
        await userdata.catch_up()  # the open session's latest turns
        await userdata.owned_session(source)  # read with the user's id, as every load is
        messages = await userdata.store.get_session_conversation(source)
        kept = message_before(messages, described, asking_now=source == userdata.session_id)
        return BranchPoint(after_message=kept.id), (
            f"Branched to just before {described!r}: the branch ends with "
            f"{kept.role} saying {_quote(kept.content)!r}. Tell the user where you are now."
        )
