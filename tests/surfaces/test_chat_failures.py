"""`chat` off the happy path: a model that fails, input that is not UTF-8, a database
that goes away. Each failure is one line, the conversation goes on where it can, and
the exit code says what happened."""

from __future__ import annotations

import asyncio
import io
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import APIConnectionError, llm
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions
from sqlalchemy.engine import make_url

from coach.persistence import Repository, open_repository
from coach.settings import Settings
from coach.surfaces.chat import EXIT_MODEL_FAILED, EXIT_OK, EXIT_WRITES_LOST, run_chat
from coach.testing import FakeOpenAIServer, RecordedRequest, ScriptedLLM, call, say
from coach.testing.script import is_render_request
from coach.testing.scripted_llm import ScriptedLLMStream
from tests.processes import running
from tests.recording.tcp_proxy import TcpProxy
from tests.support import keys_of, keys_url

from .test_chat_cli import SECRET, coach, coach_env

MODEL_URL = "http://model.test/v1"

VISIT = [
    say("Hi! What's your name?"),
    call("identify_user", name="Ada"),
    say("Nice to meet you, Ada. What would you like to design?"),
    call("capture_design_challenge", challenge="Onboarding for a budgeting app."),
    say("Got it: onboarding. Where do people give up?"),
    # request 6 fails (see FlakyLLM); the user says it again
    say("Bank linking, noted."),
]
LINES = "I'm Ada\nOnboarding for my budgeting app\nThey quit at bank linking\n"


class _DownStream(llm.LLMStream):
    """A request to a model server that is down (the plugin's retries already spent)."""

    async def _run(self) -> None:
        try:
            raise ConnectionRefusedError("connection refused")
        except ConnectionRefusedError as exc:
            raise APIConnectionError("Connection error.", retryable=False) from exc


class _HookedStream(ScriptedLLMStream):
    """A scripted reply that first waits for something to happen (a test's hook)."""

    def __init__(self, hook: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hook = hook

    async def _run(self) -> None:
        await self._hook()
        await super()._run()


class FlakyLLM(ScriptedLLM):
    """A scripted model whose requests number ``down`` fail; ``before`` hooks run first."""

    def __init__(
        self,
        replies: list[Any],
        *,
        down: set[int] = frozenset(),  # type: ignore[assignment]
        before: dict[int, Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        super().__init__(replies)
        self.calls = 0
        self.down = down
        self.before = before or {}

    def chat(  # type: ignore[override]
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> llm.LLMStream:
        if is_render_request(kwargs.get("tool_choice")):  # the brief's model call: not a turn
            return super().chat(chat_ctx=chat_ctx, tools=tools, conn_options=conn_options, **kwargs)
        self.calls += 1
        if hook := self.before.get(self.calls):
            request = RecordedRequest(chat_ctx=chat_ctx.copy())
            self.requests.append(request)
            return _HookedStream(
                hook,
                scripted=self,
                request=request,
                request_no=self.calls,
                chat_ctx=chat_ctx,
                tools=tools or [],
                conn_options=conn_options,
            )
        if self.calls in self.down:
            return _DownStream(
                self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options
            )
        return super().chat(chat_ctx=chat_ctx, tools=tools, conn_options=conn_options, **kwargs)


def chat_settings(database_url: str, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=SECRET,
        llm_base_url=MODEL_URL,
        **extra,
    )


async def stored_conversation(database_url: str) -> list[tuple[str, str]]:
    repo = await open_repository(database_url, **keys_of(database_url), secret=SECRET.encode())
    try:
        user = await repo.get_or_create_user("ada")
        (session,) = await repo.get_user_sessions(user.id)
        return [(m.role, m.content) for m in await repo.get_session_conversation(session.id)]
    finally:
        await repo.aclose()


async def test_a_failed_model_turn_is_one_line_and_the_next_turn_works(
    database_url: str,
) -> None:
    model = FlakyLLM(VISIT, down={6})
    out, err = io.StringIO(), io.StringIO()
    lines = io.StringIO(LINES + "They quit at bank linking\n")
    code = await run_chat(
        chat_settings(database_url), user="ada", chat_llm=model, stdin=lines, stdout=out, stderr=err
    )

    assert code == EXIT_MODEL_FAILED
    assert err.getvalue() == (
        f"coach: the model at {MODEL_URL} did not answer (ConnectionRefusedError: connection "
        "refused). Everything so far is saved; say it again to retry, or type exit.\n"
    )
    assert out.getvalue().splitlines()[-1] == "coach> Bank linking, noted."
    conversation = await stored_conversation(database_url)
    # Every turn is stored: the one the model missed and the retry it answered.
    assert conversation[-3:] == [
        ("user", "They quit at bank linking"),
        ("user", "They quit at bank linking"),
        ("assistant", "Bank linking, noted."),
    ]


async def test_a_model_failure_before_any_session_says_nothing_is_saved_yet(
    sqlite_url: str,
) -> None:
    # The user's name is held in memory until a session starts; a model that fails
    # before then must not promise that it was stored.
    model = FlakyLLM([say("Hi! What's your name?"), say("Hello, Ada.")], down={2})
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(
        chat_settings(sqlite_url),
        user="ada",
        chat_llm=model,
        stdin=io.StringIO("I'm Ada\nI'm Ada\n"),
        stdout=out,
        stderr=err,
    )

    assert code == EXIT_MODEL_FAILED
    assert err.getvalue() == (
        f"coach: the model at {MODEL_URL} did not answer (ConnectionRefusedError: connection "
        "refused). Nothing is saved until a session starts (a new challenge, or one "
        "resumed); say it again to retry, or type exit.\n"
    )
    assert out.getvalue().splitlines()[-1] == "coach> Hello, Ada."
    repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=SECRET.encode())
    try:
        user = await repo.find_user("ada")
        assert user is not None
        assert await repo.get_user_sessions(user.id) == []
    finally:
        await repo.aclose()


async def test_a_model_that_stays_down_never_ends_the_chat(sqlite_url: str) -> None:
    # More failures in a row than the framework's limit (3): the user decides when to stop.
    model = FlakyLLM([say("Hi! What's your name?"), say("Back again.")], down={2, 3, 4, 5, 6})
    out, err = io.StringIO(), io.StringIO()
    lines = io.StringIO("hello\n" * 6)
    code = await run_chat(
        chat_settings(sqlite_url), user="ada", chat_llm=model, stdin=lines, stdout=out, stderr=err
    )
    assert code == EXIT_MODEL_FAILED
    assert err.getvalue().count("did not answer") == 5
    assert out.getvalue().splitlines()[-1] == "coach> Back again."


@pytest.mark.slow
async def test_a_model_server_that_is_down_is_named_in_one_line_per_turn(tmp_path: Path) -> None:
    env = coach_env(tmp_path, COACH_LLM_BASE_URL="http://127.0.0.1:9/v1")
    code, out, text = await coach("chat", "--user", "ada", env=env, stdin="hello\n")
    assert code == EXIT_MODEL_FAILED
    assert out == ""
    # The greeting and the one line of input: one line each, naming server and reason.
    assert (
        text.splitlines()
        == [
            "coach: the model at http://127.0.0.1:9/v1 did not answer after 2 attempts "
            "(ConnectError: All connection attempts failed). Nothing is saved until a "
            "session starts (a new challenge, or one resumed); say it again to retry, or "
            "type exit."
        ]
        * 2
    )


async def test_input_that_is_not_utf8_is_read_with_replacement(tmp_path: Path) -> None:
    replies = [say("Hi! What's your name?"), say("Hello!"), say("Still here.")]
    async with FakeOpenAIServer(replies) as server:
        env = coach_env(tmp_path, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        lines = b"I'm \xff\xfeAda\nmore\n"
        code, out, err = await coach("chat", "--user", "ada", env=env, stdin=lines)
    assert code == EXIT_OK, err
    assert out.splitlines()[-1] == "coach> Still here."
    users = [m["content"] for m in server.requests[1]["messages"] if m.get("role") == "user"]
    assert users == ["I'm \ufffd\ufffdAda"]


async def stored_messages(reader: Repository) -> int:
    user = await reader.find_user("ada")
    sessions = await reader.get_user_sessions(user.id) if user else []
    return len(await reader.get_session_conversation(sessions[0].id)) if sessions else 0


class Outage:
    """Takes the database away for good once ``messages`` messages are stored: on SQLite
    another connection holds the write lock; on PostgreSQL the relay to it is cut."""

    def __init__(self, database_url: str, messages: int, *, stall: bool = False) -> None:
        self.direct_url = self.url = database_url
        self._messages = messages
        self._stall = stall
        self._proxy: TcpProxy | None = None
        self._lock: sqlite3.Connection | None = None

    async def __aenter__(self) -> Outage:
        target = make_url(self.direct_url)
        if target.get_backend_name() == "postgresql":
            self._proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
            await self._proxy.start()
            self.url = target.set(port=self._proxy.port).render_as_string(False)
        self._reader = await open_repository(
            self.direct_url, **keys_of(self.direct_url), secret=SECRET.encode()
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._lock is not None:
            self._lock.rollback()
            self._lock.close()
        if self._proxy is not None:
            self._proxy.resume()
            await self._proxy.aclose()
        await self._reader.aclose()

    async def begin(self) -> None:
        async with asyncio.timeout(30):
            while await stored_messages(self._reader) < self._messages:
                pass  # each look is a database round trip: the recorder runs meanwhile
        if self._proxy is not None and self._stall:
            self._proxy.stall()  # connections stay open; nothing is answered
            return
        if self._proxy is not None:
            await self._proxy.cut()
            return
        path = make_url(self.direct_url).database
        assert path
        self._lock = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock.execute("BEGIN EXCLUSIVE")


async def test_writes_lost_at_exit_are_counted_in_one_line_and_the_exit_code(
    database_url: str,
) -> None:
    async with Outage(database_url, messages=5) as outage:
        # Once the first five messages are stored, the database goes away for good.
        model = FlakyLLM(VISIT, before={6: outage.begin})
        out, err = io.StringIO(), io.StringIO()
        code = await run_chat(
            chat_settings(outage.url, recorder_shutdown_timeout=1),
            user="ada",
            chat_llm=model,
            stdin=io.StringIO(LINES),
            stdout=out,
            stderr=err,
        )
    assert code == EXIT_WRITES_LOST
    (line,) = err.getvalue().splitlines()
    assert line.startswith("coach: ") and "write(s) were not saved" in line
    assert "still queued when the database stayed unavailable; cause: " in line
    # What was written before the outage is intact; the reply after it is what was lost.
    conversation = await stored_conversation(database_url)
    assert conversation[:5] == [
        ("assistant", "Hi! What's your name?"),
        ("user", "I'm Ada"),
        ("assistant", "Nice to meet you, Ada. What would you like to design?"),
        ("user", "Onboarding for my budgeting app"),
        ("assistant", "Got it: onboarding. Where do people give up?"),
    ]
    assert conversation[5:] in ([], [("user", "They quit at bank linking")])


@pytest.mark.parametrize("user", ["", "   ", "a" * 256, "ada\nbob", "\u202eada", "a\u200bda"])
async def test_an_invalid_user_is_one_line_before_anything_starts(
    tmp_path: Path, user: str
) -> None:
    env = coach_env(tmp_path, COACH_LLM_BASE_URL="http://127.0.0.1:9/v1")
    code, out, err = await coach("chat", "--user", user, env=env, stdin="hello\n")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("coach: ") and "identity" in line.lower(), line
    assert not (tmp_path / "chat.db").exists()  # nothing was opened, nothing written


@pytest.mark.postgres
async def test_a_stalled_postgresql_bounds_the_exit_and_counts_what_was_lost(
    postgres_url: str,
) -> None:
    # The server stops answering without closing anything: the chat still ends, within
    # the shutdown timeout plus one call's deadline, and says what it could not store.
    async with Outage(postgres_url, messages=5, stall=True) as outage:
        model = FlakyLLM(VISIT, before={6: outage.begin})
        err = io.StringIO()
        run = run_chat(
            chat_settings(outage.url, recorder_shutdown_timeout=1, db_timeout=1),
            user="ada",
            chat_llm=model,
            stdin=io.StringIO(LINES),
            stdout=io.StringIO(),
            stderr=err,
        )
        code = await asyncio.wait_for(run, 60)  # the test's own bound: a hang fails it
    assert code == EXIT_WRITES_LOST
    (line,) = err.getvalue().splitlines()
    assert "write(s) were not saved" in line and "cause: " in line


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_stop_signal_ends_the_chat_with_everything_said_stored(
    tmp_path: Path, database_url: str, stop: signal.Signals
) -> None:
    replies = [
        say("Hi! What would you like to design?"),
        call("capture_design_challenge", challenge="Onboarding for a budgeting app."),
        say("Got it: onboarding."),
    ]
    async with FakeOpenAIServer(replies) as server:
        env = coach_env(
            tmp_path,
            COACH_DATABASE_URL=database_url,
            COACH_LLM_BASE_URL=server.base_url,
            COACH_LLM_MODEL="fake",
            # Nothing commits on its own while the test runs: only a drain stores it.
            COACH_RECORDER_COMMIT_INTERVAL="600",
        )
        async with running(
            sys.executable,
            *("-m", "coach", "chat", "--user", "ada"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=env["HOME"],
        ) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            async with asyncio.timeout(60):
                assert (await proc.stdout.readline()).startswith(b"coach> Hi!")
                proc.stdin.write(b"Onboarding for my budgeting app\n")
                await proc.stdin.drain()
                while not (await proc.stdout.readline()).startswith(b"coach> Got it"):
                    pass
            proc.send_signal(stop)  # stdin stays open: the chat is waiting for the next line
            _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == EXIT_OK, err.decode()
    assert b"Traceback" not in err
    conversation = await stored_conversation(database_url)
    assert conversation[-2:] == [
        ("user", "Onboarding for my budgeting app"),
        ("assistant", "Got it: onboarding."),
    ]
