"""DesignStrategist: works through the strategist phases of the manifest, one by one."""

from __future__ import annotations

from livekit.agents import RunContext, ToolError, function_tool

from ..userdata import UserData
from .base import CoachAgentBase
from .phased import PhasedAgent

MAX_SUMMARY = 8_000


class DesignStrategist(PhasedAgent):
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
        summary = summary.strip()
        if not summary or len(summary) > MAX_SUMMARY:
            raise ToolError(f"The summary must be 1 to {MAX_SUMMARY} characters.")
        phase = self.current_phase(userdata)
        if phase.id in userdata.completed_phases:
            raise ToolError("Every strategy phase is already done. Call transfer_to_evaluator.")
        assert userdata.session_id is not None
        userdata.recorder.phase_finished(userdata.session_id, phase, output=summary)
        userdata.mark_completed(phase.id, summary)
        upcoming = userdata.next_phase(self.kind)
        if upcoming is None:
            return (
                f"{phase.name} is recorded. Every strategy phase is done: "
                "call transfer_to_evaluator."
            )
        await self.start_phase(userdata, upcoming)
        return f"{phase.name} is recorded. Next phase: {upcoming.name}. {upcoming.instructions}"

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
        from .evaluator import DesignEvaluator

        return DesignEvaluator(userdata, chat_ctx=self.chat_ctx)
