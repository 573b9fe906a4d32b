"""`python -m coach chat` as a user runs it: a real process, the real openai plugin,
the local fake OpenAI server, a real SQLite file."""

import asyncio
import io
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from coach.persistence import open_repository
from coach.settings import Settings
from coach.surfaces.chat import run_chat
from coach.testing import DEMO_SCRIPT, FakeOpenAIServer, ScriptedLLM, load_script, say
from tests.processes import GRACE, running
from tests.support import key_env, keys_of

ROOT = Path(__file__).resolve().parents[2]
DEMO = DEMO_SCRIPT
SECRET = "chat-test-secret-0123456789"


def coach_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
    env.update(
        XDG_DATA_HOME=str(tmp_path / "data"),
        HOME=str(tmp_path),
        COACH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}",
        COACH_SECRET_KEY=SECRET,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    env.update(key_env(env["COACH_DATABASE_URL"]))
    return env


async def coach(*args: str, env: dict[str, str], stdin: str | bytes = "") -> tuple[int, str, str]:
    async with running(
        sys.executable,
        *("-m", "coach", *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_cwd(env),
    ) as proc:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        out, err = await asyncio.wait_for(proc.communicate(data), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def tmp_cwd(env: dict[str, str]) -> str:
    # Run outside the checkout so a developer's .env cannot leak into the test.
    return env["HOME"]


@pytest.mark.slow
async def test_chat_runs_the_conversation_against_the_real_openai_plugin(tmp_path: Path) -> None:
    async with FakeOpenAIServer(load_script(DEMO)) as server:
        env = coach_env(tmp_path, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        code, out, err = await coach("db", "upgrade", env=env)
        assert code == 0, err
        turns = "I'm Ada\nOnboarding for my budgeting app\nThey quit at bank linking\n"
        code, out, err = await coach("chat", "--user", "ada", env=env, stdin=turns)
        assert server.script.remaining == 0

    assert code == 0, err
    lines = out.splitlines()
    replies = [line for line in lines if line.startswith("coach> ")]
    assert replies == [
        "coach> Hi! I'm your design coach. What's your name?",
        "coach> Nice to meet you, Ada. What would you like to design or redesign?",
        "coach> I'm the Design Strategist. Who are the people who give up during onboarding?",
        "coach> Empathize is done. Now, how might we phrase the problem?",
    ]
    tool_lines = [line.strip() for line in lines if "⚙" in line]
    assert [t.split("(")[0] for t in tool_lines] == [
        "⚙ identify_user",
        "⚙ capture_design_challenge",
        "⚙ transfer_to_strategist",
        "⚙ complete_phase",
    ]
    assert all(t.endswith("→ ok") for t in tool_lines)
    assert any("handoff: design_coach → design_strategist" in line for line in lines)
    assert "\033[" not in out  # no colour codes when stdout is not a terminal

    # The tools really ran against the real model plugin: the server saw the tool outputs.
    assert any(m.get("role") == "tool" for m in server.requests[-1]["messages"])

    repo = await open_repository(
        env["COACH_DATABASE_URL"], **keys_of(env["COACH_DATABASE_URL"]), secret=SECRET.encode()
    )
    try:
        user = await repo.get_or_create_user("ada")
        sessions = await repo.get_user_sessions(user.id)
        assert [s.design_challenge for s in sessions] == [
            "Redesign the onboarding of a budgeting app so new users finish setup."
        ]
        outputs = {o.phase_id: o for o in await repo.get_phase_outputs(sessions[0].id)}
        assert outputs["challenge"].status == "completed"
        assert outputs["empathize"].status == "completed"
        assert (
            outputs["empathize"].system_prompt
            and "Current phase: Empathize" in outputs["empathize"].system_prompt
        )
        assert outputs["define"].status == "running"
        conversation = await repo.get_session_conversation(sessions[0].id)
        assert [m.role for m in conversation][:2] == ["assistant", "user"]
        assert conversation[1].content == "I'm Ada"
    finally:
        await repo.aclose()


async def test_chat_without_llm_configuration_says_so_in_one_line(tmp_path: Path) -> None:
    code, out, err = await coach("chat", env=coach_env(tmp_path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "OPENAI_API_KEY" in err and "COACH_LLM_BASE_URL" in err
    assert "Traceback" not in err


async def test_broken_prompt_file_stops_start_up_with_file_key_reason(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for f in (ROOT / "prompts").glob("*.yaml"):
        (prompts / f.name).write_text(f.read_text())
    (prompts / "design_evaluator.yaml").write_text("instructions: Hello {nobody}\ngreeting: hi\n")
    env = coach_env(
        tmp_path, COACH_PROMPTS_DIR=str(prompts), COACH_LLM_BASE_URL="http://127.0.0.1:9/v1"
    )
    code, _, err = await coach("start", env=env)
    assert code == 2
    assert "design_evaluator.yaml: instructions: unknown variable(s) nobody" in err
    assert "Traceback" not in err


async def test_help_lists_every_command(tmp_path: Path) -> None:
    code, out, _ = await coach("--help", env=coach_env(tmp_path))
    assert code == 0
    for command in ("chat", "dev", "start", "console", "connect", "download-files", "db", "token"):
        assert f"    {command}" in out


@pytest.mark.slow
async def test_a_second_chat_with_the_same_user_continues_the_session(tmp_path: Path) -> None:
    async with FakeOpenAIServer(load_script(DEMO)) as server:
        env = coach_env(tmp_path, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        assert (await coach("db", "upgrade", env=env))[0] == 0
        turns = "I'm Ada\nOnboarding for my budgeting app\nThey quit at bank linking\n"
        code, _, err = await coach("chat", "--user", "ada", env=env, stdin=turns)
        assert code == 0, err

        repo = await open_repository(
            env["COACH_DATABASE_URL"], **keys_of(env["COACH_DATABASE_URL"]), secret=SECRET.encode()
        )
        try:
            user = await repo.get_or_create_user("ada")
            (session,) = await repo.get_user_sessions(user.id)
        finally:
            await repo.aclose()

        server.extend(
            load_script(f"""
- say: Welcome back Ada! Shall we continue your onboarding redesign?
- call: select_session_to_load
  args: {{session_id: {session.id}}}
- say: Ready when you are. Say continue.
- call: load_selected_session
- say: Welcome back. We finished Empathize; now let's define the problem.
""")
        )
        code, out, err = await coach(
            "chat", "--user", "ada", env=env, stdin="yes please\ncontinue\n"
        )
        assert server.script.remaining == 0
    assert code == 0, err
    assert "⚙ select_session_to_load" in out and "⚙ load_selected_session" in out
    assert "handoff: design_coach → design_strategist" in out
    assert out.rstrip().endswith(
        "coach> Welcome back. We finished Empathize; now let's define the problem."
    )
    # The first request of the second visit already offered the stored session.
    first = server.requests[-5]
    offered = json.dumps(first["messages"])
    assert session.id in offered and "2 of 6 phases done" in offered
    # The strategist's request carries the first visit's conversation.
    resumed = json.dumps(server.requests[-1]["messages"])
    assert "They quit at bank linking" in resumed and "Current phase: Define" in resumed


@pytest.mark.slow
async def test_ctrl_c_while_waiting_for_input_exits_cleanly(tmp_path: Path) -> None:
    async with FakeOpenAIServer([say("Hello there!")]) as server:
        env = coach_env(tmp_path, COACH_LLM_BASE_URL=server.base_url, COACH_LLM_MODEL="fake")
        assert (await coach("db", "upgrade", env=env))[0] == 0
        async with running(
            sys.executable,
            *("-m", "coach", "chat", "--user", "zed"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp_cwd(env),
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
            greeting = await asyncio.wait_for(proc.stdout.readline(), GRACE)
            assert greeting == b"coach> Hello there!\n"
            # Its answer shows the line was read: the chat waits at the prompt again.
            proc.stdin.write(b"/steps\n")
            note = await asyncio.wait_for(proc.stdout.readline(), GRACE)
            assert b"hidden (/steps toggles)" in note
            proc.send_signal(signal.SIGINT)  # stdin stays open: the REPL is blocked reading it
            code = await asyncio.wait_for(proc.wait(), GRACE)
            err = (await proc.stderr.read()).decode()
    assert code == 0
    assert "Traceback" not in err


@pytest.mark.parametrize("word", ["quit", "exit", "/quit", "EXIT"])
async def test_a_quit_word_ends_the_chat_and_never_reaches_the_model(
    tmp_path: Path, word: str
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'quit.db'}",
        secret_key=SECRET,
        llm_base_url="http://127.0.0.1:9/v1",
    )
    model = ScriptedLLM([say("Hi! What's your name?")])  # no reply for a second turn
    out = io.StringIO()
    lines = io.StringIO(f"{word}\nthis must never be sent\n")
    code = await run_chat(settings, user="quitter", chat_llm=model, stdin=lines, stdout=out)
    assert code == 0
    assert out.getvalue() == "coach> Hi! What's your name?\n"


async def test_any_sqlite_file_is_migrated_when_first_used(tmp_path: Path) -> None:
    # Not the default path: still embedded and single-worker, so no `db upgrade` step.
    env = coach_env(tmp_path, COACH_DATABASE_URL=f"sqlite:///{tmp_path / 'elsewhere.db'}")
    code, out, err = await coach("sessions", "list", env=env)
    assert (code, out.strip()) == (0, f"no sessions in sqlite:///{tmp_path / 'elsewhere.db'}"), err


@pytest.mark.postgres
@pytest.mark.parametrize("command", [("chat",), ("sessions", "list")])
async def test_an_unmigrated_database_stops_at_start_naming_db_upgrade(
    tmp_path: Path, blank_postgres_url: str, command: tuple[str, ...]
) -> None:
    env = coach_env(
        tmp_path, COACH_DATABASE_URL=blank_postgres_url, COACH_LLM_BASE_URL="http://127.0.0.1:9/v1"
    )
    code, out, err = await coach(*command, env=env, stdin="hello\n")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "python -m coach db upgrade" in err, err
    assert "not migrated" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [("chat",), ("sessions", "list")])
async def test_an_unreachable_database_is_one_line_at_start(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = coach_env(
        tmp_path,
        COACH_DATABASE_URL="postgresql://coach@127.0.0.1:1/nowhere",
        COACH_LLM_BASE_URL="http://127.0.0.1:9/v1",
    )
    code, out, err = await coach(*command, env=env, stdin="hello\n")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "reading the database failed" in err, err
    assert "Traceback" not in err


@pytest.mark.postgres
async def test_db_upgrade_of_a_missing_database_says_why_in_one_line(tmp_path: Path) -> None:
    env = coach_env(
        tmp_path, COACH_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/coach_no_such_db"
    )
    code, out, err = await coach("db", "upgrade", env=env)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and 'database "coach_no_such_db" does not exist' in err, err


@pytest.mark.parametrize(
    "argv", [("nonsense",), ("sessions",), ("sessions", "show", "-x"), ("chat", "--user")]
)
async def test_a_usage_error_is_one_line(tmp_path: Path, argv: tuple[str, ...]) -> None:
    code, out, err = await coach(*argv, env=coach_env(tmp_path))
    assert (code, out) == (2, "")
    assert err.startswith("coach: ") and err.endswith("(see --help)\n") and err.count("\n") == 1
    assert "usage:" not in err


class EndOfTurnModel:
    """Stands in for LiveKit's local end-of-turn model (``livekit.local_inference.EOT``):
    the real one costs ~0.16 s of CPU and ~240 MB of memory to load. Each one made is
    counted in :attr:`loaded`."""

    loaded: list["EndOfTurnModel"] = []

    def __init__(self) -> None:
        self.loaded.append(self)


async def test_a_text_chat_loads_no_end_of_turn_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Typed turns end when the line does: a model that listens for the end of speech
    # would only cost the chat its memory and its start.
    from livekit.agents.inference.eot import transports

    monkeypatch.setattr(transports, "_EOT", EndOfTurnModel)
    monkeypatch.setattr(EndOfTurnModel, "loaded", [])
    # LiveKit's default is the local model unless these point it at a remote one.
    monkeypatch.delenv("LIVEKIT_DEV_MODE", raising=False)
    monkeypatch.delenv("LIVEKIT_REMOTE_EOT_URL", raising=False)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'typed.db'}",
        secret_key=SECRET,
        llm_base_url="http://127.0.0.1:9/v1",
    )
    model = ScriptedLLM([say("Hi! What's your name?"), say("Nice to meet you, Ada.")])
    out = io.StringIO()
    code = await run_chat(
        settings, user="ada", chat_llm=model, stdin=io.StringIO("Ada\n"), stdout=out
    )
    assert code == 0
    assert out.getvalue() == "coach> Hi! What's your name?\ncoach> Nice to meet you, Ada.\n"
    assert EndOfTurnModel.loaded == []
