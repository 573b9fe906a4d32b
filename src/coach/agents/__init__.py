"""The three agents: DesignCoach (entry), DesignStrategist, DesignEvaluator."""

from .base import CoachAgentBase, agent_for
from .coach import DesignCoach
from .evaluator import DesignEvaluator
from .strategist import DesignStrategist

__all__ = ["CoachAgentBase", "DesignCoach", "DesignEvaluator", "DesignStrategist", "agent_for"]
