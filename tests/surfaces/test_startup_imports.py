"""What a command imports before it answers: a command that runs no agent, and every
check made at start, loads no agent framework (nor SQLAlchemy unless it opens the
database, nor its ORM unless it runs Alembic, nor aiohttp unless it signs a token or
serves, nor pydantic for ``--help``); a text chat loads no voice plugin.

Each command is a real ``python -m coach`` process (run through a wrapper that says at
exit which of :data:`WATCHED` it imported). What this guards is what the start costs:
``livekit.agents`` and the OpenAI plugin are most of it, SQLAlchemy, LiveKit's server API
and pydantic-settings 0.3-0.6 s of CPU each (``bench/startup.py`` measures it; the
figures are in docs/benchmarks.md). No timing is asserted.

``sessions export`` and ``sessions show --steps`` are not here: a stored step is an
object of the agent framework's classes, so reading one imports them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from coach.testing import FakeOpenAIServer, say
from tests.processes import running

from .test_chat_cli import coach, coach_env, tmp_cwd
from .test_sessions_cli import fill

WATCHED = (
    "livekit.agents",
    "livekit.plugins.openai",
    "livekit.plugins.silero",
    "alembic",
    "sqlalchemy",
    "sqlalchemy.orm",
    "aiohttp",
    "pydantic_settings",
)
AGENT = ("livekit.agents", "livekit.plugins.openai", "livekit.plugins.silero")
SETTINGS = {"pydantic_settings"}
DATABASE = {"sqlalchemy", *SETTINGS}
"""On SQLite: SQLAlchemy's Core, not its ORM (which its asyncio extension imports)."""
MIGRATES = {"alembic", "sqlalchemy.orm", *DATABASE}
SIGNS = {"aiohttp", *SETTINGS}  # LiveKit's server API
PROBE = f"""
import atexit, json, sys
watched = {WATCHED!r}
atexit.register(lambda: print(
    "loaded:", json.dumps([m for m in watched if m in sys.modules]), file=sys.stderr
))
import runpy
sys.argv = ["coach", *sys.argv[1:]]
runpy.run_module("coach", run_name="__main__", alter_sys=True)
"""
LIVEKIT = {"LIVEKIT_URL": "ws://127.0.0.1:9", "LIVEKIT_API_KEY": "devkey"}
LIVEKIT_SECRET = {"LIVEKIT_API_SECRET": "a-secret-of-at-least-thirty-two-characters"}


async def probe(
    *args: str, env: dict[str, str], stdin: str = ""
) -> tuple[int, str, str, list[str]]:
    """``python -m coach ARGS``: exit code, stdout, stderr, and what of WATCHED it loaded."""
    async with running(
        sys.executable,
        "-c",
        PROBE,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_cwd(env),
    ) as proc:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout=120)
    assert proc.returncode is not None
    text = err.decode()
    report = [line for line in text.splitlines() if line.startswith("loaded: ")]
    assert report, f"no report from the probe of {args}: {text[-2000:]}"
    return proc.returncode, out.decode(), text, json.loads(report[-1].removeprefix("loaded: "))


@pytest.mark.slow
async def test_commands_that_run_no_agent_import_no_agent_framework(tmp_path: Path) -> None:
    env = coach_env(tmp_path, COACH_LLM_BASE_URL="http://127.0.0.1:9/v1")
    code, _, err = await coach("db", "upgrade", env=env)
    assert code == 0, err
    session_id = await fill(env["COACH_DATABASE_URL"])
    no_llm = {k: v for k, v in env.items() if k != "COACH_LLM_BASE_URL"}
    cases: list[tuple[tuple[str, ...], dict[str, str], int, str, set[str]]] = [
        # (arguments, environment, exit code, a line it prints, what of WATCHED it may load)
        (("--help",), env, 0, "usage:", set()),
        (("sessions", "list"), env, 0, session_id, DATABASE),
        (("sessions", "show", session_id), env, 0, "## deltas", DATABASE),
        (("sessions", "show", "0" * 32), env, 2, "not found", DATABASE),
        (("users", "show", "olga"), env, 0, "olga", DATABASE),
        (("db", "upgrade"), env, 0, "database is up to date", MIGRATES),
        (("keys", "new"), env, 0, "", SETTINGS),
        (("token", "--identity", "ada"), {**env, **LIVEKIT, **LIVEKIT_SECRET}, 0, ".", SIGNS),
        (("token", "--identity", "ada"), env, 2, "`token` needs LIVEKIT_API_KEY", SETTINGS),
        (("web",), env, 2, "`web` needs LIVEKIT_URL", SETTINGS),
        (("web", "--port", "0"), env, 2, "a port is a number", SETTINGS),
        (("chat",), no_llm, 2, "No LLM configured", SETTINGS),
        (("chat", "--user", " ada"), env, 2, "must not start or end with a space", SETTINGS),
        (
            ("sessions", "list"),
            {**env, "COACH_DATABASE_URL": "bogus://x"},
            2,
            "invalid setting",
            SETTINGS,
        ),
        (("sessions", "list"), {**env, "COACH_DB_POOL_SIZE": "0"}, 2, "invalid setting", SETTINGS),
        (("dev",), no_llm, 2, "No LLM configured", SETTINGS),
        (("dev",), env, 2, "`dev` needs the LiveKit server", SETTINGS),
        (("connect",), {**env, **LIVEKIT}, 2, "LIVEKIT_API_SECRET", SETTINGS),
        (("frobnicate",), env, 2, "invalid choice", set()),
    ]
    at_once = asyncio.Semaphore(4)  # the processes are independent: overlap them

    async def one(
        args: tuple[str, ...], case_env: dict[str, str]
    ) -> tuple[int, str, str, list[str]]:
        async with at_once:
            return await probe(*args, env=case_env)

    results = await asyncio.gather(*(one(case[0], case[1]) for case in cases))

    wrong = []
    for (args, _, want_code, says, may), (code, out, err, loaded) in zip(
        cases, results, strict=True
    ):
        if code != want_code or says.lower() not in (out + err).lower():
            wrong.append(f"{args}: exit {code}, printed {(out + err)[-600:]!r}")
        heavy = [m for m in loaded if m not in may]
        if heavy:
            wrong.append(f"{args} imported {', '.join(heavy)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
async def test_a_text_chat_imports_no_voice_plugin(tmp_path: Path) -> None:
    async with FakeOpenAIServer([say("Hi! I'm your design coach.")]) as server:
        env = coach_env(tmp_path, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        code, _, err = await coach("db", "upgrade", env=env)
        assert code == 0, err
        code, out, err, loaded = await probe("chat", "--user", "ada", env=env)
    assert code == 0, err
    assert "coach> Hi! I'm your design coach." in out.splitlines()
    # The agent framework and the OpenAI plugin, not the VAD; and Alembic not at all on a
    # database already migrated.
    assert [m for m in loaded if m in (*AGENT, "alembic")] == [
        "livekit.agents",
        "livekit.plugins.openai",
    ]


def test_the_worker_still_registers_every_plugin_it_uses() -> None:
    # LiveKit knows a plugin by its import: download-files and the job processes' preload
    # go by Plugin.registered_plugins.
    code = (
        "import coach.models, coach.surfaces.worker\n"
        "from livekit.agents import Plugin\n"
        "from livekit.plugins import openai\n"
        "import livekit.plugins.openai.llm as llm\n"
        "assert llm is coach.models.openai_llm and openai.llm is llm\n"
        "assert issubclass(coach.models.ChatModel, openai.LLM)\n"
        "print(sorted(p.package for p in Plugin.registered_plugins))\n"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split("\n")[0] == "['livekit.plugins.openai', 'livekit.plugins.silero']"
