"""``python -m coach demo`` (``make demo``): a first visit and a resumed second visit, with
no model and no network.

Starts the fake OpenAI server (:mod:`coach.testing.openai_server`) in this process, then runs
``python -m coach chat --user ada`` twice — two separate processes, as a person would —
typing each visit's lines from ``src/coach/testing/scripts/demo_visits.yaml`` and printing the
conversation as it happens. The second visit finds the first one's session through the
repository, hands Ada to the strategist and restores the context. Last, it prints
``python -m coach sessions list`` for the demo's database.

The database is a SQLite file in the demo directory (``.demo/`` by default), emptied at
the start of every run: each run shows the same story from a first visit, and a second
run neither finds a stranger's sessions nor duplicates any. It is kept afterwards, to look
at with ``sessions show``. Nothing is written to your real coach data directory.

Exit code 0 when both visits went as scripted; otherwise 1 with one line on stderr saying
what went wrong (a chat that failed or went quiet, a request that lacked what the script
reads from it, replies left unused).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from .openai_server import FakeOpenAIServer
from .script import DEMO_VISITS, ScriptError
from .script_files import Visit, parse_visit

__all__ = [
    "DEMO_MASTER_KEY",
    "DEMO_SECRET",
    "DemoError",
    "DemoScript",
    "load_demo",
    "run_demo",
    "this_python",
]

DEFAULT_SCRIPT = DEMO_VISITS
DEFAULT_DIR = Path(".demo")
DATABASE = "coach.db"
KEYS = "coach.keys.db"
MARKER = ".coach-demo"
"""Marks a directory whose ``coach.db`` the demo created, and so may empty."""
T = TypeVar("T")
DEMO_SECRET = "coach-demo-secret-not-for-real-use"
DEMO_MASTER_KEY = "coach-demo-master-key-not-for-real-use"
"""The demo's master key: its database and key store are emptied on every run."""
"""The memory-step HMAC key of the demo database (it signs only the demo's own data)."""


class DemoError(Exception):
    """Raised when a visit does not go as scripted; the message is one line."""


@dataclass(frozen=True)
class DemoScript:
    """The demo: who visits, and each visit's turns and scripted model replies."""

    user: str
    visits: tuple[Visit, ...]


def load_demo(path: Path) -> DemoScript:
    """Read ``{user, visits: [visit, ...]}`` (each visit: :func:`.script_files.parse_visit`)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or set(document) != {"user", "visits"}:
        raise ScriptError(f"{path}: expected a mapping of user and visits")
    user, visits = document["user"], document["visits"]
    if not isinstance(user, str) or not user or not isinstance(visits, list) or not visits:
        raise ScriptError(f"{path}: 'user' must be a name and 'visits' a non-empty list")
    return DemoScript(
        user=user,
        visits=tuple(parse_visit(v, f"{path.name}, visit #{n}") for n, v in enumerate(visits)),
    )


def coach_env(database: Path, **extra: str) -> dict[str, str]:
    """This environment without coach's or OpenAI's settings, pointed at ``database``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
    env.update(
        COACH_DATABASE_URL=f"sqlite:///{database.resolve()}",
        COACH_SECRET_KEY=DEMO_SECRET,
        COACH_MASTER_KEY=DEMO_MASTER_KEY,
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def reset_database(directory: Path) -> Path:
    """Create ``directory`` and remove the demo database (and only it) from it.

    Raises:
        DemoError: ``directory`` holds a ``coach.db`` the demo did not create (it is left
            alone: it may be someone's real data).
    """
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / DATABASE
    marker = directory / MARKER
    if database.exists() and not marker.exists():
        raise DemoError(f"{database} was not created by the demo; choose another directory")
    marker.write_text("coach demo: `make demo` empties coach.db here on every run\n")
    ignore = directory / ".gitignore"
    if not ignore.exists():  # in a checkout, the demo's files are not work to commit
        ignore.write_text("# written by the coach demo\n*\n")
    for name in (database.name, KEYS):  # the data and its key store
        for suffix in ("", "-wal", "-shm", "-journal"):
            database.with_name(name + suffix).unlink(missing_ok=True)
    return database


async def run_demo(
    script: DemoScript, directory: Path, *, out: TextIO = sys.stdout, wait: float = 60.0
) -> str:
    """Play every visit against a fresh demo database; returns the resumed session's id.

    Args:
        script: The demo.
        directory: Where the demo database lives; its ``coach.db`` is emptied first.
        out: Where the conversation is printed.
        wait: Seconds any one reply, or a chat's exit, may take.

    Raises:
        DemoError: A visit did not go as scripted.
    """
    database = reset_database(directory)
    show = f"{directory}/{DATABASE}"
    print(
        f"coach demo — a scripted fake model, nothing leaves this machine; database {show}",
        file=out,
    )
    failed = asyncio.Event()  # the fake model could not answer: stop waiting at once
    async with FakeOpenAIServer(on_error=lambda _: failed.set()) as server:
        env = coach_env(database, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        for number, visit in enumerate(script.visits, start=1):
            server.extend(visit.replies)
            title = visit.title or f"Visit {number}"
            print(f"\n=== {title}\n=== $ python -m coach chat --user {script.user}", file=out)
            chat = _Chat(server, failed, out, wait)
            await chat.run(visit, script.user, env, directory)
            if server.script.remaining:
                raise DemoError(
                    f"visit {number} ended with {server.script.remaining} scripted "
                    "replies unused: the agents asked the model less often than scripted"
                )
        session_id = server.script.values.get("session_id", "")

    listing_command = f"python -m coach sessions list --user {script.user}"
    print(f"\n=== What is stored\n=== $ {listing_command}", file=out)
    code, listing, err = await _coach(
        ["sessions", "list", "--user", script.user], env, directory, wait
    )
    if code != 0:
        raise DemoError(f"sessions list failed (exit {code}): {_last_line(err)}")
    print(listing, end="", file=out)
    print(
        "\nEvery message, phase output and memory step of both visits is in that one "
        "session. To read it:\n  "
        f"COACH_DATABASE_URL={shlex.quote('sqlite:///' + show)} COACH_SECRET_KEY={DEMO_SECRET} "
        f"COACH_MASTER_KEY={DEMO_MASTER_KEY} "
        f"{this_python()} -m coach sessions show {session_id or 'ID'}",
        file=out,
    )
    return session_id


class _ModelFailed(Exception):
    """The fake model answered a request with an error (its message is on the server)."""


class _Chat:
    """One ``coach chat`` process: wait for each reply, then type the next line."""

    def __init__(
        self, server: FakeOpenAIServer, failed: asyncio.Event, out: TextIO, timeout: float
    ) -> None:
        self._server = server
        self._failed = failed
        self._out = out
        self._timeout = timeout

    async def run(self, visit: Visit, user: str, env: dict[str, str], cwd: Path) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "coach",
            "chat",
            "--user",
            user,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,  # not the checkout: a developer's .env must not change the demo
        )
        # Narrows the types only: asyncio sets each pipe asked for with PIPE, as all three are.
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr = asyncio.ensure_future(proc.stderr.read())
        try:
            for line in [None, *(turn.user for turn in visit.turns)]:
                if line is not None:
                    print(f"you> {line}", file=self._out, flush=True)
                    proc.stdin.write(f"{line}\n".encode())
                    await proc.stdin.drain()
                await self._until_reply(proc.stdout)
            proc.stdin.close()
            # Anything after the last reply (there should be nothing) is still shown.
            rest = await self._guarded(proc.stdout.read())
            print(rest.decode(), end="", file=self._out, flush=True)
            code = await self._guarded(proc.wait())
        except (TimeoutError, _ModelFailed, DemoError, ConnectionError) as exc:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            raise DemoError(self._why(exc, (await stderr).decode())) from None
        err = (await stderr).decode()
        if code != 0:
            raise DemoError(self._why(DemoError(f"coach chat exited with {code}"), err))

    async def _until_reply(self, stdout: asyncio.StreamReader) -> None:
        """Echo the chat's output up to and including its next ``coach>`` line."""
        while True:
            raw = await self._guarded(stdout.readline())
            if not raw:
                raise DemoError("coach chat ended before its reply")
            line = raw.decode().rstrip("\n")
            print(line, file=self._out, flush=True)
            if line.startswith("coach> "):
                return

    async def _guarded(self, step: Coroutine[Any, Any, T]) -> T:
        """``step``'s result, unless the fake model fails or it takes too long first."""
        task = asyncio.ensure_future(step)
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            done, _ = await asyncio.wait(
                {task, failed}, timeout=self._timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            failed.cancel()
        if failed in done:
            task.cancel()
            raise _ModelFailed
        if task not in done:
            task.cancel()
            raise TimeoutError
        return task.result()

    def _why(self, exc: BaseException | None, stderr: str) -> str:
        """One line: what went wrong, then the fake model's complaint or the chat's last word."""
        model = self._server.errors[-1] if self._server.errors else None
        if isinstance(exc, _ModelFailed) and model is not None:
            return f"the fake model could not answer: {model}"
        if isinstance(exc, TimeoutError):
            what = f"coach chat said nothing for {self._timeout:g} s"
        else:
            what = str(exc) if exc is not None else "coach chat failed"
        if model is not None:
            return f"{what}; the fake model could not answer: {model}"
        last = _last_line(stderr)
        return f"{what}: {last}" if last else what


async def _coach(
    args: list[str], env: dict[str, str], cwd: Path, wait: float
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coach",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), wait)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise DemoError(f"python -m coach {' '.join(args)} took over {wait:g} s") from None
    return await proc.wait(), out.decode(), err.decode()  # it has exited: at once


def this_python() -> str:
    """The interpreter running the demo, as a command to type here: ``.venv/bin/python``
    in a checkout, the full path where it lies elsewhere."""
    relative = os.path.relpath(sys.executable)
    return shlex.quote(sys.executable if relative.startswith("..") else relative)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; the exit code is 0 when every visit went as scripted."""
    parser = argparse.ArgumentParser(
        prog="python -m coach demo",
        description="A first and a resumed second coach chat against a scripted fake model.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help=f"where the demo database lives (emptied first; default {DEFAULT_DIR})",
    )
    parser.add_argument("--script", type=Path, default=DEFAULT_SCRIPT)
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds any one reply may take"
    )
    args = parser.parse_args(argv)
    try:
        script = load_demo(args.script)
        asyncio.run(run_demo(script, args.dir, wait=args.timeout))
    except (DemoError, ScriptError, OSError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
