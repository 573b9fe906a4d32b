"""The data zone's design work and the changes tools make to it (pure, no I/O).

Each change takes the current data zone and returns the new one plus a
:class:`Change` that says what happened (delta type, path, result count and fields).
Inputs are never mutated, so the caller can keep the old value for its delta. The
zone's shape is :class:`~coach.state.shapes.DataZone`.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field

from typing_extensions import TypedDict

from .shapes import DataZone, Evaluation, Idea, ItemKind, SearchResult
from .shapes import empty_data as empty_data  # the zone every change starts from
from .zones import DeltaType

MAX_ITEMS = 200
"""Insights or ideas a session may hold; more is a tool error, not unbounded growth."""


class DesignError(ValueError):
    """Raised when a change cannot apply (unknown id, limit reached); the message is for the LLM."""


@dataclass(frozen=True)
class Change:
    """What a change did to the data zone, for its delta."""

    delta_type: DeltaType
    path: str
    count: int
    fields: list[str] = field(default_factory=list)


def _copy(data: DataZone) -> DataZone:
    merged = empty_data()
    merged.update(copy.deepcopy(data))
    return merged


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def set_challenge(data: DataZone, challenge: str) -> tuple[DataZone, Change]:
    """Record the design challenge."""
    new = _copy(data)
    kind: DeltaType = "update" if new["challenge"] else "add"
    new["challenge"] = challenge
    return new, Change(kind, "data.challenge", 1, ["challenge"])


def add_insight(data: DataZone, text: str, *, phase_id: str | None) -> tuple[DataZone, Change]:
    """Add a user insight (from research or observation)."""
    new = _copy(data)
    if len(new["insights"]) >= MAX_ITEMS:
        raise DesignError(f"This session already holds {MAX_ITEMS} insights.")
    new["insights"].append({"id": _new_id("ins"), "text": text, "phase_id": phase_id})
    return new, Change("add", "data.insights", 1, ["id", "text", "phase_id"])


def add_idea(data: DataZone, title: str, description: str) -> tuple[DataZone, Change]:
    """Add an idea."""
    new = _copy(data)
    if len(new["ideas"]) >= MAX_ITEMS:
        raise DesignError(f"This session already holds {MAX_ITEMS} ideas.")
    new["ideas"].append({"id": _new_id("idea"), "title": title, "description": description})
    return new, Change("add", "data.ideas", 1, ["id", "title", "description"])


def _idea(data: DataZone, idea_id: str) -> Idea:
    for idea in data["ideas"]:
        if idea["id"] == idea_id:
            return idea.copy()
    known = ", ".join(f"{i['id']} ({i['title']})" for i in data["ideas"]) or "none"
    raise DesignError(f"No idea with id {idea_id}. Ideas: {known}.")


def remove_idea(data: DataZone, idea_id: str) -> tuple[DataZone, Change]:
    """Remove an idea (and unselect it if it was selected)."""
    new = _copy(data)
    _idea(new, idea_id)
    new["ideas"] = [i for i in new["ideas"] if i["id"] != idea_id]
    if new["selected_idea_id"] == idea_id:
        new["selected_idea_id"] = None
    return new, Change("remove", "data.ideas", 1, ["id"])


def select_idea(data: DataZone, idea_id: str) -> tuple[DataZone, Change]:
    """Select the idea the strategy builds on."""
    new = _copy(data)
    _idea(new, idea_id)
    kind: DeltaType = "update" if new["selected_idea_id"] else "add"
    new["selected_idea_id"] = idea_id
    return new, Change(kind, "data.selected_idea_id", 1, ["selected_idea_id"])


def set_evaluation(data: DataZone, evaluation: Evaluation) -> tuple[DataZone, Change]:
    """Record the evaluation of the strategy."""
    new = _copy(data)
    kind: DeltaType = "update" if new["evaluation"] else "add"
    new["evaluation"] = evaluation.copy()
    return new, Change(kind, "data.evaluation", 1, sorted(evaluation))


def search_results(
    data: DataZone, query: str, results: list[SearchResult]
) -> tuple[DataZone | None, Change]:
    """Store search results; with none, the data zone stays as it was (``None`` returned).

    An empty search must not wipe what the user is looking at: it records a delta with
    ``count: 0`` and leaves earlier results in place.
    """
    if not results:
        return None, Change("update", "data.search", 0, [])
    new = _copy(data)
    new["search"] = {"query": query, "results": results}
    return new, Change("update", "data.search", len(results), ["kind", "text", "session_id"])


class WorkItem(TypedDict):
    """A piece of design work as a search finds it."""

    kind: ItemKind
    text: str


def work_items(data: DataZone) -> list[WorkItem]:
    """The insights and ideas of one data zone as a search finds them: ``kind`` and
    ``text`` (an idea's text is ``"title: description"``)."""
    items: list[WorkItem] = [{"kind": "insight", "text": i["text"]} for i in data["insights"]]
    items += [{"kind": "idea", "text": f"{i['title']}: {i['description']}"} for i in data["ideas"]]
    return items


def search_items(data: DataZone, query: str) -> list[WorkItem]:
    """Insights and ideas of one data zone that match every word of ``query``."""
    words = [w for w in query.lower().split() if w]
    if not words:
        return []
    return [
        item for item in work_items(data) if all(word in item["text"].lower() for word in words)
    ]
