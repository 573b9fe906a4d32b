"""The session brief: what it holds, and how it stays within its budget."""

from __future__ import annotations

from coach.state.brief import BriefInput, PhaseDecision, first_sentence, render_brief
from coach.state.design import add_idea, add_insight, empty_data, select_idea, set_evaluation
from coach.state.history import estimate_tokens

CHALLENGE = "Redesign onboarding for a budgeting app so new users finish setup."
NAMES = ["Empathize", "Define", "Ideate", "Strategy", "Prototype", "Test"]


def long_decision(name: str) -> str:
    first = f"{name} decided that the first sentence of {name} matters most."
    return first + " " + " ".join(f"{name} detail number {n} is also noted." for n in range(80))


def test_an_empty_session_says_so() -> None:
    assert render_brief(BriefInput(challenge=None)).startswith("Nothing is decided yet")


def test_a_small_session_holds_every_part_whole() -> None:
    data = empty_data()
    data, _ = add_insight(data, "People skip the bank-link step.", phase_id="empathize")
    data, _ = add_idea(data, "Lockers", "Save a half-finished setup for later.")
    idea_id = data["ideas"][0]["id"]
    data, _ = select_idea(data, idea_id)
    data, _ = set_evaluation(
        data, {"desirability": 4, "feasibility": 3, "viability": 5, "summary": "Try it."}
    )
    brief = render_brief(
        BriefInput(
            challenge=CHALLENGE,
            decisions=(
                PhaseDecision("empathize", "Empathize", "Users fear linking. They quit."),
                PhaseDecision("define", "Define", "How might we make linking optional?"),
            ),
            current_phase="Ideate",
            data=data,
            person=("(fact_1) role: leads a team of four",),
        )
    )
    for part in (
        f"Design challenge: {CHALLENGE}",
        "- Empathize: Users fear linking. They quit.",
        "- Define: How might we make linking optional?",
        "Current phase: Ideate.",
        "- People skip the bank-link step.",
        f"({idea_id}) Lockers: Save a half-finished setup for later. [selected]",
        f"Selected idea: Lockers ({idea_id}).",
        "Evaluation: desirability 4/5, feasibility 3/5, viability 5/5. Try it.",
        "- (fact_1) role: leads a team of four",
    ):
        assert part in brief


def test_six_long_phases_and_200_insights_stay_within_budget() -> None:
    data = empty_data()
    for n in range(200):
        data, _ = add_insight(data, f"Insight {n}: people want a calmer first week.", phase_id="x")
    decisions = tuple(PhaseDecision(n.lower(), n, long_decision(n)) for n in NAMES)
    given = BriefInput(CHALLENGE, decisions, current_phase="Evaluation", data=data)
    for budget in (1_500, 600, 300):
        brief = render_brief(given, max_tokens=budget)
        assert estimate_tokens(brief) <= budget
        assert f"Design challenge: {CHALLENGE}" in brief
        assert "Current phase: Evaluation." in brief
        for name in NAMES:  # every phase keeps at least its first sentence
            assert f"- {name}: {first_sentence(long_decision(name))}" in brief
    # the default budget keeps the newest decision whole and the newest insights
    brief = render_brief(given, max_tokens=1_500)
    assert long_decision("Test") in brief
    assert long_decision("Empathize") not in brief
    assert "Insight 199:" in brief and "Insights (200" in brief


def test_older_phases_shrink_before_the_newest() -> None:
    decisions = tuple(PhaseDecision(n.lower(), n, long_decision(n)) for n in NAMES[:3])
    given = BriefInput(CHALLENGE, decisions, current_phase="Strategy")
    whole = render_brief(given, max_tokens=100_000)
    assert all(long_decision(n) in whole for n in NAMES[:3])
    tighter = render_brief(given, max_tokens=estimate_tokens(whole) - 1)
    assert long_decision("Ideate") in tighter
    assert long_decision("Empathize") not in tighter
    assert first_sentence(long_decision("Empathize")) in tighter


def test_a_budget_too_small_for_anything_still_keeps_challenge_and_phase() -> None:
    decisions = tuple(PhaseDecision(n.lower(), n, long_decision(n)) for n in NAMES)
    brief = render_brief(BriefInput(CHALLENGE, decisions, current_phase="Test"), max_tokens=10)
    assert CHALLENGE in brief and "Current phase: Test." in brief
    assert all(f"- {n}:" in brief for n in NAMES)
