"""Ctrl-C and ``/steps`` in the chat: Ctrl-C while a reply comes cuts that reply short (it
is stored as interrupted, with only the words shown) and the chat goes on; Ctrl-C at the
prompt ends it; ``/steps`` hides and shows tool calls and handoffs."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from livekit.agents import llm

from coach.persistence import open_repository
from coach.surfaces.chat import EXIT_OK, run_chat
from coach.testing import ScriptedLLM, load_script
from coach.testing.paced_llm import PacedLLM, tool_call
from tests.support import keys_of

from .test_chat_cli import DEMO, SECRET
from .test_chat_streaming import Terminal, settings

CHALLENGE = tool_call(
    "capture_design_challenge", '{"challenge": "Redesign the onboarding of a budgeting app."}'
)
"""The first request's answer in every test: the session that stores the chat starts."""


class Keyboard:
    """The chat's input as a person types it: a line at a time, when the test says so."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        self.stream = open(read, encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._open = True

    def type(self, line: str) -> None:
        os.write(self._write, f"{line}\n".encode())

    def ctrl_c(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    def ctrl_d(self) -> None:
        if self._open:
            self._open = False
            os.close(self._write)

    def close(self) -> None:
        # End of input first: the chat's reader thread may still be reading the stream.
        self.ctrl_d()
        self.stream.close()


Person = Callable[[Keyboard, Terminal], Awaitable[None]]
"""What the person at the terminal does: types, presses keys, reads what is shown."""


async def chat(database_url: str, model: llm.LLM[Any], person: Person) -> tuple[int, Terminal]:
    """Ada's chat with ``model`` while ``person`` uses the terminal: the exit code, and
    what the terminal showed."""
    out, keys = Terminal(tty=False), Keyboard()
    try:
        async with asyncio.timeout(120):  # a hang guard only
            code, _ = await asyncio.gather(
                run_chat(
                    settings(database_url),
                    user="ada",
                    chat_llm=model,
                    stdin=keys.stream,
                    stdout=out,
                ),
                person(keys, out),
            )
    finally:
        keys.close()
    return code, out


def replies(out: Terminal) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.startswith("coach> ")]


async def stored_messages(database_url: str) -> list[tuple[str, str, bool]]:
    repo = await open_repository(database_url, **keys_of(database_url), secret=SECRET.encode())
    try:
        user = await repo.get_or_create_user("ada")
        (session,) = await repo.get_user_sessions(user.id)
        return [
            (m.role, m.content, m.interrupted)
            for m in await repo.get_session_conversation(session.id)
        ]
    finally:
        await repo.aclose()


async def test_ctrl_c_cuts_a_reply_short_and_the_chat_goes_on(sqlite_url: str) -> None:
    never = asyncio.Event()  # the story's end is never generated: only Ctrl-C ends it
    model = PacedLLM(
        [CHALLENGE], ["Hello!"], ["Once upon", never.wait, " a time"], ["Sure, ask away."]
    )

    async def person(keys: Keyboard, out: Terminal) -> None:
        await out.shows("coach> Hello!\n")
        keys.type("tell me a story")
        await out.shows("coach> Once upon")
        keys.ctrl_c()
        await out.shows("coach> Once upon [interrupted]\n")
        keys.type("a question instead")
        await out.shows("coach> Sure, ask away.\n")
        keys.ctrl_d()

    code, out = await chat(sqlite_url, model, person)
    assert code == EXIT_OK
    assert replies(out) == [
        "coach> Hello!",
        "coach> Once upon [interrupted]",
        "coach> Sure, ask away.",
    ]
    assert await stored_messages(sqlite_url) == [
        ("assistant", "Hello!", False),
        ("user", "tell me a story", False),
        ("assistant", "Once upon", True),  # only what was shown, marked
        ("user", "a question instead", False),
        ("assistant", "Sure, ask away.", False),
    ]


async def test_ctrl_c_before_the_reply_starts_cancels_it_and_says_so(sqlite_url: str) -> None:
    asked = asyncio.Event()
    never = asyncio.Event()

    async def silent() -> None:
        asked.set()
        await never.wait()

    model = PacedLLM([CHALLENGE], ["Hello!"], [silent, "too late"], ["Here."])

    async def person(keys: Keyboard, out: Terminal) -> None:
        await out.shows("coach> Hello!\n")
        keys.type("anything")
        await asked.wait()
        keys.ctrl_c()
        await out.shows("(interrupted before the reply)\n")
        keys.type("again")
        await out.shows("coach> Here.\n")
        keys.ctrl_d()

    code, out = await chat(sqlite_url, model, person)
    assert code == EXIT_OK
    assert "too late" not in out.getvalue()
    assert [m[:2] for m in await stored_messages(sqlite_url)] == [
        ("assistant", "Hello!"),
        ("user", "anything"),
        ("user", "again"),
        ("assistant", "Here."),
    ]


async def test_ctrl_c_at_the_prompt_ends_the_chat(sqlite_url: str) -> None:
    model = PacedLLM([CHALLENGE], ["Hello!"])

    async def person(keys: Keyboard, out: Terminal) -> None:
        # Shown once the line was read: the chat waits at the prompt again.
        keys.type("/steps")
        await out.shows("(/steps toggles)\n")
        keys.ctrl_c()  # the next line is never finished

    code, out = await chat(sqlite_url, model, person)
    assert code == EXIT_OK
    assert replies(out) == ["coach> Hello!"]
    assert await stored_messages(sqlite_url) == [("assistant", "Hello!", False)]


async def test_steps_hides_and_shows_tool_calls_and_handoffs(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'steps.db'}"
    lines = [
        "I'm Ada",
        "/steps",  # hidden from here: the challenge, the transfer and the handoff
        "Onboarding for my budgeting app",
        "/STEPS",  # shown again: complete_phase
        "They quit at bank linking",
    ]
    out = Terminal(tty=False)
    model = ScriptedLLM(load_script(DEMO))
    code = await run_chat(
        settings(url),
        user="ada",
        chat_llm=model,
        stdin=io.StringIO("\n".join(lines) + "\n"),
        stdout=out,
    )
    assert code == EXIT_OK
    text = out.getvalue()
    assert "tool calls and handoffs are hidden (/steps toggles)" in text
    assert "tool calls and handoffs are shown (/steps toggles)" in text
    steps = [line.strip().split("(")[0] for line in text.splitlines() if "⚙" in line or "↪" in line]
    assert steps == [
        "⚙ identify_user",  # before /steps
        "⚙ complete_phase",
    ]
    assert "coach> I'm the Design Strategist." in text  # the hidden steps still happened
    # /steps never reached the model.
    assert all("/steps" not in str(r.messages()).lower() for r in model.requests)
