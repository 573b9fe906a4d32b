"""One worker of the drill: a ``python -m coach chat --user NAME`` process and its model.

Each :class:`ChatWorker` is a separate OS process with its own ``Runtime`` (repository,
recorder), talking through the real openai plugin to a :class:`~coach.testing.FakeOpenAIServer`
of its own in the test's process. The test types one line per turn and extends the fake
model's script with that turn's replies just before; the turn ends when its ``coach>``
line is printed (every scripted turn prints exactly one). Lines are stamped with
``time.time()`` as they arrive (comparable with the
timestamps of a process's log lines), so the drill can report what happened when.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from coach.testing import FakeOpenAIServer, Reply
from tests.recording.chat_process import spawn_chat
from tests.recording.process_group import kill_group, wait_for_group

REPLY_TIMEOUT = 60.0
"""Seconds one reply (or a start-up's greeting) may take on a loaded 2-core machine."""
EXIT_TIMEOUT = 30.0
"""Seconds a process may take to exit after end of input or a signal."""


@dataclass(frozen=True)
class Line:
    """A line of the conversation: typed (``user``) or printed (``assistant``), and when."""

    role: str
    text: str
    at: float


@dataclass
class ChatWorker:
    """A running ``coach chat`` for one user (see the module docstring)."""

    user: str
    proc: asyncio.subprocess.Process
    server: FakeOpenAIServer
    stderr: Path
    spawned: float
    lines: list[Line] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    _replies: asyncio.Queue[Line | None] = field(default_factory=asyncio.Queue)
    _reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        user: str,
        greeting: list[Reply],
        *,
        database_url: str,
        home: Path,
        release: Path | None = None,
    ) -> ChatWorker:
        """Spawn the process (in a process group of its own) with ``greeting`` scripted."""
        proc, server, stderr = await spawn_chat(
            user, greeting, database_url=database_url, home=home, release=release
        )
        worker = cls(user, proc, server, stderr, time.time())
        worker._reader = asyncio.create_task(worker._read(), name=f"chat-{user}")
        return worker

    # --- the conversation ---------------------------------------------------------------

    async def reply(self) -> Line:
        """The next ``coach>`` line."""
        try:
            line = await asyncio.wait_for(self._replies.get(), REPLY_TIMEOUT)
        except TimeoutError:
            raise AssertionError(
                f"{self.user}: no reply in {REPLY_TIMEOUT} s{self.why()}"
            ) from None
        assert line is not None, f"{self.user}: the chat ended before its reply{self.why()}"
        return line

    async def turn(self, text: str, replies: list[Reply]) -> Line:
        """Type ``text`` with the model's ``replies`` scripted; returns the reply line."""
        self.server.extend(replies)
        stdin = self.proc.stdin
        assert stdin is not None
        self.lines.append(Line("user", text, time.time()))
        stdin.write(f"{text}\n".encode())
        await stdin.drain()
        return await self.reply()

    @property
    def said(self) -> list[tuple[str, str]]:
        """``(role, text)`` of every line typed and printed so far, in order."""
        return [(line.role, line.text) for line in self.lines]

    # --- endings ------------------------------------------------------------------------

    async def finish(self) -> int:
        """End of input: the chat ends by itself. Returns its exit code."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return await self._exit()

    async def terminate(self) -> tuple[int, float, float]:
        """SIGTERM now. Returns the exit code, when the signal was sent and when the
        process had exited (``time.time()``)."""
        sent = time.time()
        os.kill(self.proc.pid, signal.SIGTERM)
        code = await self._exit()
        return code, sent, time.time()

    async def kill(self) -> float:
        """SIGKILL now; returns once every process of its group is gone, with when the
        signal was sent (``time.time()``)."""
        sent = time.time()
        os.kill(self.proc.pid, signal.SIGKILL)
        assert await asyncio.wait_for(self.proc.wait(), EXIT_TIMEOUT) == -signal.SIGKILL
        await wait_for_group(self.proc.pid)  # nothing it started may still write
        return sent

    async def _exit(self) -> int:
        try:
            code = await asyncio.wait_for(self.proc.wait(), EXIT_TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"{self.user}: still running{self.why()}") from None
        await wait_for_group(self.proc.pid)
        return code

    async def close(self) -> None:
        """However the drill went: no process, task or server is left behind."""
        try:
            if self.proc.returncode is None:
                self.proc.kill()
                await asyncio.wait_for(self.proc.wait(), EXIT_TIMEOUT)
            kill_group(self.proc.pid)
        finally:
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            await self.server.stop()

    def why(self) -> str:
        """The end of its stderr and the fake model's complaints, for a failure message."""
        try:
            err = self.stderr.read_text(errors="replace")[-2000:]
        except OSError:
            err = ""
        model = f"\nfake model: {self.server.errors}" if self.server.errors else ""
        return f"{model}\nstderr of {self.user}'s chat:\n{err}" if err or model else ""

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while raw := await self.proc.stdout.readline():
                now = time.time()
                if not raw.endswith(b"\n"):
                    break  # cut short by a kill: never printed whole
                text = raw.decode(errors="replace").rstrip("\n")
                if text.startswith("coach> "):
                    line = Line("assistant", text.removeprefix("coach> "), now)
                    self.lines.append(line)
                    self._replies.put_nowait(line)
                elif text.strip().startswith("⚙ "):
                    self.tools.append(text.strip())
        finally:
            self._replies.put_nowait(None)
