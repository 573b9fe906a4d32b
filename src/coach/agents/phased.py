"""Agents that work through phases of the manifest (strategist and evaluator)."""

from __future__ import annotations

from typing import Any

from ..conversation.userdata import UserData
from ..prompts import Phase
from .base import CoachAgentBase


class PhasedAgent(CoachAgentBase):
    """An agent whose prompt follows the current phase it owns."""

    def current_phase(self, userdata: UserData) -> Phase:
        """The phase this agent works on now: the current one if it owns it, else its next."""
        if userdata.current_phase_id is not None:
            phase = userdata.phase(userdata.current_phase_id)
            if phase.owner == self.kind and phase.id not in userdata.completed_phases:
                return phase
        upcoming = userdata.next_phase(self.kind)
        # An agent whose phases are all done stays on its last one (e.g. evaluator at the end).
        return upcoming or userdata.prompts.manifest.owned_by(self.kind)[-1]

    def prompt_variables(self, userdata: UserData) -> dict[str, Any]:
        phase = self.current_phase(userdata)
        return {
            **super().prompt_variables(userdata),
            "design_challenge": userdata.design_challenge or "(not captured)",
            "phase_name": phase.name,
            "phase_instructions": phase.instructions,
        }

    def greeting_variables(self, userdata: UserData) -> dict[str, Any]:
        return {
            **super().greeting_variables(userdata),
            "design_challenge": userdata.design_challenge or "(not captured)",
            "phase_name": self.current_phase(userdata).name,
        }

    def phase_input(self, userdata: UserData) -> str:
        """The input a phase starts from: the session brief (the challenge and what earlier
        phases decided), which the model receives inside the instructions."""
        return userdata.brief()

    async def start_phase(self, userdata: UserData, phase: Phase) -> None:
        """Make ``phase`` current: new instructions, and a ``running`` phase output that
        stores exactly what the model is sent from now on."""
        userdata.current_phase_id = phase.id  # the instructions are this phase's
        instructions = await self.refresh_instructions()
        userdata.start_phase(
            phase, self.kind, system_prompt=instructions, user_input=self.phase_input(userdata)
        )
        self.show_in_view(userdata)

    async def on_takeover(self, userdata: UserData) -> None:
        await self.start_phase(userdata, self.current_phase(userdata))
