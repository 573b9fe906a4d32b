"""The view zone: what the user is looking at (pure, no I/O).

``{"agent": "strategist", "phase_id": "ideate", "focus": {"kind": "idea", "id": "idea_1"},
"stack": [{"agent": "coach", "phase_id": "challenge"}, ...]}`` — the stack is where the
user has been, newest last, bounded.
"""

from __future__ import annotations

import copy

from .design import Change, DesignError
from .zones import JSON

MAX_STACK = 20


def navigate(view: JSON, agent: str, phase_id: str | None) -> tuple[JSON, Change] | None:
    """Move the view to ``agent`` / ``phase_id``; ``None`` if it is already there."""
    if view.get("agent") == agent and view.get("phase_id") == phase_id:
        return None
    new = copy.deepcopy(view)
    if new.get("agent") is not None:
        new["stack"] = [
            *new.get("stack", []),
            {"agent": new["agent"], "phase_id": new.get("phase_id")},
        ]
        new["stack"] = new["stack"][-MAX_STACK:]
    new.update(agent=agent, phase_id=phase_id, focus=None)
    new.setdefault("stack", [])
    return new, Change("update", "view.agent", 1, ["agent", "phase_id"])


def focus(view: JSON, data: JSON, item_id: str) -> tuple[JSON, Change]:
    """Focus an insight or idea of the data zone (a user action)."""
    for kind, key in (("insight", "insights"), ("idea", "ideas")):
        if any(item.get("id") == item_id for item in data.get(key, [])):
            new = copy.deepcopy(view)
            new["focus"] = {"kind": kind, "id": item_id}
            return new, Change("update", "view.focus", 1, ["kind", "id"])
    raise DesignError(f"No insight or idea with id {item_id}.")
