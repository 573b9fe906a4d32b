"""Zones and deltas as plain values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coach.state import Action, Delta, DeltaSpec, ResultMeta, Zone, zone_of


def test_spec_becomes_a_delta_at_a_step() -> None:
    spec = DeltaSpec(
        turn_id="t1",
        trigger="user_action",
        source="user",
        actor_id="frontend",
        delta_type="update",
        path="view.focus",
        action=Action(type="navigate", params={"item": "idea-3"}),
    )
    delta = spec.at_step(7)
    assert isinstance(delta, Delta) and delta.step == 7
    assert delta.model_dump(exclude={"step"}) == spec.model_dump()
    assert delta.at_step(8).step == 8
    assert delta.to_json()["action"] == {
        "type": "navigate",
        "tool": None,
        "params": {"item": "idea-3"},
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"trigger": "whenever"},
        {"source": "robot"},
        {"delta_type": "replace"},
        {"path": ""},
        {"action": {"type": "x", "params": {"f": object()}}},
        {"unknown": 1},
    ],
)
def test_invalid_specs_are_refused(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "trigger": "system",
        "source": "system",
        "delta_type": "add",
        "path": "data",
    }
    fields.update(bad)
    with pytest.raises(ValidationError):
        DeltaSpec.model_validate(fields)


def test_deltas_are_immutable() -> None:
    spec = DeltaSpec(trigger="system", source="system", delta_type="add", path="data")
    with pytest.raises(ValidationError):
        spec.path = "template"  # type: ignore[misc]


def test_empty_result_is_count_zero_not_unknown() -> None:
    assert ResultMeta(count=0).count == 0
    assert ResultMeta().count is None


def test_zone_of() -> None:
    assert zone_of("data.ideas") is Zone.DATA
    assert zone_of("template") is Zone.TEMPLATE
    assert zone_of("view.stack.0") is Zone.VIEW
    assert zone_of("elsewhere.x") is None
