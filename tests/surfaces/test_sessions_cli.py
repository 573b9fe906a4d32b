"""`python -m coach sessions ...` on a database a scripted conversation filled."""

import asyncio
import json
import os
import sys
from pathlib import Path

from coach.conversation.runtime import Runtime
from coach.settings import Settings
from coach.testing import ScriptedLLM, call, say

from .test_chat_cli import SECRET, coach, coach_env


async def fill(url: str) -> str:
    runtime = await Runtime.open(Settings(database_url=url, secret_key=SECRET))
    try:
        userdata = runtime.new_userdata(identity="olga")
        model = ScriptedLLM([say("Hi!")])
        session = runtime.new_session(userdata, llm=model)
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        model.extend(
            [
                call("capture_design_challenge", challenge="A calmer checkout"),
                call("transfer_to_strategist"),
                say("Strategist here."),
            ]
        )
        await session.run(user_input="A calmer checkout")
        model.extend([call("add_insight", text="Timers cause stress"), say("Noted.")])
        await session.run(user_input="Timers stress people")
        await session.aclose()
        assert userdata.session_id is not None
        return userdata.session_id
    finally:
        await runtime.aclose()


async def test_show_list_and_export(tmp_path: Path) -> None:
    env = coach_env(tmp_path)
    code, _, err = await coach("db", "upgrade", env=env)
    assert code == 0, err
    session_id = await fill(env["COACH_DATABASE_URL"])

    code, out, err = await coach("sessions", "show", session_id, "--steps", env=env)
    assert code == 0, err
    assert "challenge: A calmer checkout" in out
    assert out.splitlines()[0].endswith("  user 'olga'")  # the identity, not its id
    assert "tool ⚙ add_insight" in out and "handoff ↪ design_coach → design_strategist" in out
    assert '"text": "Timers cause stress"' in out  # the data zone
    delta_lines = [line for line in out.split("## deltas")[1].splitlines() if line.strip()]
    assert any("data.insights" in line and "add_insight" in line for line in delta_lines)
    assert [int(line.split()[0]) for line in delta_lines] == list(range(1, len(delta_lines) + 1))

    code, out, _ = await coach("sessions", "list", "--user", "olga", env=env)
    assert code == 0 and out.startswith(session_id) and "A calmer checkout" in out
    code, out, _ = await coach("sessions", "list", "--user", "nobody", env=env)
    assert code == 0 and out.strip().startswith("no sessions of 'nobody' in sqlite")

    code, out, err = await coach("sessions", "export", session_id, env=env)
    assert code == 0, err
    document = json.loads(out)
    assert document["session"]["id"] == session_id
    assert [d["step"] for d in document["deltas"]] == list(range(1, document["state"]["step"] + 1))
    assert document["state"]["data"]["insights"][0]["text"] == "Timers cause stress"


async def test_unknown_session_is_one_clear_line(tmp_path: Path) -> None:
    env = coach_env(tmp_path)
    assert (await coach("db", "upgrade", env=env))[0] == 0
    code, out, err = await coach("sessions", "show", "f" * 32, env=env)
    assert (code, out) == (2, "")
    assert err == f"coach: Session {'f' * 32} not found\n"


async def test_a_reader_that_goes_away_ends_the_listing_quietly(tmp_path: Path) -> None:
    # `sessions list | head`: the reader closed its end before coach wrote a line.
    env = coach_env(tmp_path)
    code, _, err = await coach("db", "upgrade", env=env)
    assert code == 0, err
    read, write = os.pipe()
    os.close(read)
    try:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "coach", "sessions", "list"),
            stdout=write,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    finally:
        os.close(write)
    _, raw_err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert b"Traceback" not in raw_err
    assert proc.returncode == 0, raw_err.decode()


async def test_branch_from_the_command_line_and_the_tree_in_the_listing(tmp_path: Path) -> None:
    env = coach_env(tmp_path)
    assert (await coach("db", "upgrade", env=env))[0] == 0
    session_id = await fill(env["COACH_DATABASE_URL"])  # the challenge is completed

    code, out, err = await coach("sessions", "branch", session_id, "--from", "challenge", env=env)
    assert code == 0, err
    branch_id, rest = out.split(maxsplit=1)
    assert f"branch of {session_id} from challenge; next phase empathize" in rest

    code, out, _ = await coach("sessions", "list", "--user", "olga", env=env)
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [session_id, branch_id]  # under its parent
    assert "  ↳ from challenge: A calmer checkout" in lines[1]

    for phase, words in [("empathize", "not completed"), ("nonsense", "no phase called")]:
        code, out, err = await coach("sessions", "branch", session_id, "--from", phase, env=env)
        assert code == 2 and out == "" and words in err and err.count("\n") == 1
    code, _, err = await coach("sessions", "branch", "f" * 32, "--from", "challenge", env=env)
    assert code == 2 and "not found" in err


async def test_erasing_from_the_command_line_asks_first_and_says_what_went(
    tmp_path: Path,
) -> None:
    env = coach_env(tmp_path)
    assert (await coach("db", "upgrade", env=env))[0] == 0
    first = await fill(env["COACH_DATABASE_URL"])
    second = await fill(env["COACH_DATABASE_URL"])

    # Without --yes and without a terminal to ask on, nothing goes.
    code, out, err = await coach("users", "delete", "olga", env=env)
    assert (code, out) == (2, "") and "Nothing was erased" in err
    code, out, _ = await coach("sessions", "prune", "--older-than", "0", "--dry-run", env=env)
    assert code == 0 and f"would erase {first}" in out and "would erase 2 session(s)" in out
    code, out, _ = await coach("sessions", "list", "--user", "olga", env=env)
    assert {line.split()[0] for line in out.splitlines()} == {first, second}

    code, out, err = await coach("sessions", "delete", first, "--yes", env=env)
    assert (code, out.strip()) == (0, f"erased session {first}"), err
    code, out, err = await coach("users", "delete", "olga", "--yes", env=env)
    assert (code, out.strip()) == (0, "erased user 'olga' and 1 session(s)"), err
    code, out, _ = await coach("sessions", "list", env=env)
    assert out.strip().startswith("no sessions in sqlite")
    code, _, err = await coach("users", "delete", "olga", "--yes", env=env)
    assert code == 2 and "No user with identity 'olga'" in err
    code, _, err = await coach("sessions", "prune", "--older-than", "-1", env=env)
    assert code == 2 and err.count("\n") == 1


async def test_db_upgrade_says_one_line_per_migration(
    tmp_path: Path, blank_database_url: str
) -> None:
    env = coach_env(tmp_path, COACH_DATABASE_URL=blank_database_url)
    code, out, err = await coach("db", "upgrade", env=env)
    assert (code, out) == (0, "database is up to date\n"), err
    steps = [line for line in err.splitlines() if "Running upgrade" in line]
    assert len(steps) >= 6 and any(line.endswith(" ...") for line in steps)
    # Every line is a log record of its own: no docstring spills over several lines.
    assert all(line[:4].isdigit() for line in err.splitlines()), err


async def test_export_of_a_person_is_their_sessions_and_what_is_remembered(
    tmp_path: Path,
) -> None:
    env = coach_env(tmp_path)
    assert (await coach("db", "upgrade", env=env))[0] == 0
    session_id = await fill(env["COACH_DATABASE_URL"])

    code, out, err = await coach("sessions", "export", "--user", "olga", env=env)
    assert code == 0, err
    document = json.loads(out)
    assert document["user"]["identity"] == "olga"
    assert document["person"]["step"] == 0 and document["person_deltas"] == []
    (session,) = document["sessions"]
    code, single, _ = await coach("sessions", "export", session_id, env=env)
    assert session == json.loads(single)  # each session as `sessions export ID` gives it

    for args in (["--user", "nobody"], [], [session_id, "--user", "olga"]):
        code, out, err = await coach("sessions", "export", *args, env=env)
        assert (code, out) == (2, ""), args
        assert err.startswith("coach: ") and err.count("\n") == 1


async def test_an_export_that_names_nothing_stops_before_the_database_is_opened(
    tmp_path: Path,
) -> None:
    env = coach_env(tmp_path)

    code, out, err = await coach("sessions", "export", env=env)

    assert (code, out) == (2, "")
    assert err == "coach: sessions export takes a session id or --user IDENTITY (one).\n"
    assert not (tmp_path / "chat.db").exists()  # nothing created, nothing migrated
