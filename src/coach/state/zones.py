"""The four zones of a session's state and the deltas that explain every change (SPEC §4.5).

Pure: no I/O. The repository stores these; agents, the renderer and the room read them.
What each zone holds is declared in :mod:`.shapes`.

A delta is the *cause* of a state change, recorded in the same transaction as the zone
it changes. Callers describe the change with a :class:`DeltaSpec` (everything except the
step); the repository assigns the step while it holds the session's state row, and hands
back the full :class:`Delta`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "DELTA_TYPES",
    "JSON",
    "SOURCES",
    "TRIGGERS",
    "WRITABLE_ZONES",
    "ZONES",
    "Action",
    "Delta",
    "DeltaSpec",
    "DeltaType",
    "ResultMeta",
    "Source",
    "Trigger",
    "Zone",
    "zone_of",
]

JSON = dict[str, Any]
"""A JSON object of no declared shape: a message on the room's stream, a zone as a store
holds it. (A zone's own shape is declared in :mod:`.shapes`.)"""


class Zone(StrEnum):
    """The zones of a session's state."""

    DATA = "data"
    """Design artifacts: challenge, insights, ideas, selected idea, evaluation."""
    TEMPLATE = "template"
    """The rendered design brief / board: a snapshot of what the renderer produced."""
    VIEW = "view"
    """What the user is looking at: active agent, phase, focus, navigation stack."""
    CONVERSATION = "conversation"
    """The LLM history; append-only and stored as conversation rows, not as a zone value."""


ZONES: tuple[Zone, ...] = tuple(Zone)
WRITABLE_ZONES: tuple[Zone, ...] = (Zone.DATA, Zone.TEMPLATE, Zone.VIEW)
"""The zones whose value is replaced by a zoned write (each with its delta)."""

Trigger = Literal["user_query", "user_action", "system"]
Source = Literal["llm", "user", "system"]
DeltaType = Literal["add", "update", "remove"]
TRIGGERS: tuple[Trigger, ...] = ("user_query", "user_action", "system")
SOURCES: tuple[Source, ...] = ("llm", "user", "system")
DELTA_TYPES: tuple[DeltaType, ...] = ("add", "update", "remove")


def zone_of(path: str) -> Zone | None:
    """Return the zone a delta path points into (``"data.ideas"`` -> ``Zone.DATA``).

    Args:
        path: A dotted path whose first segment names a zone.

    Returns:
        The zone, or ``None`` when the first segment is not a zone name.
    """
    head = path.split(".", 1)[0]
    try:
        return Zone(head)
    except ValueError:
        return None


class _Frozen(BaseModel):
    # Serialized, every field is present: the generated TypeScript types say so.
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )


class Action(_Frozen):
    """What was done: ``type`` (e.g. ``search``, ``navigate``), the tool and its parameters."""

    type: str = ""
    tool: str | None = None
    params: dict[str, JsonValue] = Field(default_factory=dict)


class ResultMeta(_Frozen):
    """What came of it: how many items (``0`` for an empty search) and which fields."""

    count: int | None = None
    fields: list[str] = Field(default_factory=list)


class DeltaSpec(_Frozen):
    """A delta as a caller describes it, before the repository assigns its step.

    Example:
        >>> DeltaSpec(turn_id="t1", trigger="user_query", source="llm", actor_id="strategist",
        ...           delta_type="add", path="data.ideas",
        ...           action=Action(type="tool", tool="add_idea", params={"title": "x"}),
        ...           result=ResultMeta(count=1, fields=["title"]))  # doctest: +ELLIPSIS
        DeltaSpec(...)
    """

    turn_id: str | None = None
    trigger: Trigger
    source: Source
    actor_id: str | None = None
    delta_type: DeltaType
    path: str = Field(min_length=1, max_length=255)
    action: Action = Field(default_factory=Action)
    result: ResultMeta = Field(default_factory=ResultMeta)

    def at_step(self, step: int) -> Delta:
        """Return the :class:`Delta` this spec becomes at ``step``."""
        fields = self.model_dump()
        fields["step"] = step
        return Delta.model_validate(fields)


class Delta(DeltaSpec):
    """A recorded delta: the spec plus the state step it produced (strictly increasing)."""

    step: int = Field(ge=1)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (what is pushed on the ``coach.state`` text stream)."""
        return self.model_dump(mode="json")
