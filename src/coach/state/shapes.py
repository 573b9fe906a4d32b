"""The shapes of a session's zones and of the person record, declared once (SPEC §4.5, §4.6).

Zones are JSON: stored as they are, pushed to the room as they are, and copied by every
change. So each shape is a ``TypedDict``: a plain ``dict`` at run time (nothing to
convert, nothing to pay on the voice turn, copies behave as dicts do), and a type mypy
checks wherever a tool, the live state or the renderer reads or writes one. Pydantic
validates the same classes and turns them into JSON Schema, so the room's contract
(:mod:`coach.surfaces.room`), the RPC responses and ``web/src/rpc.ts`` are generated from
these declarations, not from copies of them.

A store gives a zone back as the JSON object it was given — ``{}`` before the first write
of it. :func:`data_zone`, :func:`template_zone`, :func:`view_zone` and :func:`person_of`
are the one place where such a stored object becomes a typed value again. They trust
its shape: a zone is written only through these types, and stored sealed (a row changed
outside coach fails to open), so it comes back as it was written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias, cast

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

__all__ = [
    "AgentKind",
    "Board",
    "BoardIdea",
    "BoardInsight",
    "DataZone",
    "Evaluation",
    "Fact",
    "Focus",
    "Idea",
    "Insight",
    "ItemKind",
    "Person",
    "Score",
    "Search",
    "SearchResult",
    "StackEntry",
    "TemplateZone",
    "ViewZone",
    "ZoneValue",
    "data_zone",
    "empty_data",
    "empty_person",
    "person_of",
    "template_zone",
    "view_zone",
]

AgentKind = Literal["coach", "strategist", "evaluator"]
"""The three agents (and the prompt files they are rendered from)."""

ItemKind = Literal["insight", "idea"]
"""What a piece of design work is."""

Score = Annotated[int, Field(ge=1, le=5)]
"""An evaluation score: 1 (poor) to 5 (excellent)."""


# --- the data zone: the design work, written by the agents' tools --------------------------


class Insight(TypedDict):
    """An observation, need or pain point of the users, from the phase it was found in."""

    id: str
    text: str
    phase_id: str | None


class Idea(TypedDict):
    """An idea for the challenge."""

    id: str
    title: str
    description: str


class Evaluation(TypedDict):
    """The strategy's scores and the reasoning behind them."""

    desirability: Score
    feasibility: Score
    viability: Score
    summary: str


class SearchResult(TypedDict):
    """A piece of earlier work a search found (an idea's text is ``title: description``)."""

    kind: ItemKind
    text: str
    session_id: Annotated[str, Field(description="The session it was found in.")]


class Search(TypedDict):
    """The last search of earlier work that found something (``query`` null: none yet)."""

    query: str | None
    results: list[SearchResult]


class DataZone(TypedDict):
    """The design work: what the agents' tools write."""

    challenge: str | None
    insights: list[Insight]
    ideas: list[Idea]
    selected_idea_id: str | None
    evaluation: Evaluation | None
    search: Search


# --- the template zone: what the renderer made of the data zone ----------------------------


class BoardInsight(TypedDict):
    """An insight as the board shows it."""

    id: str
    text: str
    focused: bool


class BoardIdea(TypedDict):
    """An idea as the board shows it."""

    id: str
    title: str
    description: str
    selected: bool
    focused: bool


class Board(TypedDict):
    """The cards a frontend draws beside the brief."""

    challenge: str | None
    insights: list[BoardInsight]
    ideas: list[BoardIdea]
    evaluation: Evaluation | None
    search: Search
    changed: Annotated[list[str], Field(description="The data paths this render reflects.")]


class TemplateZone(TypedDict):
    """The rendered brief, written after a turn that changed the data zone."""

    markdown: str
    request: Annotated[str | None, Field(description="The user request of that turn.")]
    board: Board


# --- the view zone: where the user is ----------------------------------------------------


class Focus(TypedDict):
    """The insight or idea the user looks at."""

    kind: ItemKind
    id: str


class StackEntry(TypedDict):
    """Where the user was before: an agent and its phase."""

    agent: str
    phase_id: str | None


class ViewZone(TypedDict):
    """Where the user is: the agent, the phase, the focused item, where they have been."""

    agent: AgentKind
    phase_id: str | None
    focus: Focus | None
    stack: list[StackEntry]


ZoneValue: TypeAlias = DataZone | TemplateZone | ViewZone
"""The value of a writable zone."""


# --- the person: what they agreed coach may remember ---------------------------------------


class Fact(TypedDict):
    """One thing the person agreed coach may remember."""

    id: str
    topic: str
    text: str


class Person(TypedDict):
    """What the person agreed coach may remember, fact by fact."""

    facts: list[Fact]


# --- empty values, and stored objects made typed again --------------------------------------


def empty_data() -> DataZone:
    """A data zone with nothing in it yet."""
    return {
        "challenge": None,
        "insights": [],
        "ideas": [],
        "selected_idea_id": None,
        "evaluation": None,
        "search": {"query": None, "results": []},
    }


def empty_person() -> Person:
    """Nobody remembered anything yet."""
    return {"facts": []}


def data_zone(stored: Mapping[str, Any]) -> DataZone:
    """A stored data zone (``{}`` before its first write) as a new data zone."""
    return cast(DataZone, {**empty_data(), **stored})


def template_zone(stored: Mapping[str, Any]) -> TemplateZone | None:
    """A stored template zone as a new one; ``None`` when nothing was rendered yet."""
    return cast(TemplateZone, dict(stored)) if stored else None


def view_zone(stored: Mapping[str, Any]) -> ViewZone | None:
    """A stored view zone as a new one; ``None`` when no agent has taken the session yet."""
    return cast(ViewZone, dict(stored)) if stored else None


def person_of(stored: Mapping[str, Any]) -> Person:
    """A stored person record (``{}`` before anything was remembered) as a person."""
    return cast(Person, stored) if stored else empty_person()
