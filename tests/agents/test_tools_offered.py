"""Tools offered by state: at each step of a visit, exactly the tools that can work now are
offered to the model (SPEC §3a), read from the requests the real plugin sends."""

from __future__ import annotations

from coach.conversation.runtime import Runtime
from coach.testing import FakeOpenAIServer, call, say

from .test_context_contract import CHALLENGE, DECISIONS, Visit, offered, strategist_visit

COACH_KNOWN = ["capture_design_challenge", "remember_about_person"]
"""What the coach offers whoever it knows, with or without sessions."""


def tools(*names: str) -> list[str]:
    return sorted(names)


async def test_a_new_user_is_offered_one_step_at_a_time(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server, identity=None)
        assert offered(visit.turns[0][0]) == ["identify_user"]
        sent = await visit.turn(
            "I'm Ada.", [call("identify_user", name="Ada"), say("Hi Ada! What shall we design?")]
        )
        assert offered(sent[0]) == ["identify_user"]
        assert offered(sent[1]) == COACH_KNOWN  # no sessions: nothing to load or branch
        sent = await visit.turn(
            "Onboarding.",
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("Strategist here. Who struggles?"),
            ],
        )
        assert offered(sent[1]) == tools("branch_session", *COACH_KNOWN, "transfer_to_strategist")
        # The strategist in its first phase: no ideas to select yet, no other sessions.
        assert offered(sent[2]) == tools(
            "add_idea", "add_insight", "branch_session", "complete_phase", "remember_about_person"
        )
        sent = await visit.turn(
            "An idea: lockers.",
            [call("add_idea", title="Lockers", description="Save setup."), say("Noted.")],
        )
        assert offered(sent[1]) == tools(
            "add_idea",
            "add_insight",
            "branch_session",
            "complete_phase",
            "remember_about_person",
            "remove_idea",
            "select_idea",
        )
        await visit.close()


async def test_the_last_phase_done_offers_the_evaluator(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await strategist_visit(runtime, server)
        last = visit.turns[-1]
        assert offered(last[1]) == tools(
            "add_idea",
            "add_insight",
            "branch_session",
            "remember_about_person",
            "transfer_to_evaluator",
        )
        assert offered(last[2]) == ["record_evaluation"]
        sent = await visit.turn(
            "Score it.",
            [
                call(
                    "record_evaluation",
                    desirability=4,
                    feasibility=4,
                    viability=4,
                    summary="Good on all three.",
                ),
                say("Fours. Wrap up?"),
            ],
        )
        assert offered(sent[1]) == ["finish_session", "record_evaluation"]
        await visit.close()


async def test_a_returning_user_is_offered_their_sessions(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        first = await Visit.open(runtime, server)
        await first.turn(
            "Onboarding.",
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("Who struggles?"),
            ],
        )
        await first.turn(
            "Agreed.", [call("complete_phase", summary=DECISIONS["empathize"]), say("Next.")]
        )
        session_id = first.userdata.session_id
        await first.close()
        assert session_id is not None

        visit = await Visit.open(runtime, server, greeting="Welcome back, Ada.")
        assert offered(visit.turns[0][0]) == tools(*COACH_KNOWN, "select_session_to_load")
        sent = await visit.turn(
            "That one.",
            [call("select_session_to_load", session_id=session_id), say("Say continue.")],
        )
        assert offered(sent[1]) == tools(
            "branch_session", *COACH_KNOWN, "load_selected_session", "select_session_to_load"
        )
        sent = await visit.turn(
            "Actually, a new one.",
            [
                call("capture_design_challenge", challenge="A calmer checkout."),
                call("transfer_to_strategist"),
                say("Who struggles at checkout?"),
            ],
        )
        # A second session: the strategist may now search the first one's work.
        assert "search_past_work" in offered(sent[2])
        await visit.close()
