"""The session's zoned state as the live agents see and change it.

Layer 1 (tools, handoffs, user navigation) changes one zone at a time through
:meth:`LiveState.write`: the zone changes in memory, its delta gets the next step, the
room hears about it at once (``StateSink``), and the recorder persists zone and delta
together in the background — ``expected_step`` makes a second writer of the same
session fail loudly instead of interleaving. Layer 3, the renderer, runs from
:meth:`LiveState.end_agent_turn` only after an agent turn that changed the data zone:
the deterministic :class:`~coach.state.board.BriefRenderer` at once, or, with a
:class:`~coach.rendering.ModelRenderer`, a model call in the background — one at a time
per session (a newer turn's render replaces a running one), its result dropped when the
data moved on meanwhile, the deterministic brief written when the model fails.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Protocol

from .. import metrics
from ..state.board import BriefRenderer, Renderer, RenderInput
from ..state.design import Change
from ..state.shapes import (
    DataZone,
    TemplateZone,
    ViewZone,
    ZoneValue,
    data_zone,
    empty_data,
    template_zone,
    view_zone,
)
from ..state.zones import JSON, Action, Delta, DeltaSpec, ResultMeta, Source, Trigger, Zone
from ..store import StateRecord, WriteZone
from .recorder import Recorder
from .rendering import ModelRenderer

logger = logging.getLogger("coach.state")


@dataclass(frozen=True)
class TurnContext:
    """What every tool call of one user turn shares: one turn id, its request, its actor."""

    turn_id: str
    request: str | None
    actor_id: str
    trigger: Trigger = "user_query"
    source: Source = "llm"


class StateSink(Protocol):
    """Where state changes are announced at once (the room; a list in tests)."""

    def publish(self, message: JSON) -> None:
        """Deliver one ``coach.state`` message (must not block)."""
        ...


def state_message(
    session_id: str, delta: Delta, zone: Zone | None, value: ZoneValue | None
) -> JSON:
    """The JSON a frontend receives on topic ``coach.state`` for one delta."""
    return {
        "type": "delta",
        "session_id": session_id,
        "step": delta.step,
        "zone": zone.value if zone is not None else None,
        "delta": delta.to_json(),
        "value": value,
    }


def snapshot_message(state: LiveState) -> JSON:
    """The JSON a frontend receives on topic ``coach.state``: all three zones at a step."""
    return {
        "type": "snapshot",
        "session_id": state.session_id,
        "step": state.step,
        "data": state.data,
        "template": state.template,
        "view": state.view,
    }


class LiveState:
    """Data, template and view of the current session, and the turn that is changing them."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        sink: StateSink | None = None,
        renderer: Renderer | None = None,
        model_renderer: ModelRenderer | None = None,
    ) -> None:
        self._recorder = recorder
        self.sink = sink
        self.renderer: Renderer = renderer or BriefRenderer()
        self.model_renderer = model_renderer
        self._render_task: asyncio.Task[None] | None = None
        self._pending: RenderInput | None = None
        """What the running model render was given (written as is if it cannot finish)."""
        self._data_step = 0
        """The step of the newest data-zone change: a render of an older one is stale."""
        self.session_id: str | None = None
        self.step = 0
        self.data: DataZone = empty_data()
        self.template: TemplateZone | None = None
        """``None`` until the first render."""
        self.view: ViewZone | None = None
        """``None`` until an agent takes the conversation."""
        self.turn = TurnContext(turn_id=_turn_id(), request=None, actor_id="system")
        self._last_user_item: str | None = None
        self._turn_data_deltas: list[Delta] = []

    # --- session and turn ----------------------------------------------------------------

    def attach(self, session_id: str, stored: StateRecord | None = None) -> None:
        """Follow a session: a new one (step 0) or a resumed one (its stored zones)."""
        self.session_id = session_id
        self.step = stored.step if stored is not None else 0
        self.data = data_zone(stored.data) if stored is not None else empty_data()
        self.template = template_zone(stored.template) if stored is not None else None
        if stored is not None and stored.view:
            self.view = view_zone(stored.view)
        self.publish_snapshot()

    def zones(self) -> JSON:
        """The three zones as a store holds them (``{}``: a zone not written yet)."""
        return {"data": self.data, "template": self.template or {}, "view": self.view or {}}

    def publish_snapshot(self) -> None:
        """Announce all three zones at the current step (the room's fresh read)."""
        if self.sink is not None:
            self.sink.publish(snapshot_message(self))

    def begin_turn(
        self, user_item_id: str | None, request: str | None, actor_id: str
    ) -> TurnContext:
        """Start a new turn when the user said something new; otherwise keep the turn."""
        if user_item_id is not None and user_item_id != self._last_user_item:
            self._last_user_item = user_item_id
            self._turn_data_deltas = []
            self.turn = TurnContext(turn_id=_turn_id(), request=request, actor_id=actor_id)
        elif self.turn.actor_id != actor_id:
            self.turn = TurnContext(self.turn.turn_id, self.turn.request, actor_id)
        return self.turn

    # --- zoned writes ------------------------------------------------------------------

    def write(
        self,
        zone: Zone | None,
        value: ZoneValue | None,
        change: Change,
        action: Action,
        *,
        trigger: Trigger | None = None,
        source: Source | None = None,
        actor_id: str | None = None,
        turn_id: str | None = None,
    ) -> Delta | None:
        """Change one zone (or none: a delta alone) with the delta that explains it.

        Returns the delta, or ``None`` while there is no stored session yet: then only
        the in-memory zone changes (the coach's view before a challenge is captured).
        """
        spec = DeltaSpec(
            turn_id=turn_id or self.turn.turn_id,
            trigger=trigger or self.turn.trigger,
            source=source or self.turn.source,
            actor_id=actor_id or self.turn.actor_id,
            delta_type=change.delta_type,
            path=change.path,
            action=action,
            result=ResultMeta(count=change.count, fields=change.fields),
        )
        if zone is not None and value is not None:
            setattr(self, zone.value, value)
        if self.session_id is None:
            return None
        self.step += 1
        delta = spec.at_step(self.step)
        if zone is Zone.DATA or (zone is None and change.path.startswith("data")):
            self._turn_data_deltas.append(delta)
            if zone is Zone.DATA:
                self._data_step = self.step
        if self.sink is not None:
            self.sink.publish(state_message(self.session_id, delta, zone, value))
        name = zone.value if zone is not None else None
        self._recorder.submit(WriteZone(self.session_id, name, value, spec, self.step - 1))
        return delta

    def data_changed_this_turn(self) -> bool:
        """Whether a tool changed the data zone in the current turn (and it is not rendered)."""
        return any(d.path.startswith("data") and d.result.count for d in self._turn_data_deltas)

    def end_agent_turn(self) -> bool:
        """Render the brief if this agent turn changed the data zone. Returns whether a
        render was made or started (with a model renderer it runs in the background)."""
        if self.session_id is None or not self.data_changed_this_turn():
            self._turn_data_deltas = []
            return False
        given = RenderInput(
            data=self.data,
            view=self.view,
            request=self.turn.request,
            deltas=tuple(d for d in self._turn_data_deltas if d.result.count),
        )
        self._turn_data_deltas = []
        if self.model_renderer is None:
            self._write_template(self.renderer.render(given), type(self.renderer).__name__)
            return True
        if self._render_task is not None and not self._render_task.done():
            self._render_task.cancel()  # its data is older: this render replaces it
        self._pending = given
        self._render_task = asyncio.get_running_loop().create_task(
            self._render(self.model_renderer, given, self.session_id, self._data_step),
            name="coach-render",
        )
        return True

    async def _render(
        self, model: ModelRenderer, given: RenderInput, session_id: str, data_step: int
    ) -> None:
        previous = self.template["markdown"] if self.template else None
        template = self.renderer.render(given)
        outcome = "model"
        try:
            async with asyncio.timeout(model.timeout):
                template = {**template, "markdown": await model.brief(given, previous)}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the model: fall back
            outcome = "fallback"
            logger.warning(
                "the renderer model gave no brief (%s); the deterministic brief is shown",
                " ".join(str(exc).split())[:200] or type(exc).__name__,
            )
        self._pending = None
        if self.session_id != session_id or self._data_step != data_step:
            metrics.RENDERS.labels("stale").inc()  # the data moved on: a newer render comes
            return
        metrics.RENDERS.labels(outcome).inc()
        self._write_template(template, TOOL_OF[outcome])

    def _write_template(self, template: TemplateZone, tool: str) -> None:
        self.write(
            Zone.TEMPLATE,
            template,
            Change("update", "template", 1, sorted(template)),
            Action(type="render", tool=tool),
            trigger="system",
            source="system",
            actor_id="renderer",
        )

    async def wait_for_render(self) -> None:
        """Wait until no render is running (tests, and a clean close)."""
        while self._render_task is not None and not self._render_task.done():
            await asyncio.wait({self._render_task})

    def close(self) -> None:
        """The conversation ends: a render still running is cancelled, and the
        deterministic brief of the data as it is now is written in its place."""
        task, given = self._render_task, self._pending
        self._render_task = self._pending = None
        if task is None or task.done() or given is None or self.session_id is None:
            return
        task.cancel()
        now = RenderInput(
            data=self.data, view=self.view, request=given.request, deltas=given.deltas
        )
        self._write_template(self.renderer.render(now), type(self.renderer).__name__)


TOOL_OF = {"model": "ModelRenderer", "fallback": "BriefRenderer"}
"""The delta's ``action.tool`` for each outcome of a model render."""


def _turn_id(prefix: str = "turn") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def action_id() -> str:
    """A fresh turn id for a user action outside the conversation (a click)."""
    return _turn_id("action")
