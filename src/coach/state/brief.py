"""The session brief: what the active agent must know, rendered from stored state (pure).

Every agent's instructions carry it (SPEC §3a), so what was decided never depends on
what is left of the conversation: a handoff drops the other agent's tool calls, a resume
keeps a window of the newest turns, context limits drop the oldest — the brief restates
the challenge, every completed phase's decision, the work on the board, the evaluation
and what the person agreed coach may remember about them.

It has a token budget, counted as the context limits count (:func:`estimate_tokens`).
Over budget it degrades step by step: older phases shrink to their first sentence, the
insight and idea lists keep their newest entries, then every phase shrinks, then the
lists become counts. The challenge and the current phase are never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .history import estimate_tokens
from .shapes import DataZone, empty_data

DEFAULT_MAX_TOKENS = 1_500
"""The brief's default budget in estimated tokens (``COACH_BRIEF_MAX_TOKENS``)."""

MAX_SENTENCE = 240
"""Characters of a shortened phase decision, at the tightest level."""
MAX_CHALLENGE = 2_000
"""Characters of the challenge kept at the tightest level (the tools' own limit)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class PhaseDecision:
    """One completed phase: its manifest name and what was decided (its output)."""

    phase_id: str
    name: str
    decision: str


@dataclass(frozen=True)
class BriefInput:
    """Everything the brief is rendered from; all of it is stored state.

    Attributes:
        challenge: The design challenge, once captured.
        decisions: Completed phases in manifest order (the challenge and the evaluation
            phases are left out: they have sections of their own).
        current_phase: The name of the phase being worked on, if any.
        data: The data zone (insights, ideas, selected idea, evaluation).
        person: Lines about the person, each naming its fact id.
    """

    challenge: str | None
    decisions: tuple[PhaseDecision, ...] = ()
    current_phase: str | None = None
    data: DataZone = field(default_factory=empty_data)
    person: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Level:
    """How much of each part a rendering keeps."""

    full_phases: int
    """How many of the newest phase decisions are kept whole (the rest: first sentence)."""
    items: int | None = None
    """Newest insights and ideas listed (``None``: all; ``0``: counts only)."""
    sentence_chars: int | None = None
    """A cap on each shortened decision."""


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (all of it when it has one sentence)."""
    text = " ".join(text.split())
    return _SENTENCE_END.split(text, maxsplit=1)[0]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def render_brief(given: BriefInput, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> str:
    """The brief for ``given`` within ``max_tokens`` estimated tokens where it can be.

    Only the challenge (up to the tools' own 2,000 characters), the current phase and the
    names of completed phases are kept whatever the budget; everything else degrades.
    """
    phases = len(given.decisions)
    levels = [
        _Level(full_phases=phases),
        _Level(full_phases=1),
        *(_Level(full_phases=1, items=n) for n in (20, 10, 5)),
        _Level(full_phases=0, items=5),
        _Level(full_phases=0, items=0),
        _Level(full_phases=0, items=0, sentence_chars=MAX_SENTENCE),
        _Level(full_phases=0, items=0, sentence_chars=80),
    ]
    text = ""
    for level in levels:
        text = _render(given, level)
        if estimate_tokens(text) <= max_tokens:
            return text
    return text


def _render(given: BriefInput, level: _Level) -> str:
    data = given.data
    challenge = given.challenge or data["challenge"]
    if not challenge and not given.person and not given.decisions:
        return "Nothing is decided yet: this is the start of a new session."
    lines: list[str] = []
    if challenge:
        lines.append(f"Design challenge: {_clip(' '.join(challenge.split()), MAX_CHALLENGE)}")
    if given.decisions:
        lines.append("Decided in completed phases (oldest first):")
        whole_from = len(given.decisions) - level.full_phases
        for n, phase in enumerate(given.decisions):
            decision = " ".join(phase.decision.split())
            if n < whole_from:
                decision = first_sentence(decision)
                if level.sentence_chars is not None:
                    decision = _clip(decision, level.sentence_chars)
            lines.append(f"- {phase.name}: {decision}")
    if given.current_phase:
        lines.append(f"Current phase: {given.current_phase}.")
    lines += _items("Insights", [i["text"] for i in data["insights"]], level)
    ideas = data["ideas"]
    selected = data["selected_idea_id"]
    lines += _items(
        "Ideas",
        [
            f"({i['id']}) {i['title']}: {i['description']}"
            + (" [selected]" if i["id"] == selected else "")
            for i in ideas
        ],
        level,
    )
    chosen = next((i for i in ideas if i["id"] == selected), None)
    if chosen is not None:
        lines.append(f"Selected idea: {chosen['title']} ({chosen['id']}).")
    if (evaluation := data["evaluation"]) is not None:
        scores = (
            f"desirability {evaluation['desirability']}/5, "
            f"feasibility {evaluation['feasibility']}/5, viability {evaluation['viability']}/5"
        )
        lines.append(f"Evaluation: {scores}. {evaluation['summary']}".rstrip())
    if given.person:
        lines.append("About the person (they agreed that coach remembers this):")
        lines += [f"- {fact}" for fact in given.person]
    return "\n".join(lines)


def _items(title: str, texts: Sequence[str], level: _Level) -> list[str]:
    if not texts:
        return []
    if level.items == 0:
        return [f"{title}: {len(texts)} recorded (the board lists them)."]
    shown = list(texts) if level.items is None else list(texts)[-level.items :]
    earlier = len(texts) - len(shown)
    head = f"{title} ({len(texts)}" + (f", the newest {len(shown)} shown):" if earlier else "):")
    return [head, *(f"- {_clip(' '.join(t.split()), 300)}" for t in shown)]


def brief_size(given: BriefInput, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """The estimated tokens of the brief for ``given`` (what the bench reports)."""
    return estimate_tokens(render_brief(given, max_tokens=max_tokens))


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "BriefInput",
    "PhaseDecision",
    "brief_size",
    "first_sentence",
    "render_brief",
]
