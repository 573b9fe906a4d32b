"""``python -m coach chat``: the agents in a terminal, text in and text out.

The same agents, prompts and persistence as the worker, driven through
``AgentSession.run`` — no audio libraries needed. Interactive on a terminal; with
piped input it reads one user turn per line and exits after the last reply.

Ctrl-C while a reply is coming interrupts that reply — it is stored as interrupted, with
only the words shown — and the chat goes on; Ctrl-C at the prompt ends the chat. ``/steps``
hides or shows the tool calls and handoffs (shown at start).

Off the happy path: a model turn that fails (after the plugin's retries) is one line on
stderr naming the server; the conversation so far stays stored and the next line tries
again. Input that is not UTF-8 is read with replacement characters. The exit code says
how it ended (:data:`EXIT_OK`, :data:`EXIT_MODEL_FAILED`, :data:`EXIT_WRITES_LOST`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import queue
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TextIO

from livekit.agents import APIError, TurnHandlingOptions, llm
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent
from livekit.agents.voice.io import TextOutput

from ..conversation.runtime import Runtime
from ..models import build_llm, describe_model_error, llm_url
from ..settings import Settings
from ..store import check_identity

logger = logging.getLogger("coach.chat")

DIM, RESET = "\033[2m", "\033[0m"
QUIT = frozenset({"exit", "quit", "/quit", "/exit"})
"""Lines that end the chat (never sent to the model), like Ctrl-D."""
STEPS = "/steps"
"""The line that hides or shows tool calls and handoffs (never sent to the model)."""

EXIT_OK = 0
"""Every turn was answered and everything was stored."""
EXIT_MODEL_FAILED = 1
"""At least one turn got no answer from the model (each was reported as it happened)."""
EXIT_WRITES_LOST = 3
"""Some of the conversation could not be stored (reported, with the count, at exit)."""


TYPED_TURNS: TurnHandlingOptions = {"turn_detection": None}
"""A typed turn ends with its line: no end-of-turn model listens for it (LiveKit's
default loads one for speech — about 0.16 s of CPU and 240 MB of memory here)."""


WAITING = "waiting for the model…"
"""Shown dimmed on a terminal while the model has said nothing for :data:`WAIT_AFTER`."""
WAIT_AFTER = 1.0


class Transcript(TextOutput):
    """Prints replies as the model generates them, and tool calls and handoffs dimmed.

    The session's text output: each reply is written as it streams in (a slow local
    model shows its words as they come), on one ``coach>`` line. On a terminal, a dim
    :data:`WAITING` shows while a turn has produced nothing for ``wait_after`` seconds.
    """

    def __init__(self, out: TextIO, *, wait_after: float = WAIT_AFTER) -> None:
        super().__init__(label="coach-chat", next_in_chain=None)
        self.show_steps = True
        """Whether tool calls and handoffs are printed (``/steps`` toggles it)."""
        self.replies = 0
        """How many replies were shown (a reply cut short counts)."""
        self._out = out
        self._color = out.isatty()
        self._wait_after = wait_after
        self._line: list[str] | None = None  # the reply being written, until its item
        self._in_turn = False
        self._waiting: asyncio.TimerHandle | None = None
        self._shown = False

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def note(self, text: str) -> None:
        """A line about the chat itself (dimmed on a terminal), never from the model."""
        self._dim(text)

    def _dim(self, text: str) -> None:
        self._end_line()
        line = f"{DIM}{text}{RESET}" if self._color else text
        print(line, file=self._out, flush=True)

    def _end_line(self, suffix: str = "") -> None:
        self._hide_waiting()
        if self._line is not None:
            self._line = None
            self._write(suffix + "\n")

    # -- the wait ----------------------------------------------------------------------

    def begin_turn(self) -> None:
        """A turn starts: the model is asked; show that it is awaited if it stays silent."""
        self._in_turn = True
        self._wait()

    def end_turn(self) -> None:
        """The turn is over (answered, failed or cut short)."""
        self._in_turn = False
        self._end_line()

    def _wait(self) -> None:
        if self._color and self._in_turn and self._waiting is None:
            loop = asyncio.get_running_loop()
            self._waiting = loop.call_later(self._wait_after, self._show_waiting)

    def _show_waiting(self) -> None:
        self._shown = True
        self._write(f"{DIM}{WAITING}{RESET}")

    def _hide_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        if self._shown:
            self._shown = False
            self._write("\r\033[2K")  # back to the line's start, and erase it

    # -- the session's text output -----------------------------------------------------

    async def capture_text(self, text: str) -> None:
        if self._line is None:
            self._hide_waiting()
            self._line = []
            self._write("coach> ")
        self._line.append(text)
        self._write(text)

    def flush(self) -> None:
        # The line ends with its message (on_item), which says whether it was cut short.
        pass

    # -- session events ----------------------------------------------------------------

    def on_item(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.ChatMessage) and item.role == "assistant" and item.text_content:
            self.replies += 1
            suffix = " [interrupted]" if item.interrupted else ""
            if self._line is not None:
                self._end_line(suffix)  # streamed already
            else:
                self._end_line()
                print(f"coach> {item.text_content}{suffix}", file=self._out, flush=True)
        elif isinstance(item, llm.AgentHandoff) and item.old_agent_id and self.show_steps:
            self._dim(f"  ↪ handoff: {item.old_agent_id} → {item.new_agent_id}")

    def on_tools(self, event: FunctionToolsExecutedEvent) -> None:
        calls = zip(event.function_calls, event.function_call_outputs, strict=False)
        for call, output in calls if self.show_steps else ():
            status = "error" if output.is_error else "ok"
            self._dim(f"  ⚙ {call.name}({call.arguments}) → {status}")
        self._wait()  # the model is asked again with the tools' results


class LineReader:
    """Reads one line of input at a time in a daemon thread.

    A daemon thread (not the loop's executor) so that Ctrl-C never waits for the user to
    press Enter: the process can exit while the thread still blocks on the terminal.
    """

    def __init__(self, stream: TextIO, prompt: str) -> None:
        if isinstance(stream, io.TextIOWrapper):
            # Bytes that are not UTF-8 become U+FFFD instead of killing the reader.
            stream.reconfigure(errors="replace")
        self._stream = stream
        self._prompt = prompt if stream.isatty() else ""
        self._requests: queue.SimpleQueue[asyncio.Future[str | None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="coach-chat-input", daemon=True).start()

    async def read(self) -> str | None:
        """The next line without its newline, or ``None`` at end of input."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._requests.put(future)
        return await future

    def _serve(self) -> None:
        while True:
            future = self._requests.get()
            try:
                line = self._read_one()
            except Exception as exc:  # an unreadable input ends the chat, never hangs it
                logger.error("cannot read input (%s); ending the chat", type(exc).__name__)
                line = None
            loop = future.get_loop()
            with contextlib.suppress(RuntimeError):  # the loop may be gone (Ctrl-C)
                loop.call_soon_threadsafe(_resolve, future, line)
            if line is None:
                return

    def _read_one(self) -> str | None:
        if self._prompt:
            try:
                return input(self._prompt)
            except EOFError:
                return None
        line = self._stream.readline()
        return line.rstrip("\n") if line else None


def _resolve(future: asyncio.Future[str | None], line: str | None) -> None:
    if not future.done():
        future.set_result(line)


async def run_chat(
    settings: Settings,
    *,
    user: str | None = None,
    chat_llm: llm.LLM[Any] | None = None,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
    wait_after: float = WAIT_AFTER,
) -> int:
    """Run the REPL until end of input. Returns the process exit code.

    Replies stream to ``stdout`` as they are generated; on a terminal a dim
    :data:`WAITING` shows after ``wait_after`` seconds of silence from the model.

    Raises :class:`~coach.errors.CoachError` (one line, exit 2) before the conversation
    starts: no model configured, an invalid ``user``, a database that is not usable.
    """
    if user is not None:
        user = check_identity(user)
    model: Any = chat_llm or build_llm(settings)  # ConfigError before anything else happens
    runtime = await Runtime.open(settings)
    answered = True
    try:
        userdata = runtime.new_userdata(identity=user, model=model)
        # The user decides when to give up on a model that is down, not a failure count.
        session = runtime.new_session(
            userdata, llm=model, turn_handling=TYPED_TURNS, max_model_failures=sys.maxsize
        )
        transcript = Transcript(stdout, wait_after=wait_after)
        session.output.transcription = transcript
        session.on("conversation_item_added", transcript.on_item)
        session.on("function_tools_executed", transcript.on_tools)
        url = llm_url(settings)
        cut_short: bool | None = None  # while a turn runs: whether Ctrl-C interrupted it

        async def turn(run: Awaitable[Any]) -> bool:
            nonlocal cut_short
            transcript.begin_turn()
            cut_short, shown = False, transcript.replies
            try:
                return await _answered(
                    run,
                    url,
                    stderr,
                    before_error=transcript.end_turn,
                    stored=lambda: userdata.session_id is not None,
                )
            finally:
                if cut_short and transcript.replies == shown:
                    transcript.note("  (interrupted before the reply)")
                cut_short = None
                transcript.end_turn()

        def interrupt() -> bool:
            """Ctrl-C: cut the reply in progress short (True), or end the chat (False)."""
            nonlocal cut_short
            if cut_short is not False:  # at the prompt, or a second Ctrl-C in one turn
                if stdout.isatty():
                    print(file=stdout)  # the shell's prompt on a line of its own
                return False
            cut_short = True
            with contextlib.suppress(RuntimeError):  # nothing left to interrupt
                session.interrupt(force=True)
            return True

        async def converse() -> bool:
            answered = await turn(session.start(runtime.first_agent(userdata), capture_run=True))
            reader = LineReader(stdin, "you> ")
            while (line := await reader.read()) is not None:
                said = line.strip()
                if said.lower() in QUIT:
                    break
                if said.lower() == STEPS:
                    transcript.show_steps = not transcript.show_steps
                    shown = "shown" if transcript.show_steps else "hidden"
                    transcript.note(f"  tool calls and handoffs are {shown} ({STEPS} toggles)")
                elif said:
                    answered &= await turn(session.run(user_input=said))
            return answered

        try:
            answered = await _until_terminated(converse(), interrupt=interrupt)
        finally:
            await session.aclose()
    finally:
        losses = await runtime.aclose()
    if losses.count:
        print(f"coach: {losses}. What was saved is intact.", file=stderr)
        return EXIT_WRITES_LOST
    return EXIT_OK if answered else EXIT_MODEL_FAILED


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""``kill`` and a closed terminal: the chat stops as it does at end of input — the turn
in progress is cut short, and everything said is stored before the process exits."""


async def _until_terminated(
    conversation: Coroutine[Any, Any, bool], *, interrupt: Callable[[], bool]
) -> bool:
    """Run the conversation; a stop signal ends it early (then: True, nothing failed).

    Ctrl-C (SIGINT) first asks ``interrupt`` — which cuts a reply short and returns True —
    and ends the conversation like a stop signal when it returns False.
    """
    loop = asyncio.get_running_loop()
    talk = asyncio.ensure_future(conversation)

    def on_ctrl_c() -> None:
        if not interrupt():
            talk.cancel()

    for stop in STOP_SIGNALS:
        loop.add_signal_handler(stop, talk.cancel)
    loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
    try:
        return await talk
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not talk.cancelled() or (current is not None and current.cancelling()):
            raise  # cancelled from outside, not by a stop signal
        return True
    finally:
        for stop in (*STOP_SIGNALS, signal.SIGINT):
            loop.remove_signal_handler(stop)


# What a model failure's line says of the conversation: its items are stored once it
# has a session; until then they are held in memory and go with the process.
STORED = "Everything so far is saved"
NOT_YET_STORED = "Nothing is saved until a session starts (a new challenge, or one resumed)"


async def _answered(
    turn: Awaitable[Any],
    url: str,
    err: TextIO,
    *,
    before_error: Callable[[], None],
    stored: Callable[[], bool],
) -> bool:
    """Await one turn (and its reply); a model failure is one line on ``err``: False.

    ``stored`` says whether the conversation has a session its items are stored in.
    """
    try:
        await turn
    except APIError as exc:
        before_error()  # a reply cut off mid-line ends its line first
        print(
            f"coach: {describe_model_error(exc, url)}. "
            f"{STORED if stored() else NOT_YET_STORED}; say it again to retry, or type exit.",
            file=err,
            flush=True,
        )
        return False
    return True
