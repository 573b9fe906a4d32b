"""What an erased session leaves in other sessions: found exactly, and nothing else."""

import json

from livekit.agents import llm

from coach.state import design
from coach.state.board import BriefRenderer, RenderInput
from coach.state.retention import REMOVED, Redactor, RemovedSession
from coach.state.shapes import DataZone, data_zone, view_zone

GONE = "a" * 32
KEPT = "b" * 32


def work(*insights: str) -> DataZone:
    data = design.empty_data()
    for text in insights:
        data, _ = design.add_insight(data, text, phase_id=None)
    return data


REDACTOR = Redactor(
    [RemovedSession(GONE, "Redesign the gym lockers", (work("Members distrust lockers"),))]
)


def test_a_listing_keeps_every_other_line_and_the_removed_ones_id() -> None:
    listing = "\n".join(
        [
            "Ada has 3 earlier session(s), most recent first:",
            f'- session_id {KEPT}: "Bike parking", started 2026-01-02, in progress',
            f'  - ↳ branch of {KEPT} from Define: session_id {GONE}: "Redesign the gym lockers"',
            f'- session_id {"c" * 32}: "Redesign the gym lockers", started 2026-01-01',
            "Offer to resume the most recent in-progress one.",
        ]
    )
    assert REDACTOR.text(listing).splitlines() == [
        "Ada has 3 earlier session(s), most recent first:",
        f'- session_id {KEPT}: "Bike parking", started 2026-01-02, in progress',
        f"  - ↳ branch of {KEPT} from Define: session_id {GONE}: {REMOVED}",
        f"- session_id {'c' * 32}: {REMOVED}, started 2026-01-01",  # the same words
        "Offer to resume the most recent in-progress one.",
    ]


def test_a_tool_result_is_rewritten_with_its_call_id_and_other_results_untouched() -> None:
    output = llm.FunctionCallOutput(
        call_id="c1",
        name="search_past_work",
        output="2 match(es):\n- (insight) Members distrust lockers\n- (idea) Lockers: for bikes",
        is_error=False,
    )
    rewritten = REDACTOR.step(output)
    assert isinstance(rewritten, llm.FunctionCallOutput)
    assert rewritten.call_id == "c1" and rewritten.id == output.id
    assert rewritten.output == f"2 match(es):\n- {REMOVED}\n- (idea) Lockers: for bikes"
    longer = Redactor([RemovedSession(GONE, None, (work("Lockers", "Lockers at night"),))])
    assert longer.text("- (insight) Lockers at night") == f"- {REMOVED}"
    untouched = output.model_copy(update={"output": "Idea recorded with id idea_1."})
    assert REDACTOR.step(untouched) is None


def test_a_query_that_found_the_erased_work_is_replaced_and_others_stay() -> None:
    found = llm.FunctionCall(
        call_id="c1", name="search_past_work", arguments=json.dumps({"query": "DISTRUST"})
    )
    rewritten = REDACTOR.step(found)
    assert isinstance(rewritten, llm.FunctionCall)
    assert json.loads(rewritten.arguments) == {"query": REMOVED}
    assert rewritten.call_id == "c1"
    for arguments in ('{"query": "zebra"}', '{"title": "Members distrust lockers"}', "{bad"):
        other = found.model_copy(update={"arguments": arguments})
        assert REDACTOR.step(other) is None
    said = llm.ChatMessage(role="user", content=["Members distrust lockers"])
    assert REDACTOR.step(said) is None  # the person's own words in that session

    action = {"type": "search", "tool": "search_past_work", "params": {"query": "lockers"}}
    assert REDACTOR.action(action) == {**action, "params": {"query": REMOVED}}
    assert REDACTOR.action({**action, "params": {"query": "zebra"}}) is None
    assert REDACTOR.action({"type": "tool", "tool": "add_idea", "params": {}}) is None


def zones(results: list[dict[str, str]], query: str) -> dict[str, object]:
    data = {**design.empty_data(), "search": {"query": query, "results": results}}
    view: dict[str, object] = {"focus": None}
    given = RenderInput(data_zone(data), view_zone(view), "what about lockers?", ())
    template = BriefRenderer().render(given)
    return {"data": data, "template": template, "view": view}


def test_search_results_lose_the_erased_sessions_entries_and_the_brief_is_rebuilt() -> None:
    mine = {"kind": "idea", "text": "Racks: covered", "session_id": KEPT}
    theirs = {"kind": "insight", "text": "Members distrust lockers", "session_id": GONE}
    changed = REDACTOR.zones(zones([theirs, mine], "racks"))
    assert changed is not None
    assert changed.zones["data"]["search"] == {"query": "racks", "results": [mine]}
    board = changed.zones["template"]["board"]["search"]
    assert board == {"query": "racks", "results": [mine]}
    assert "distrust" not in changed.zones["template"]["markdown"]
    assert changed.zones["template"]["request"] == "what about lockers?"
    assert [(zone, d.path, d.result.count) for zone, d in changed.deltas] == [
        ("data", "data.search", 1),
        ("template", "template", 1),
    ]
    # A query that found the erased work is replaced; a search left empty is cleared.
    changed = REDACTOR.zones(zones([theirs, mine], "lockers"))
    assert changed is not None and changed.zones["data"]["search"]["query"] == REMOVED
    changed = REDACTOR.zones(zones([theirs], "lockers"))
    assert changed is not None
    assert changed.zones["data"]["search"] == {"query": None, "results": []}
    assert REDACTOR.zones(zones([mine], "racks")) is None


def test_a_brief_that_still_quotes_the_erased_work_is_rebuilt_from_the_board() -> None:
    clean = zones([], "")
    written = {**clean["template"], "markdown": "# Brief\n- (insight) Members distrust lockers\n"}  # type: ignore[dict-item]
    changed = REDACTOR.zones({**clean, "template": written})
    assert changed is not None and [zone for zone, _ in changed.deltas] == ["template"]
    assert "distrust" not in changed.zones["template"]["markdown"]
    assert changed.zones["data"] == clean["data"]
    assert REDACTOR.zones({"data": {}, "template": {}, "view": {}}) is None
