"""The three agents: DesignCoach (entry), DesignStrategist, DesignEvaluator."""

from .base import CoachAgentBase
from .coach import DesignCoach
from .evaluator import DesignEvaluator
from .registry import agent_for
from .strategist import DesignStrategist

__all__ = ["CoachAgentBase", "DesignCoach", "DesignEvaluator", "DesignStrategist", "agent_for"]
