"""DesignEvaluator: scores the strategy and closes the session."""

from __future__ import annotations

import json

from livekit.agents import RunContext, ToolError, function_tool

from ..conversation.userdata import UserData
from ..state import design
from ..state.shapes import Evaluation
from ..store import clean_text
from .phased import PhasedAgent

MAX_TEXT = 4_000


class DesignEvaluator(PhasedAgent):
    """Scores desirability, feasibility and viability, then finishes the session."""

    kind = "evaluator"

    @function_tool
    async def record_evaluation(
        self,
        context: RunContext[UserData],
        desirability: int,
        feasibility: int,
        viability: int,
        summary: str,
    ) -> str:
        """Record the evaluation of the strategy.

        Args:
            desirability: 1 (poor) to 5 (excellent): do people want this?
            feasibility: 1 to 5: can it be built with what is available?
            viability: 1 to 5: does it sustain itself (business, time, effort)?
            summary: One sentence of reasoning per score and the most useful next step.
        """
        userdata = context.userdata
        scores = {"desirability": desirability, "feasibility": feasibility, "viability": viability}
        bad = [name for name, value in scores.items() if not 1 <= value <= 5]
        if bad:
            raise ToolError(f"Scores must be whole numbers from 1 to 5: fix {', '.join(bad)}.")
        summary = clean_text(summary).strip()
        if not summary or len(summary) > MAX_TEXT:
            raise ToolError(f"The summary must be 1 to {MAX_TEXT} characters.")
        phase = self.current_phase(userdata)
        evaluation: Evaluation = {
            "desirability": desirability,
            "feasibility": feasibility,
            "viability": viability,
            "summary": summary,
        }
        userdata.complete_phase(phase, json.dumps(evaluation))
        data, change = design.set_evaluation(userdata.state.data, evaluation)
        self.change_data(userdata, data, change, "record_evaluation", **scores, summary=summary)
        await self.refresh_instructions()
        return "Evaluation recorded. Share it briefly, then ask whether to wrap up."

    @function_tool
    async def finish_session(self, context: RunContext[UserData]) -> str:
        """Mark the session as completed. Call it when the user is ready to wrap up."""
        userdata = context.userdata
        if userdata.evaluation is None and userdata.next_phase() is not None:
            raise ToolError("Record the evaluation first (record_evaluation).")
        userdata.finish()
        return "The session is completed and saved. Thank the person and say goodbye."
