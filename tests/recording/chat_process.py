"""``python -m coach chat`` as a separate process against a fake model of its own — what
the SIGKILL runs and the fleet drill start, turn by turn."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from coach.testing import FakeOpenAIServer, Reply, Script
from tests.support import MEMORY_SECRET, key_env


def workplace(home: Path) -> Path:
    """``home``, created: a process's HOME and working directory."""
    home.mkdir(parents=True, exist_ok=True)
    return home


def chat_env(
    home: Path, database_url: str, base_url: str, release: Path | None = None
) -> dict[str, str]:
    """The environment of one chat: nothing of the developer's coach or OpenAI settings,
    the shared database and key, its own fake model; ``release`` first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        COACH_DATABASE_URL=database_url,
        COACH_SECRET_KEY=MEMORY_SECRET.decode(),
        COACH_LLM_BASE_URL=base_url,
        COACH_LLM_MODEL="fake",
        PYTHONUNBUFFERED="1",
    )
    env.update(key_env(database_url))
    if release is not None:
        env["PYTHONPATH"] = str(release)
    return env


async def spawn_chat(
    user: str,
    script: list[Reply] | Script,
    *,
    database_url: str,
    home: Path,
    release: Path | None = None,
) -> tuple[asyncio.subprocess.Process, FakeOpenAIServer, Path]:
    """Start a fake server playing ``script`` and ``python -m coach chat --user USER``
    against it, in a process group of its own; the process, the server, its stderr file."""
    server = FakeOpenAIServer(script)
    await server.start()
    stderr = workplace(home) / "chat.stderr"
    try:
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "coach",
                "chat",
                "--user",
                user,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=chat_env(home, database_url, server.base_url, release),
                cwd=home,  # outside the checkout: a developer's .env cannot leak in
                start_new_session=True,  # its own process group: whatever it starts, too
            )
    except BaseException:
        await server.stop()
        raise
    return proc, server, stderr
