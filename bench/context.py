"""What the model is sent: the session brief's size and the tools offered, per request.

A scripted first visit (name, challenge, the four strategist phases with insights and
ideas, the evaluation) runs through the real OpenAI plugin against the fake server; each
request is read back as the model reads it. Token counts are estimates, counted as
coach's context limits count them (about four characters a token), so the figures are
exact for a given prompt set and do not depend on the machine::

    python -m bench.context            # the visit's table and the brief at its budget

Columns: the instructions' tokens and the brief's share of them; the tools offered by
state next to all the tools the agent owns, with their JSON-schema tokens. Then the
renderer's (layer 3) tokens per data-changing turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livekit.agents import llm
from livekit.plugins import openai

from coach.agents import agent_for
from coach.agents.request import LATER
from coach.conversation.rendering import Usage
from coach.conversation.runtime import Runtime
from coach.prompts import AgentKind
from coach.settings import Settings
from coach.state.brief import BriefInput, PhaseDecision, render_brief
from coach.state.design import add_insight, empty_data
from coach.state.history import estimate_tokens
from coach.testing import FakeOpenAIServer, Reply, call, say

from .measure import key_settings

COMMAND = "python -m bench.context"
CHALLENGE = "Redesign onboarding for a budgeting app so that new users finish setting it up."
AGENTS: dict[str, AgentKind] = {
    "Design Coach": "coach",
    "Design Strategist": "strategist",
    "Design Evaluator": "evaluator",
}


@dataclass(frozen=True)
class Row:
    """One request as the model got it."""

    step: str
    agent: AgentKind
    instructions: int
    brief: int
    offered: int
    owned: int
    offered_tokens: int
    owned_tokens: int


def _turns() -> list[tuple[str, list[Reply]]]:
    summary = (
        "{phase}: the person agreed that {topic}. Two follow-ups were noted for later, "
        "and the open question is how to measure it."
    )
    turns: list[tuple[str, list[Reply]]] = [
        ("I'm Ada.", [call("identify_user", name="Ada"), say("Hi Ada, what shall we design?")]),
        (
            CHALLENGE,
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("I'm the strategist. Who struggles today?"),
            ],
        ),
    ]
    topics = {
        "Empathize": "new users fear linking their bank",
        "Define": "the problem is finishing setup without linking",
        "Ideate": "manual entry and a saved half-finished setup are the best ideas",
        "Strategy": "manual entry ships to five percent of sign-ups first",
    }
    for n, (phase, topic) in enumerate(topics.items()):
        work: list[Reply] = [
            call("add_insight", text=f"{phase} insight: {topic}."),
            call("add_idea", title=f"{phase} idea", description=f"Because {topic}."),
        ]
        turns.append((f"About {phase.lower()}: {topic}.", [*work, say("Noted. Agreed?")]))
        decided = summary.format(phase=phase, topic=topic)
        done: list[Reply] = [call("complete_phase", summary=decided)]
        if n == len(topics) - 1:
            done += [call("transfer_to_evaluator"), say("Evaluator here. Let's review.")]
        else:
            done.append(say("Recorded. Next phase."))
        turns.append(("Yes, agreed.", done))
    turns.append(
        (
            "Score it.",
            [
                call(
                    "record_evaluation",
                    desirability=4,
                    feasibility=4,
                    viability=3,
                    summary="People want it; it is cheap to build; revenue is unproven.",
                ),
                say("Four, four, three. Wrap up?"),
            ],
        )
    )
    return turns


def _schema_tokens(schemas: Sequence[dict[str, Any]]) -> int:
    return estimate_tokens(json.dumps(list(schemas))) if schemas else 0


async def visit_rows(directory: Path) -> tuple[list[Row], list[Usage]]:
    """Run the scripted visit and measure every request."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{directory / 'coach.db'}",
        **key_settings(f"sqlite+aiosqlite:///{directory / 'coach.db'}"),
        secret_key="bench-secret-0123456789abcdef",
        llm_base_url="http://127.0.0.1:9/v1",
    )
    runtime = await Runtime.open(settings)
    owned: dict[AgentKind, list[dict[str, Any]]] = {}
    rows: list[Row] = []
    usages: list[Usage] = []
    try:
        async with FakeOpenAIServer([say("Hello! Who am I talking to?")]) as server:
            model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
            userdata = runtime.new_userdata(model=model)  # the brief written by the model
            for kind in AGENTS.values():
                tools = agent_for(kind)(userdata).tools
                owned[kind] = llm.ToolContext(tools).parse_function_tools("openai")
            session = runtime.new_session(userdata, llm=model)
            await (await session.start(runtime.first_agent(userdata), capture_run=True))
            steps = ["greeting"]
            renderer = userdata.state.model_renderer
            assert renderer is not None
            for text, replies in _turns():
                server.extend(replies)
                before, renders = len(server.requests), len(server.render.requests)
                await session.run(user_input=text)
                await userdata.state.wait_for_render()
                steps += [f"{text[:28]}… ({n + 1})" for n in range(len(server.requests) - before)]
                if len(server.render.requests) > renders and renderer.last_usage is not None:
                    usages.append(renderer.last_usage)
            brief_marker = "Session brief ("
            for step, request in zip(steps, server.requests, strict=True):
                # The instructions, without what a greeting asks of this one reply.
                system = str(request["messages"][0]["content"]).split("\n\n" + LATER)[0]
                agent = next(k for name, k in AGENTS.items() if f"the {name}" in system)
                brief = system[system.index(brief_marker) :] if brief_marker in system else ""
                offered = request.get("tools") or []
                rows.append(
                    Row(
                        step=step,
                        agent=agent,
                        instructions=estimate_tokens(system),
                        brief=estimate_tokens(brief),
                        offered=len(offered),
                        owned=len(owned[agent]),
                        offered_tokens=_schema_tokens(offered),
                        owned_tokens=_schema_tokens(owned[agent]),
                    )
                )
            await session.aclose()
    finally:
        await runtime.aclose()
    return rows, usages


def large_brief(max_tokens: int) -> tuple[int, int]:
    """The brief of six long phases and 200 insights: (unbounded, within budget) tokens."""
    data = empty_data()
    for n in range(200):
        data, _ = add_insight(data, f"Insight {n}: people want a calmer first week.", phase_id="x")
    long = " ".join(f"Detail {n} of this phase was decided and noted." for n in range(80))
    given = BriefInput(
        CHALLENGE,
        tuple(PhaseDecision(f"p{n}", f"Phase {n}", f"Phase {n} decided. {long}") for n in range(6)),
        current_phase="Evaluation",
        data=data,
    )
    whole = estimate_tokens(render_brief(given, max_tokens=10**9))
    return whole, estimate_tokens(render_brief(given, max_tokens=max_tokens))


def report(rows: Sequence[Row], usages: Sequence[Usage], budget: int) -> str:
    lines = [
        "| request | agent | instructions (tokens) | of which brief | tools offered / owned "
        "| tool schemas offered / owned (tokens) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.step} | {r.agent} | {r.instructions} | {r.brief} | {r.offered} / {r.owned} "
            f"| {r.offered_tokens} / {r.owned_tokens} |"
        )
    offered = sum(r.offered_tokens for r in rows)
    owned = sum(r.owned_tokens for r in rows)
    briefs = sorted(r.brief for r in rows)
    whole, bounded = large_brief(budget)
    lines += [
        "",
        f"Over the visit's {len(rows)} requests: tool schemas sent {offered} tokens where "
        f"offering every tool would send {owned} ({offered / owned:.2f}×); the brief is "
        f"{briefs[0]}–{briefs[-1]} tokens (median {briefs[len(briefs) // 2]}).",
        f"A session of six long phases and 200 insights: the brief would be {whole} tokens "
        f"whole; within the {budget}-token budget it is {bounded}.",
        f"The renderer ran {len(usages)} times (once per data-changing turn): prompt "
        f"{_spread([u.prompt_tokens for u in usages])} tokens per render (its prompt, the "
        "view, the request, the changes and the previous brief); completion "
        f"{_spread([u.completion_tokens for u in usages])} tokens here, where the fake "
        "model appends a line per change (a real model's brief is what it writes).",
        "",
        f"Command: `{COMMAND} --budget {budget}`",
    ]
    return "\n".join(lines)


def _spread(values: Sequence[int]) -> str:
    if not values:
        return "–"
    ordered = sorted(values)
    return f"{ordered[0]}–{ordered[-1]} (median {ordered[len(ordered) // 2]})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1_500, help="the brief's token budget")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows, usages = asyncio.run(visit_rows(Path(tmp)))
    print(report(rows, usages, args.budget))


if __name__ == "__main__":
    main()
