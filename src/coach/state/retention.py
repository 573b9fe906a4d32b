"""What an erased session leaves in the same person's other sessions, and how it is
taken out (pure logic; the repository applies it in the erase's own transaction).

A later session copies an earlier one of the same person in a few known places:

* **tool results** in its memory steps: ``identify_user`` lists the session
  (``session_id ID: "challenge", ...``), ``select_session_to_load`` names its challenge
  (``Session "challenge" is ready``) and ``search_past_work`` quotes its insights and
  ideas (``- (insight) text``, ``- (idea) title: description``);
* the **query** of a search that found its work, in the tool call and in the search's
  delta (the words matched the erased work, so they are a piece of it);
* the **data zone**'s search results (each entry names its session) and the **template
  zone**'s board and brief rendered from them; a phase's **snapshot** of the zones keeps
  both as they were when the phase ended.

:class:`Redactor` rewrites each of them: in a tool result, a line that names an erased
session keeps the id and says ``[removed session]`` for the rest, and a quote of one
becomes ``[removed session]`` (the call and its result stay a pair, so the context stays
valid for the model); such a query becomes ``[removed session]``; the search results
lose the erased session's entries (a search left with none is cleared); and a brief that
showed them is rendered again from the board. What the person or the coach *said* in the
later session is that session's own conversation and is not changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .board import BriefRenderer, RenderInput
from .design import WorkItem, search_items, work_items
from .shapes import data_zone, view_zone
from .zones import JSON, Action, DeltaSpec, DeltaType, ResultMeta

__all__ = ["REMOVED", "Redactor", "RemovedSession", "ZonesRedacted"]

REMOVED: Final = "[removed session]"
"""What stands where an erased session was named or quoted."""


@dataclass(frozen=True)
class RemovedSession:
    """An erased session as other sessions may quote it: its id, its challenge and its
    work (the data zone now, and as it was at each phase end, as stored)."""

    session_id: str
    challenge: str | None = None
    work: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ZonesRedacted:
    """Zones with an erased session taken out, and the deltas that say so (one per
    changed zone, in the order to apply them)."""

    zones: JSON
    deltas: tuple[tuple[str, DeltaSpec], ...]


def _delta(delta_type: DeltaType, path: str, count: int, fields: list[str]) -> DeltaSpec:
    return DeltaSpec(
        trigger="system",
        source="system",
        actor_id="retention",
        delta_type=delta_type,
        path=path,
        action=Action(type="erase"),
        result=ResultMeta(count=count, fields=fields),
    )


class Redactor:
    """Finds and takes out what other sessions hold of ``removed``."""

    def __init__(self, removed: Sequence[RemovedSession]) -> None:
        self._ids = tuple(r.session_id for r in removed)
        self._work = tuple(data_zone(work) for r in removed for work in r.work)
        quotes = {f'"{r.challenge}"' for r in removed if r.challenge}
        quotes |= {f"({item['kind']}) {item['text']}" for item in self._items()}
        self._quotes = tuple(sorted(quotes, key=len, reverse=True))  # a longer one first

    def _items(self) -> Iterable[WorkItem]:
        for work in self._work:
            yield from work_items(work)

    # --- text ------------------------------------------------------------------------

    def quotes(self, text: str) -> bool:
        """Whether ``text`` names or quotes an erased session."""
        return any(f"session_id {sid}" in text for sid in self._ids) or any(
            quote in text for quote in self._quotes
        )

    def query_found(self, query: object) -> bool:
        """Whether a search for ``query`` finds an erased session's work."""
        return isinstance(query, str) and any(search_items(w, query) for w in self._work)

    def _line(self, line: str) -> str:
        for sid in self._ids:
            named = f"session_id {sid}"
            if named in line:  # keep what precedes it: indent, bullet, "↳ branch of ..."
                return f"{line[: line.index(named)]}{named}: {REMOVED}"
        for quote in self._quotes:
            line = line.replace(quote, REMOVED)
        return line

    def text(self, text: str) -> str:
        """``text`` with each line that names an erased session replaced after the id,
        and each quote of one replaced."""
        return "\n".join(self._line(line) for line in text.split("\n"))

    # --- memory steps --------------------------------------------------------------------

    def step(self, item: object) -> object | None:
        """The memory step rewritten without the erased sessions, or ``None`` when it
        holds nothing of them. Tool results and the query of a tool call are rewritten
        (ids and pairing kept); messages are the later session's own words."""
        # Here, not at the top: a decoded step has loaded the framework already, and the
        # commands that only list or erase sessions never import it (see bench/startup.py).
        from livekit.agents import llm

        if isinstance(item, llm.FunctionCallOutput) and self.quotes(item.output):
            return item.model_copy(update={"output": self.text(item.output)})
        if isinstance(item, llm.FunctionCall):
            try:
                arguments = json.loads(item.arguments or "{}")
            except ValueError:
                return None
            if isinstance(arguments, dict) and self.query_found(arguments.get("query")):
                arguments["query"] = REMOVED
                return item.model_copy(update={"arguments": json.dumps(arguments)})
        return None

    # --- the delta log -----------------------------------------------------------------------

    def action(self, action: Mapping[str, Any]) -> JSON | None:
        """A stored delta's ``action`` without a query that found an erased session's
        work, or ``None`` when it has none."""
        params = action.get("params") or {}
        if not self.query_found(params.get("query")):
            return None
        return {**action, "params": {**params, "query": REMOVED}}

    # --- zones ------------------------------------------------------------------------

    def zones(self, zones: Mapping[str, Any]) -> ZonesRedacted | None:
        """``{"data", "template", "view"}`` without the erased sessions' search results
        (and a query that found them), the brief rendered again if it showed them; or
        ``None`` when the zones hold nothing of them."""
        data: JSON = dict(zones.get("data") or {})
        template: JSON = dict(zones.get("template") or {})
        view: JSON = dict(zones.get("view") or {})
        search = data.get("search") or {}
        results = list(search.get("results") or [])
        kept = [r for r in results if r.get("session_id") not in self._ids]
        query = search.get("query")
        deltas: list[tuple[str, DeltaSpec]] = []
        if len(kept) < len(results) or self.query_found(query):
            if kept:
                query = REMOVED if self.query_found(query) else query
                data["search"] = {"query": query, "results": kept}
            else:
                data["search"] = {"query": None, "results": []}
            dropped = len(results) - len(kept)
            deltas.append(("data", _delta("remove", "data.search", dropped, ["results"])))
        if template and (deltas or self.quotes(str(template.get("markdown") or ""))):
            given = RenderInput(
                data=data_zone(data),
                view=view_zone(view),
                request=template.get("request"),
                deltas=(),
            )
            template = dict(BriefRenderer().render(given))
            deltas.append(("template", _delta("update", "template", 1, sorted(template))))
        if not deltas:
            return None
        return ZonesRedacted({"data": data, "template": template, "view": view}, tuple(deltas))
