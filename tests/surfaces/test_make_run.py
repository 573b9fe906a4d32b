"""``make run COACH_USER=...`` hands the name to ``coach chat`` as one argument, verbatim."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NAMES = {
    "plain": "ada",
    "spaces": "Ada Lovelace",
    "single quote": "o'brien",
    "double quotes": 'Ada "the Countess"',
    "shell characters": "a$b $(id) `id` ;|&#*",
    "make characters": "$(PY) ) , \\",
}


def make_run(tmp_path: Path, *assignments: str) -> list[str]:
    """The arguments ``make run`` passes to Python (a stand-in that prints them)."""
    argv_printer = tmp_path / "python"
    argv_printer.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    argv_printer.chmod(0o755)
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "run", "STAMP=", f"PY={argv_printer}", *assignments],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_coach_user_is_one_argument_taken_literally(tmp_path: Path, name: str) -> None:
    assert make_run(tmp_path, f"COACH_USER={name}") == ["-m", "coach", "chat", "--user", name]


def test_without_coach_user_no_user_is_passed(tmp_path: Path) -> None:
    assert make_run(tmp_path) == ["-m", "coach", "chat"]
    assert make_run(tmp_path, "COACH_USER=") == ["-m", "coach", "chat"]


PYTEST = "-m pytest -q -n auto --dist worksteal"
"""The Python suite, on every core."""


def make_test(tmp_path: Path, chromium: str) -> subprocess.CompletedProcess[str]:
    """``make test`` with stand-ins for npm and Python that log how they were called."""
    log = tmp_path / "calls"
    stand_in = tmp_path / "stand-in"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    stand_in.chmod(0o755)
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), "test", "STAMP=", "WEB_STAMP="]
        + [f"PY={stand_in}", f"NPM={stand_in}", f"CHROMIUM={chromium}"],
        # As a person runs it, not as a recipe of an outer make (CI runs the suite so).
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_test_without_chromium_says_so_once_and_still_runs_python(tmp_path: Path) -> None:
    done = make_test(tmp_path, str(tmp_path / "no-chromium"))
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["run --prefix web --silent test:unit", PYTEST]
    # make's own failure line aside ("make: ***", or "make[2]: ***" under another make).
    (line,) = [x for x in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", x)]
    assert "no Chromium at" in line and "apt-get install chromium" in line
    assert done.returncode != 0  # the browser tests did not run: not a pass


def test_make_test_with_chromium_runs_all_three(tmp_path: Path) -> None:
    done = make_test(tmp_path, "/bin/true")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        "run --prefix web --silent test:unit",
        "run --prefix web --silent test:browser",
        PYTEST,
    ]
    assert (done.returncode, done.stderr) == (0, "")
