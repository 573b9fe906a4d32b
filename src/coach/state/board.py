"""Layer 3, the renderer: turns the data zone into the template zone (pure, no I/O).

The template is a design brief a person can read (``markdown``) and a structured
``board`` a frontend can draw. The renderer is given what SPEC §4.5 says it gets — the
current view, the user's request and the turn's data deltas — and uses the view to mark
the focused item and the deltas to mark what just changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .shapes import Board, BoardIdea, BoardInsight, DataZone, TemplateZone, ViewZone
from .zones import Delta


@dataclass(frozen=True)
class RenderInput:
    """Everything a render may use (``view`` ``None``: no agent has taken the session yet)."""

    data: DataZone
    view: ViewZone | None
    request: str | None
    deltas: tuple[Delta, ...]


class Renderer(Protocol):
    """Layer 3: builds the template zone from a :class:`RenderInput`."""

    def render(self, given: RenderInput) -> TemplateZone:
        """Return the new template zone."""
        ...


class BriefRenderer:
    """The default renderer: a markdown design brief plus a board of cards."""

    def render(self, given: RenderInput) -> TemplateZone:
        data, view = given.data, given.view
        focus = view["focus"]["id"] if view is not None and view["focus"] else None
        changed = sorted({d.path for d in given.deltas})
        selected = data["selected_idea_id"]
        insights: list[BoardInsight] = [
            {"id": i["id"], "text": i["text"], "focused": i["id"] == focus}
            for i in data["insights"]
        ]
        ideas: list[BoardIdea] = [
            {
                "id": i["id"],
                "title": i["title"],
                "description": i["description"],
                "selected": i["id"] == selected,
                "focused": i["id"] == focus,
            }
            for i in data["ideas"]
        ]
        search = data["search"]
        board: Board = {
            "challenge": data["challenge"],
            "insights": insights,
            "ideas": ideas,
            "evaluation": data["evaluation"],
            "search": {"query": search["query"], "results": search["results"]},
            "changed": changed,
        }
        return {"markdown": _markdown(board), "board": board, "request": given.request}


def _markdown(board: Board) -> str:
    lines = ["# Design brief", "", f"**Challenge:** {board['challenge'] or '—'}", ""]
    if board["insights"]:
        lines += ["## Insights", *[f"- {i['text']}" for i in board["insights"]], ""]
    if board["ideas"]:
        lines.append("## Ideas")
        for idea in board["ideas"]:
            mark = " ✓" if idea["selected"] else ""
            lines.append(f"- **{idea['title']}**{mark} — {idea['description']}")
        lines.append("")
    if ev := board["evaluation"]:
        scores = (
            f"desirability {ev['desirability']}/5, feasibility {ev['feasibility']}/5, "
            f"viability {ev['viability']}/5"
        )
        lines += ["## Evaluation", scores, "", ev["summary"], ""]
    if board["search"]["results"]:
        lines += [f"## Earlier work matching “{board['search']['query']}”"]
        lines += [f"- ({r['kind']}) {r['text']}" for r in board["search"]["results"]]
    return "\n".join(lines).rstrip() + "\n"
