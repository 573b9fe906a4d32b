"""What each agent knows: every request the real OpenAI plugin sends, recorded by the fake
server and read as the model reads it (SPEC §3a).

The fake model never repeats a tool's output in what it says, as real models usually
don't: a decision that reaches a later request got there because coach put it there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from livekit.agents import AgentSession
from livekit.plugins import openai

from coach.agents import CoachAgentBase
from coach.agents.request import LATER
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.testing import FakeOpenAIServer, Reply, ScriptedLLM, call, say

from .helpers import start

CHALLENGE = "Redesign onboarding for a budgeting app so new users finish setup."
DECISIONS = {
    "empathize": "EMPATHIZE-DECISION: new users fear that linking a bank shares too much.",
    "define": "DEFINE-DECISION: how might we let people finish setup without linking?",
    "ideate": "IDEATE-DECISION: three ideas survive, manual entry first among them.",
    "strategy": "STRATEGY-DECISION: ship manual entry to 5% of sign-ups for two weeks.",
}
STRATEGIST_PHASES = list(DECISIONS)

Request = dict[str, Any]


def system_text(request: Request) -> str:
    """Every system/developer message of a request, as the model reads them."""
    return "\n\n".join(
        str(m.get("content") or "")
        for m in request["messages"]
        if m.get("role") in ("system", "developer")
    )


def instructions(request: Request) -> str:
    """The agent's instructions: the request's one system message, without what it says
    for this one reply (a greeting after a handoff or a resume, given last)."""
    first = request["messages"][0]
    assert first["role"] in ("system", "developer")
    return str(first["content"]).split("\n\n" + LATER, 1)[0]


def offered(request: Request) -> list[str]:
    """The names of the tools a request offers, sorted."""
    return sorted(t["function"]["name"] for t in request.get("tools") or [])


@dataclass
class Visit:
    """One conversation through the real plugin and the fake server."""

    runtime: Runtime
    server: FakeOpenAIServer
    session: AgentSession[UserData]
    turns: list[list[Request]] = field(default_factory=list)

    @classmethod
    async def open(
        cls,
        runtime: Runtime,
        server: FakeOpenAIServer,
        *,
        identity: str | None = "ada",
        room: str | None = None,
        agent: CoachAgentBase | None = None,
        userdata: UserData | None = None,
        greeting: str = "Hello!",
    ) -> Visit:
        userdata = userdata or runtime.new_userdata(identity=identity)
        userdata.room = userdata.room or room
        model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
        session = runtime.new_session(userdata, llm=model)
        visit = cls(runtime, server, session)
        before = len(server.requests)
        server.extend([say(greeting)])
        await (await session.start(agent or runtime.first_agent(userdata), capture_run=True))
        visit.turns.append(server.requests[before:])
        return visit

    @property
    def userdata(self) -> UserData:
        return self.session.userdata

    async def turn(self, text: str, replies: Sequence[Reply]) -> list[Request]:
        """One user turn; returns the requests the model got during it."""
        before = len(self.server.requests)
        self.server.extend(replies)
        await self.session.run(user_input=text)
        assert self.server.script.remaining == 0, self.server.errors
        sent = self.server.requests[before:]
        self.turns.append(sent)
        return sent

    async def close(self) -> None:
        await self.session.aclose()
        await asyncio.wait_for(self.runtime.recorder.flush(), 10)


async def strategist_visit(runtime: Runtime, server: FakeOpenAIServer, **kw: Any) -> Visit:
    """A first visit through every strategist phase, handed to the evaluator."""
    visit = await Visit.open(runtime, server, **kw)
    await visit.turn(
        f"I want to work on this: {CHALLENGE}",
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("I'm the strategist. Who struggles today?"),
        ],
    )
    for phase in STRATEGIST_PHASES:
        replies: list[Reply] = [call("complete_phase", summary=DECISIONS[phase])]
        if phase == STRATEGIST_PHASES[-1]:
            replies += [call("transfer_to_evaluator"), say("Evaluator here. Let's review.")]
        else:
            replies.append(say("Good. Next question?"))
        await visit.turn(f"My thoughts on {phase}, and yes, that's agreed.", replies)
    return visit


def holds_decisions(text: str, phases: Sequence[str]) -> bool:
    return CHALLENGE in text and all(DECISIONS[p] in text for p in phases)


async def test_a_full_visit_tells_every_agent_every_decision(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await strategist_visit(runtime, server)
        evaluator_first = visit.turns[-1][-1]
        # The evaluator scores a strategy it can see: all four decisions, in its
        # instructions (the strategist's tool calls are dropped at the handoff).
        assert holds_decisions(instructions(evaluator_first), STRATEGIST_PHASES)
        assert "complete_phase" not in str(evaluator_first["messages"])
        # Each strategist phase's first request holds the decisions made before it.
        for n, phase in enumerate(STRATEGIST_PHASES):
            first = visit.turns[1 + n][-1] if n else visit.turns[1][-1]
            assert holds_decisions(instructions(first), STRATEGIST_PHASES[:n])
            assert f"Current phase: {runtime.prompts.manifest.get(phase).name}." in (
                instructions(first)
            )
        await visit.turn(
            "Score it please.",
            [
                call(
                    "record_evaluation",
                    desirability=4,
                    feasibility=4,
                    viability=3,
                    summary="Desirable, feasible; viability depends on cost.",
                ),
                say("Four, four, three. Wrap up?"),
            ],
        )
        after = visit.turns[-1][-1]
        assert "Evaluation: desirability 4/5, feasibility 4/5, viability 3/5." in (
            instructions(after)
        )
        await visit.close()


async def test_the_stored_prompt_is_the_sent_prompt_for_every_phase(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await strategist_visit(runtime, server)
        session_id = visit.userdata.session_id
        await visit.close()
    assert session_id is not None
    sent = [instructions(r) for r in server.requests]
    outputs = await runtime.store.get_phase_outputs(session_id, include_prompts=True)
    assert [o.phase_id for o in outputs] == ["challenge", *STRATEGIST_PHASES, "evaluation"]
    for output in outputs:
        assert output.system_prompt is not None and output.user_input is not None
        # The instructions the model got when the phase began, exactly.
        assert output.system_prompt in sent, output.phase_id
        first = sent.index(output.system_prompt)
        if output.phase_id == "challenge":
            assert output.user_input == CHALLENGE  # the person's words, as captured
            continue
        # The phase input (the brief at the phase's start) is inside what was sent.
        assert output.user_input in output.system_prompt
        name = runtime.prompts.manifest.get(output.phase_id).name
        assert f"Current phase: {name}." in sent[first]


async def run_pairs(runtime: Runtime, session_id: str, pairs: int) -> None:
    """``pairs`` more user/assistant turns in Define, on a resumed session."""
    model = ScriptedLLM([say("Welcome back.")])
    session = await start(runtime, model, identity="ada")
    model.extend(
        [call("select_session_to_load", session_id=session_id), say("Say continue.")]
        + [call("load_selected_session"), say("Back in Define.")]
    )
    await session.run(user_input="Load my session")
    await session.run(user_input="continue")
    for n in range(pairs):
        model.extend([say(f"Reply {n}.")])
        await session.run(user_input=f"Define detail {n}.")
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 10)


@pytest.mark.parametrize("pairs", [0, 25, 50, 200])
async def test_a_resumed_agent_knows_every_decision_beyond_the_window(
    runtime: Runtime, pairs: int
) -> None:
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server)
        await visit.turn(
            "Onboarding, please.",
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("Who struggles?"),
            ],
        )
        await visit.turn(
            "People fear linking.",
            [call("complete_phase", summary=DECISIONS["empathize"]), say("On to Define.")],
        )
        session_id = visit.userdata.session_id
        assert session_id is not None
        await visit.close()
    await run_pairs(runtime, session_id, pairs)

    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server, greeting="Welcome back, Ada.")
        await visit.turn(
            "Let's continue my onboarding redesign.",
            [call("select_session_to_load", session_id=session_id), say("Say continue.")],
        )
        sent = await visit.turn(
            "continue", [call("load_selected_session"), say("Back to Define. What else?")]
        )
        await visit.close()
    resumed_first = sent[-1]
    assert holds_decisions(instructions(resumed_first), ["empathize"])
    assert "Current phase: Define." in instructions(resumed_first)


async def test_a_branch_and_a_reconnect_know_their_decisions(runtime: Runtime) -> None:
    async with FakeOpenAIServer() as server:
        visit = await strategist_visit(runtime, server, room="room-1")
        session_id = visit.userdata.session_id
        await visit.close()
    assert session_id is not None

    # A reconnect to the same room continues with the evaluator, who knows it all.
    async with FakeOpenAIServer() as server:
        userdata = runtime.new_userdata(identity="ada")
        agent = await runtime.room_agent(userdata, "room-1")
        visit = await Visit.open(runtime, server, agent=agent, userdata=userdata)
        assert holds_decisions(instructions(visit.turns[0][0]), STRATEGIST_PHASES)
        await visit.close()

    # A branch from Define knows the challenge, Empathize and Define — nothing after.
    async with FakeOpenAIServer() as server:
        visit = await Visit.open(runtime, server, greeting="Welcome back.")
        await visit.turn(
            "Pick my session.",
            [call("select_session_to_load", session_id=session_id), say("Say continue.")],
        )
        sent = await visit.turn(
            "Go back to Define and try another direction.",
            [call("branch_session", phase_id="define"), say("Branched. Let's ideate again.")],
        )
        await visit.close()
    first = instructions(sent[-1])
    assert holds_decisions(first, ["empathize", "define"])
    assert DECISIONS["ideate"] not in first and DECISIONS["strategy"] not in first
    assert "Current phase: Ideate." in first


async def test_no_request_holds_another_users_data(runtime: Runtime) -> None:
    bob_challenge = "BOB-SECRET: a calmer checkout for a hardware store."
    async with FakeOpenAIServer() as server:
        bob = await Visit.open(runtime, server, identity="bob")
        await bob.turn(
            "Checkout.",
            [
                call("capture_design_challenge", challenge=bob_challenge),
                call("transfer_to_strategist"),
                say("Who struggles?"),
            ],
        )
        await bob.turn(
            "Cashiers.",
            [call("complete_phase", summary="BOB-DECISION: cashiers."), say("Next.")],
        )
        await bob.close()
    async with FakeOpenAIServer() as server:
        ada = await strategist_visit(runtime, server)
        await ada.close()
        assert server.requests
        for request in server.requests:
            text = str(request)
            assert "BOB-SECRET" not in text and "BOB-DECISION" not in text
