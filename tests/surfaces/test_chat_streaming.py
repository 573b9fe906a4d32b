"""A slow model in the chat: its words reach the terminal as they are generated, and a
terminal shows that the model is awaited while it says nothing."""

from __future__ import annotations

import asyncio
import io

from coach.settings import Settings
from coach.surfaces.chat import DIM, EXIT_OK, RESET, WAITING, run_chat
from coach.testing.paced_llm import PacedLLM
from tests.support import keys_url

from .test_chat_cli import SECRET


class Terminal(io.StringIO):
    """What the chat writes, with a way to wait until some text has been written."""

    def __init__(self, *, tty: bool) -> None:
        super().__init__()
        self._tty = tty
        self._changed = asyncio.Event()

    def isatty(self) -> bool:
        return self._tty

    def write(self, text: str) -> int:
        self._changed.set()
        return super().write(text)

    async def shows(self, text: str) -> None:
        while text not in self.getvalue():
            self._changed.clear()
            await self._changed.wait()


def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=SECRET,
        llm_base_url="http://127.0.0.1:9/v1",
    )


async def test_a_reply_is_shown_while_the_model_is_still_generating(sqlite_url: str) -> None:
    out = Terminal(tty=False)
    # The model finishes its reply only once its first words are on the screen.
    model = PacedLLM(["Hello", lambda: out.shows("coach> Hello"), " there!"])
    async with asyncio.timeout(60):  # a hang guard: without streaming this never ends
        code = await run_chat(
            settings(sqlite_url), user="ada", chat_llm=model, stdin=io.StringIO(), stdout=out
        )
    assert code == EXIT_OK
    assert out.getvalue() == "coach> Hello there!\n"


async def test_a_terminal_shows_that_the_model_is_awaited(sqlite_url: str) -> None:
    out = Terminal(tty=True)
    model = PacedLLM([lambda: out.shows(WAITING), "Hi!"])
    async with asyncio.timeout(60):
        code = await run_chat(
            settings(sqlite_url),
            user="ada",
            chat_llm=model,
            stdin=io.StringIO(),
            stdout=out,
            wait_after=0,
        )
    assert code == EXIT_OK
    # Dimmed, then erased when the reply starts.
    assert out.getvalue() == f"{DIM}{WAITING}{RESET}\r\033[2Kcoach> Hi!\n"


async def test_a_pipe_gets_no_waiting_line(sqlite_url: str) -> None:
    out = Terminal(tty=False)
    # The model is silent for longer than the wait (0 s) before it answers.
    model = PacedLLM([lambda: asyncio.sleep(0.05), "Hi!"])
    code = await run_chat(
        settings(sqlite_url),
        user="ada",
        chat_llm=model,
        stdin=io.StringIO(),
        stdout=out,
        wait_after=0,
    )
    assert code == EXIT_OK
    assert out.getvalue() == "coach> Hi!\n"
