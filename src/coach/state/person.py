"""The person: lasting facts they agreed coach may remember (pure, no I/O; SPEC §4.6).

Stored per user, like a zone: each change is a new value plus a delta that explains it.
The value (:class:`~coach.state.shapes.Person`) looks like::

    {"facts": [{"id": "fact_1a2b3c4d", "topic": "role", "text": "leads a team of four"}]}

Every change returns the new value and a :class:`~coach.state.design.Change`; inputs are
never mutated.
"""

from __future__ import annotations

import copy
import uuid
from typing import Final

from .design import Change
from .shapes import Person
from .shapes import empty_person as empty_person  # the record every change starts from

TOPICS: Final = ("role", "organisation", "designs", "preference", "other")
"""What a fact may be about: their role, their organisation, what they design, how they
like to work, or something else lasting."""
MAX_FACTS: Final = 50
MAX_TEXT: Final = 300


class PersonError(ValueError):
    """Raised when a change cannot apply (unknown fact, limit); the message is for the LLM."""


def _copy(person: Person) -> Person:
    new = empty_person()
    new.update(copy.deepcopy(person))
    return new


def _text(text: str) -> str:
    text = " ".join(text.split())
    if not text or len(text) > MAX_TEXT:
        raise PersonError(f"A fact must be 1 to {MAX_TEXT} characters.")
    return text


def remember(person: Person, topic: str, text: str) -> tuple[Person, Change]:
    """Add one fact the person agreed to share."""
    topic = topic.strip().lower()
    if topic not in TOPICS:
        raise PersonError(f"The topic must be one of: {', '.join(TOPICS)}.")
    text = _text(text)
    new = _copy(person)
    if any(f["topic"] == topic and f["text"].lower() == text.lower() for f in new["facts"]):
        raise PersonError("That is already remembered.")
    if len(new["facts"]) >= MAX_FACTS:
        raise PersonError(f"{MAX_FACTS} facts are remembered already: forget one first.")
    new["facts"].append({"id": f"fact_{uuid.uuid4().hex[:8]}", "topic": topic, "text": text})
    return new, Change("add", "person.facts", 1, ["id", "topic", "text"])


def _index(person: Person, fact_id: str) -> int:
    for n, fact in enumerate(person["facts"]):
        if fact["id"] == fact_id:
            return n
    known = ", ".join(f["id"] for f in person["facts"]) or "none"
    raise PersonError(f"No fact with id {fact_id[:40]}. Facts: {known}.")


def correct(person: Person, fact_id: str, text: str) -> tuple[Person, Change]:
    """Replace what one fact says."""
    new = _copy(person)
    new["facts"][_index(new, fact_id)]["text"] = _text(text)
    return new, Change("update", "person.facts", 1, ["text"])


def forget(person: Person, fact_id: str) -> tuple[Person, Change]:
    """Forget one fact."""
    new = _copy(person)
    del new["facts"][_index(new, fact_id)]
    return new, Change("remove", "person.facts", 1, ["id"])


def forget_all(person: Person) -> tuple[Person, Change]:
    """Forget everything (a count of 0 when there was nothing)."""
    count = len(person["facts"])
    return empty_person(), Change("remove", "person.facts", count, ["id"])


def person_lines(person: Person) -> list[str]:
    """One line per fact, naming its id (so a fact can be corrected or forgotten)."""
    return [f"({f['id']}) {f['topic']}: {f['text']}" for f in person["facts"]]
