"""Stored zones made typed again: what a store gives back before and after a write."""

from __future__ import annotations

import json

from coach.state import design
from coach.state.shapes import (
    data_zone,
    empty_data,
    empty_person,
    person_of,
    template_zone,
    view_zone,
)
from coach.state.view import navigate


def test_zones_never_written_come_back_empty() -> None:
    # A new state row holds {} for each zone, and a new person row {} too.
    assert data_zone({}) == empty_data()
    assert template_zone({}) is None and view_zone({}) is None
    assert person_of({}) == empty_person()


def test_a_written_zone_comes_back_as_it_was_stored_and_is_a_copy() -> None:
    data, _ = design.add_insight(empty_data(), "People skip setup", phase_id="empathize")
    stored = json.loads(json.dumps(data))
    loaded = data_zone(stored)
    assert json.dumps(loaded) == json.dumps(data)  # same keys, same order
    loaded["challenge"] = "changed"
    assert stored["challenge"] is None
    moved = navigate(None, "strategist", "ideate")
    assert moved is not None
    view = view_zone(json.loads(json.dumps(moved[0])))
    assert view is not None and view == moved[0] and list(view) == list(moved[0])


def test_a_data_zone_missing_a_key_gets_its_empty_value() -> None:
    loaded = data_zone({"challenge": "Lockers", "ideas": []})
    assert loaded == {**empty_data(), "challenge": "Lockers"}
    assert list(loaded) == list(empty_data())
