"""The cyclic garbage collector around a command (``coach.__main__``): off while the
command starts (argparse, the settings, its imports), on for its work with what start-up
built frozen out of it (:func:`gc.freeze`), and a caller's collector left as it was
found, whether the command worked or stopped at start-up."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

import coach.settings
import coach.surfaces.token
from coach.__main__ import main


@pytest.fixture
def collector() -> Iterator[int]:
    """The collector on and what was frozen before the test (restored after it)."""
    enabled = gc.isenabled()
    gc.enable()
    yield gc.get_freeze_count()
    gc.unfreeze()
    if not enabled:
        gc.disable()


def test_a_command_starts_without_the_collector_and_works_with_it(
    collector: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, tuple[bool, int]] = {}
    load_settings = coach.settings.load_settings

    def loading() -> coach.settings.Settings:  # start-up
        seen["start-up"] = (gc.isenabled(), gc.get_freeze_count())
        return load_settings()

    def make_token(settings: Any, identity: str, room: str, *, name: str | None) -> str:  # work
        seen["work"] = (gc.isenabled(), gc.get_freeze_count())
        return f"token for {identity} in {room}"

    monkeypatch.setattr(coach.settings, "load_settings", loading)
    monkeypatch.setattr(coach.surfaces.token, "make_token", make_token)

    assert main(["token", "--identity", "ada"]) == 0

    assert capsys.readouterr().out == "token for ada in coach\n"
    assert seen["start-up"] == (False, collector)
    enabled, frozen = seen["work"]
    assert enabled and frozen > collector  # start-up's objects: out of the work's collections
    assert gc.isenabled() and gc.get_freeze_count() == collector  # as it was found


def test_a_command_that_stops_at_start_up_leaves_the_collector_as_it_was(
    collector: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COACH_DATABASE_URL", "bogus://x")

    assert main(["sessions", "list"]) == 2

    assert capsys.readouterr().err.startswith("coach: ")
    assert gc.isenabled() and gc.get_freeze_count() == collector


def test_a_caller_without_the_collector_gets_it_back_off(
    collector: int, capsys: pytest.CaptureFixture[str]
) -> None:
    gc.disable()

    assert main(["keys", "new"]) == 0

    assert len(capsys.readouterr().out.strip()) >= 43  # 32 random bytes, base64
    assert not gc.isenabled() and gc.get_freeze_count() == collector
