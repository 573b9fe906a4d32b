"""`make demo` as a newcomer runs it: the real demo command in a process, twice in a row,
each run two real `python -m coach chat` processes against the fake OpenAI server."""

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coach.persistence import open_repository
from coach.persistence.crypto import MasterKeys
from coach.testing import DEMO_VISITS
from coach.testing.demo import (
    DEMO_MASTER_KEY,
    DEMO_SECRET,
    MARKER,
    DemoError,
    reset_database,
    this_python,
)

ROOT = Path(__file__).resolve().parents[2]
VISITS = DEMO_VISITS
RUN_TIMEOUT = 240
"""Seconds one whole demo run may take (two chats and a listing) on a loaded machine."""


async def demo(directory: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coach",
        "demo",
        "--dir",
        str(directory),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def selected_session(out: str) -> str:
    (session_id,) = re.findall(r'⚙ select_session_to_load\(\{"session_id": "([0-9a-f]{32})"\}', out)
    return str(session_id)


def normalised(out: str, session_id: str) -> str:
    out = out.replace(session_id, "<session>")
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "<time>", out)


@pytest.mark.slow
async def test_the_demo_twice_in_a_row_resumes_the_first_visit_each_time(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    runs = [await demo(directory), await demo(directory)]
    for code, out, err in runs:
        assert code == 0, err
        assert "demo:" not in err and "Traceback" not in err, err
        visits = out.split("\n=== ")
        assert [v.splitlines()[0] for v in visits[1:]] == [
            "First visit: Ada is new, states her challenge, finishes Empathize, starts Define",
            "$ python -m coach chat --user ada",
            "Second visit: a new process; Ada continues where she stopped",
            "$ python -m coach chat --user ada",
            "What is stored",
            "$ python -m coach sessions list --user ada",
        ]
        second = visits[4]
        assert "⚙ load_selected_session({}) → ok" in second
        assert "↪ handoff: design_coach → design_strategist" in second
        # Read by the fake model from the second visit's requests: the stored progress,
        # and the first visit's words in the strategist's restored context.
        assert "Your onboarding redesign is in progress, 2 of 6 phases done." in second
        assert (
            'We are in Define; you framed the problem as "How might we make linking a bank '
            'feel safe?"' in second
        )

    # Each run starts from an empty demo database and tells the same story.
    first_id, second_id = (selected_session(out) for _, out, _ in runs)
    assert first_id != second_id
    assert normalised(runs[0][1], first_id) == normalised(runs[1][1], second_id)

    repo = await open_repository(
        f"sqlite+aiosqlite:///{directory / 'coach.db'}",
        secret=DEMO_SECRET.encode(),
        master_keys=MasterKeys.of(DEMO_MASTER_KEY),
    )
    try:
        # One session, no duplicate: the second visit continued the one the first created.
        (session,) = await repo.list_sessions()
        assert session.id == second_id
        assert session.status == "in_progress" and session.completed_phases == 3
        user = await repo.find_user("ada")
        assert user is not None and session.user_id == user.id
        said = [m.content for m in await repo.get_session_conversation(session.id)]
        assert said.index("The onboarding of my budgeting app") < said.index(
            "Most new users link a bank in their first week"
        )
        outputs = {o.phase_id: o.status for o in await repo.get_phase_outputs(session.id)}
        assert outputs["empathize"] == outputs["define"] == "completed"
        assert outputs["ideate"] == "running"
        # Memory steps of both visits are stored and verify with the demo's key.
        assert len(await repo.load_agent_state(session.id)) > 20
    finally:
        await repo.aclose()
    last_listing = runs[1][1].split("sessions list --user ada\n", 1)[1].splitlines()[0]
    assert last_listing.startswith(f"{second_id}  in_progress  3/6  ")


@pytest.mark.slow
async def test_a_model_that_runs_out_of_replies_stops_the_demo_with_one_line(
    tmp_path: Path,
) -> None:
    # The last reply also calls a tool, so the agent asks the model once more than scripted.
    script = VISITS.read_text().replace(
        "          - say: Define is done, three of six phases. Next time we ideate.\n",
        "          - say: Define is done, three of six phases. Next time we ideate.\n"
        "            call: add_idea\n"
        "            args: {title: Demo account, description: Try it with sample data.}\n",
    )
    assert script != VISITS.read_text()
    (tmp_path / "short.yaml").write_text(script)
    code, out, err = await demo(tmp_path / "demo", "--script", str(tmp_path / "short.yaml"))
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("demo: "), err
    assert "script exhausted: all 17 scripted replies were used" in err
    assert "Most new users link a bank in their first week" in err


@pytest.mark.slow
async def test_a_request_without_what_the_script_reads_stops_the_demo_at_once(
    tmp_path: Path,
) -> None:
    # The second greeting reads the progress in words the coach never uses: the chat
    # itself keeps waiting for input, the demo must not.
    script = VISITS.read_text().replace(r"(\d+ of \d+ phases done)", r"(\d+ out of \d+ phases)")
    assert script != VISITS.read_text()
    (tmp_path / "mismatch.yaml").write_text(script)
    code, out, err = await demo(
        tmp_path / "demo", "--script", str(tmp_path / "mismatch.yaml"), "--timeout", "200"
    )
    assert code == 1
    assert err.count("\n") == 1, err
    # Not "said nothing for 200 s": it stopped on the model's error, not on its timeout.
    assert err.startswith("demo: the fake model could not answer: scripted reply #11 reads")
    assert out.rstrip().endswith("=== $ python -m coach chat --user ada")


def test_the_demo_never_empties_a_database_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "coach.db").write_bytes(b"someone's sessions")
    with pytest.raises(DemoError, match="was not created by the demo"):
        reset_database(tmp_path)
    assert (tmp_path / "coach.db").read_bytes() == b"someone's sessions"

    mine = tmp_path / "mine"
    assert reset_database(mine) == mine / "coach.db"
    (mine / "coach.db").write_bytes(b"a demo run")
    (mine / "coach.db-wal").write_bytes(b"a demo run")
    reset_database(mine)
    assert sorted(p.name for p in mine.iterdir()) == sorted([MARKER, ".gitignore"])


def test_make_demo_runs_the_demo_command_in_its_directory(tmp_path: Path) -> None:
    made = subprocess.run(
        ["make", "-n", "demo", f"DEMO_DIR={tmp_path}/d"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"-m coach demo --dir '{tmp_path}/d'" in made.stdout


def test_the_command_to_read_the_demo_names_this_interpreter_as_typed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(sys, "executable", str(checkout / ".venv" / "bin" / "python"))
    assert this_python() == ".venv/bin/python"  # a checkout: as the README types it
    elsewhere = tmp_path / "my env" / "bin" / "python"  # beside the checkout, not in it
    monkeypatch.setattr(sys, "executable", str(elsewhere))
    assert this_python() == f"'{elsewhere}'"  # installed elsewhere: its path, quoted
