"""The person, remembered (SPEC §4.6): lasting facts kept only with the person's consent.

What is remembered is shown in every agent's instructions (the session brief), with
each fact's id, so the model answers "what do you know about me?" from there and names
a fact to correct or forget. Each change is stored at once with its delta, and the
instructions are renewed so the next request already says it.
"""

from __future__ import annotations

from collections.abc import Callable

from livekit.agents import RunContext, ToolError, function_tool

from ..conversation.userdata import UserData
from ..errors import StaleWrite
from ..state import person
from ..state.design import Change
from ..state.shapes import Person
from ..state.zones import Action
from ..store import clean_text
from .base import CoachAgentBase, needs_notes


class PersonMemory(CoachAgentBase):
    """The tools that remember, correct and forget facts about the person."""

    @function_tool
    @needs_notes
    async def remember_about_person(
        self, context: RunContext[UserData], topic: str, text: str
    ) -> str:
        """Remember one lasting fact about the person, for this and later sessions.

        Only after they agreed to it being remembered: ask first ("Shall I remember that
        you lead a team of four?"). Never for passing remarks or anything sensitive.

        Args:
            topic: One of role, organisation, designs, preference, other.
            text: The fact in a few words, e.g. "leads a team of four".
        """
        topic, text = clean_text(topic), clean_text(text)
        await self._change(
            context.userdata,
            lambda p: person.remember(p, topic, text),
            "remember_about_person",
            topic=topic,
            text=text,
        )
        return "Remembered. Confirm it in a few words."

    @function_tool
    @needs_notes
    async def correct_about_person(
        self, context: RunContext[UserData], fact_id: str, text: str
    ) -> str:
        """Correct one remembered fact when the person says it is wrong or out of date.

        Args:
            fact_id: The fact's id, as your instructions list it (e.g. fact_1a2b3c4d).
            text: What the fact should say now.
        """
        fact_id, text = clean_text(fact_id).strip(), clean_text(text)
        await self._change(
            context.userdata,
            lambda p: person.correct(p, fact_id, text),
            "correct_about_person",
            fact_id=fact_id,
            text=text,
        )
        return "Corrected. Confirm it in a few words."

    @function_tool
    @needs_notes
    async def forget_about_person(self, context: RunContext[UserData], fact_id: str) -> str:
        """Forget a remembered fact when the person asks you to.

        Args:
            fact_id: The fact's id as your instructions list it, or "all" to forget
                everything remembered about them.
        """
        fact_id = clean_text(fact_id).strip()
        if fact_id.lower() == "all":
            if not context.userdata.person["facts"]:  # nothing to write a change for
                return "Nothing is remembered about them. Say so in one sentence."
            await self._change(context.userdata, person.forget_all, "forget_about_person")
            return "Everything remembered about them is forgotten. Say so in one sentence."
        await self._change(
            context.userdata,
            lambda p: person.forget(p, fact_id),
            "forget_about_person",
            fact_id=fact_id,
        )
        return "Forgotten. Say so in one sentence."

    async def _change(
        self,
        userdata: UserData,
        change: Callable[[Person], tuple[Person, Change]],
        tool: str,
        **params: str,
    ) -> None:
        if userdata.user_id is None:
            raise ToolError("Identify the person first (ask for their name).")
        try:
            value, what = change(userdata.person)
        except person.PersonError as exc:
            raise ToolError(str(exc)) from None
        try:
            await userdata.change_person(value, what, Action(type="tool", tool=tool, params=params))
        except StaleWrite:
            await self.refresh_instructions()
            raise ToolError(
                "What is remembered was just changed elsewhere; your instructions now show "
                "it. Check whether this change is still wanted, then try again."
            ) from None
        await self.refresh_instructions()
