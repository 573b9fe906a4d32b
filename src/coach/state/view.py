"""The view zone: what the user is looking at (pure, no I/O).

``{"agent": "strategist", "phase_id": "ideate", "focus": {"kind": "idea", "id": "idea_1"},
"stack": [{"agent": "coach", "phase_id": "challenge"}, ...]}`` — the stack is where the
user has been, newest last, bounded (the shape: :class:`~coach.state.shapes.ViewZone`).
``None`` stands for a view no agent has taken yet.
"""

from __future__ import annotations

import copy

from .design import Change, DesignError
from .shapes import AgentKind, DataZone, ItemKind, StackEntry, ViewZone

MAX_STACK = 20


def new_view(agent: AgentKind, phase_id: str | None) -> ViewZone:
    """A view at ``agent`` / ``phase_id`` with nothing focused and nowhere been before."""
    return {"agent": agent, "phase_id": phase_id, "focus": None, "stack": []}


def navigate(
    view: ViewZone | None, agent: AgentKind, phase_id: str | None
) -> tuple[ViewZone, Change] | None:
    """Move the view to ``agent`` / ``phase_id``; ``None`` if it is already there."""
    if view is None:
        return new_view(agent, phase_id), Change("update", "view.agent", 1, ["agent", "phase_id"])
    if view["agent"] == agent and view["phase_id"] == phase_id:
        return None
    new = copy.deepcopy(view)
    been: list[StackEntry] = [*new["stack"], {"agent": new["agent"], "phase_id": new["phase_id"]}]
    new["stack"] = been[-MAX_STACK:]
    new["agent"], new["phase_id"], new["focus"] = agent, phase_id, None
    return new, Change("update", "view.agent", 1, ["agent", "phase_id"])


def focus(view: ViewZone, data: DataZone, item_id: str) -> tuple[ViewZone, Change]:
    """Focus an insight or idea of the data zone (a user action)."""
    kind: ItemKind
    if any(i["id"] == item_id for i in data["insights"]):
        kind = "insight"
    elif any(i["id"] == item_id for i in data["ideas"]):
        kind = "idea"
    else:
        raise DesignError(f"No insight or idea with id {item_id}.")
    new = copy.deepcopy(view)
    new["focus"] = {"kind": kind, "id": item_id}
    return new, Change("update", "view.focus", 1, ["kind", "id"])
