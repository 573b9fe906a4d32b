"""DesignStrategist: works through the strategist phases of the manifest, one by one."""

from __future__ import annotations

from collections.abc import Callable

from livekit.agents import RunContext, ToolError, function_tool

from ..conversation.userdata import UserData
from ..state import design
from ..state.shapes import DataZone, SearchResult, data_zone
from ..state.zones import Action, Zone
from ..store import clean_text
from .base import CoachAgentBase, agent_for, needs_notes
from .branching import Branching
from .memory import PersonMemory
from .phased import PhasedAgent

MAX_SUMMARY = 8_000
MAX_ITEM = 1_000
MAX_TITLE = 120
MAX_RESULTS = 20


def _clean(value: str, name: str, limit: int) -> str:
    value = " ".join(clean_text(value).split())
    if not value or len(value) > limit:
        raise ToolError(f"{name} must be 1 to {limit} characters.")
    return value


class DesignStrategist(PersonMemory, Branching, PhasedAgent):
    """Guides empathize → define → ideate → strategy (or whatever the manifest says)."""

    kind = "strategist"

    @function_tool
    async def complete_phase(self, context: RunContext[UserData], summary: str) -> str:
        """Record the current phase as done, with a summary of what was decided.

        Call this when the phase's goal is reached and the person agrees.

        Args:
            summary: What was decided in this phase, in a few sentences.
        """
        userdata = context.userdata
        summary = clean_text(summary).strip()
        if not summary or len(summary) > MAX_SUMMARY:
            raise ToolError(f"The summary must be 1 to {MAX_SUMMARY} characters.")
        phase = self.current_phase(userdata)
        if phase.id in userdata.completed_phases:
            raise ToolError("Every strategy phase is already done. Call transfer_to_evaluator.")
        userdata.complete_phase(phase, summary)
        upcoming = userdata.next_phase(self.kind)
        if upcoming is None:
            await self.refresh_instructions()
            return (
                f"{phase.name} is recorded. Every strategy phase is done: "
                "call transfer_to_evaluator."
            )
        await self.start_phase(userdata, upcoming)
        return f"{phase.name} is recorded. Next phase: {upcoming.name}. {upcoming.instructions}"

    @function_tool
    async def add_insight(self, context: RunContext[UserData], text: str) -> str:
        """Record one insight about the users (an observation, need or pain point).

        Args:
            text: The insight in one sentence.
        """
        userdata = context.userdata
        text = _clean(text, "text", MAX_ITEM)
        try:
            data, change = design.add_insight(
                userdata.state.data, text, phase_id=userdata.current_phase_id
            )
        except design.DesignError as exc:
            raise ToolError(str(exc)) from None
        self.change_data(userdata, data, change, "add_insight", text=text)
        return f"Insight recorded ({len(data['insights'])} so far)."

    @function_tool
    async def add_idea(self, context: RunContext[UserData], title: str, description: str) -> str:
        """Record one idea for the challenge.

        Args:
            title: A short name for the idea (a few words).
            description: What the idea is, in one or two sentences.
        """
        userdata = context.userdata
        title = _clean(title, "title", MAX_TITLE)
        description = _clean(description, "description", MAX_ITEM)
        try:
            data, change = design.add_idea(userdata.state.data, title, description)
        except design.DesignError as exc:
            raise ToolError(str(exc)) from None
        self.change_data(userdata, data, change, "add_idea", title=title, description=description)
        return f"Idea recorded with id {data['ideas'][-1]['id']}."

    @function_tool
    async def remove_idea(self, context: RunContext[UserData], idea_id: str) -> str:
        """Remove an idea the user dropped.

        Args:
            idea_id: The id add_idea returned.
        """
        self._change_idea(context.userdata, design.remove_idea, "remove_idea", idea_id)
        return "Idea removed."

    @function_tool
    async def select_idea(self, context: RunContext[UserData], idea_id: str) -> str:
        """Select the idea the strategy will build on.

        Args:
            idea_id: The id add_idea returned.
        """
        self._change_idea(context.userdata, design.select_idea, "select_idea", idea_id)
        return "Idea selected."

    def _change_idea(
        self,
        userdata: UserData,
        change: Callable[[DataZone, str], tuple[DataZone, design.Change]],
        tool: str,
        idea_id: str,
    ) -> None:
        idea_id = clean_text(idea_id).strip()
        try:
            data, what = change(userdata.state.data, idea_id)
        except design.DesignError as exc:
            raise ToolError(str(exc)) from None
        self.change_data(userdata, data, what, tool, idea_id=idea_id)

    @function_tool
    @needs_notes
    async def search_past_work(self, context: RunContext[UserData], query: str) -> str:
        """Search the insights and ideas of the user's own earlier sessions.

        Args:
            query: Words to look for, e.g. "onboarding trust".
        """
        userdata = context.userdata
        query = _clean(query, "query", MAX_TITLE)
        if userdata.user_id is None:
            raise ToolError("Identify the user first: there is no earlier work to search.")
        results: list[SearchResult] = []
        # One read of every earlier session's work, not one per session.
        for session_id, past in await userdata.store.get_past_work(userdata.user_id):
            if session_id == userdata.session_id:
                continue
            results += [
                {"kind": item["kind"], "text": item["text"], "session_id": session_id}
                for item in design.search_items(data_zone(past), query)
            ]
            if len(results) >= MAX_RESULTS:
                break
        results = results[:MAX_RESULTS]
        data, change = design.search_results(userdata.state.data, query, results)
        action = Action(type="search", tool="search_past_work", params={"query": query})
        userdata.state.write(Zone.DATA if data is not None else None, data, change, action)
        if not results:
            return (
                f'Nothing in earlier sessions matches "{query}". The board still shows '
                "what it showed before; say so briefly."
            )
        listing = "\n".join(f"- ({r['kind']}) {r['text']}" for r in results)
        return f"{len(results)} match(es) from earlier sessions:\n{listing}"

    @function_tool
    async def transfer_to_evaluator(self, context: RunContext[UserData]) -> CoachAgentBase:
        """Hand the user to the Design Evaluator once every strategy phase is done."""
        userdata = context.userdata
        remaining = [
            p.name
            for p in userdata.prompts.manifest.owned_by(self.kind)
            if p.id not in userdata.completed_phases
        ]
        if remaining:
            raise ToolError(f"These phases are not done yet: {', '.join(remaining)}.")
        return agent_for("evaluator")(userdata, chat_ctx=self.chat_ctx)
