"""Agent classes by kind, for handoffs decided by state (avoids import cycles)."""

from __future__ import annotations

from ..prompts import AgentKind
from .base import CoachAgentBase


def agent_for(kind: AgentKind) -> type[CoachAgentBase]:
    """The agent class that owns phases of ``kind``."""
    from .coach import DesignCoach
    from .evaluator import DesignEvaluator
    from .strategist import DesignStrategist

    classes: dict[AgentKind, type[CoachAgentBase]] = {
        "coach": DesignCoach,
        "strategist": DesignStrategist,
        "evaluator": DesignEvaluator,
    }
    return classes[kind]
