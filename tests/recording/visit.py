"""One scripted visit (coach → strategist → evaluator) and what it should leave stored.

Shared by the durability tests and the SIGKILL child process: :data:`TURNS` is the
conversation, :class:`Watcher` sees what the ``AgentSession`` emitted — the same events
the recorder listens to — so tests can compare the database with what really happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from livekit.agents import AgentSession, llm
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.testing import Reply, ScriptedLLM, call, say

CHALLENGE = "Redesign onboarding for a budgeting app so new users finish setup."
GREETING = "Hi! Who are you?"

TURNS: list[tuple[str, list[Reply]]] = [
    ("I'm Ada", [call("identify_user", name="Ada"), say("Hi Ada! What shall we design?")]),
    (
        CHALLENGE,
        [
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here. Who struggles?"),
        ],
    ),
]
for _phase in ("empathize", "define", "ideate", "strategy"):
    TURNS.append((f"notes on {_phase}", [say(f"Tell me more about {_phase}.")]))
    TURNS.append(
        (
            f"done with {_phase}",
            [call("complete_phase", summary=f"{_phase} decided"), say(f"{_phase} recorded.")],
        )
    )
TURNS += [
    ("evaluate please", [call("transfer_to_evaluator"), say("Evaluator here.")]),
    (
        "score it",
        [
            call("record_evaluation", desirability=4, feasibility=4, viability=3, summary="Good."),
            say("Scores are in."),
        ],
    ),
    ("bye", [call("finish_session"), say("Goodbye!")]),
]
STRATEGIST_FROM = 2
"""Index of the first turn spoken with the strategist."""


def reply_of(turn: int) -> str:
    """The assistant text that ends turn ``turn``."""
    return TURNS[turn][1][-1].text


@dataclass
class Watcher:
    """Everything the session emitted that the recorder stores, in order."""

    userdata: UserData
    items: list[llm.ChatItem] = field(default_factory=list)
    messages: list[tuple[str, str, str | None]] = field(default_factory=list)
    """``(role, text, phase_id)`` of user and assistant messages with text."""

    def attach(self, session: AgentSession[Any]) -> Watcher:
        session.on("conversation_item_added", self._on_item)
        session.on("function_tools_executed", self._on_tools)
        return self

    def _on_item(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.ChatMessage | llm.AgentHandoff):
            self.items.append(item)
        if isinstance(item, llm.ChatMessage) and item.role in ("user", "assistant"):
            if item.text_content:
                self.messages.append((item.role, item.text_content, self.userdata.current_phase_id))

    def _on_tools(self, event: FunctionToolsExecutedEvent) -> None:
        for c, o in zip(event.function_calls, event.function_call_outputs, strict=True):
            self.items += [c, o]

    @property
    def last_reply(self) -> str | None:
        replies = [text for role, text, _ in self.messages if role == "assistant"]
        return replies[-1] if replies else None


async def start_visit(
    runtime: Runtime, identity: str = "ada", greeting: str = GREETING
) -> tuple[AgentSession[UserData], ScriptedLLM, Watcher]:
    """A started session (greeting spoken) with a watcher attached before anything ran."""
    model = ScriptedLLM([say(greeting)])
    userdata = runtime.new_userdata(identity=identity)
    session = runtime.new_session(userdata, llm=model)
    watcher = Watcher(userdata).attach(session)
    spoken = await session.start(runtime.first_agent(userdata), capture_run=True)
    await spoken
    return session, model, watcher


async def run_turn(session: AgentSession[UserData], model: ScriptedLLM, turn: int) -> None:
    """Speak turn ``turn`` of :data:`TURNS`."""
    text, replies = TURNS[turn]
    model.extend(replies)
    await session.run(user_input=text)
