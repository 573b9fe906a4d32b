"""``make run COACH_USER=...`` hands the name to ``coach chat`` as one argument, verbatim."""

from __future__ import annotations

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
