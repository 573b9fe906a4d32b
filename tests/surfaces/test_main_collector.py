"""The cyclic garbage collector around a command (``coach.__main__``): off while the
command starts (argparse, the settings, its imports), on for its work with what start-up
built frozen out of it (:func:`gc.freeze`), and a caller's collector left as it was
found, whether the command worked or stopped at start-up, and a caller's frozen objects
left frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

import coach.settings
import coach.surfaces.token
from coach.__main__ import main


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on and nothing frozen, as a process starts (restored after)."""
    enabled = gc.isenabled()
    gc.unfreeze()
    gc.enable()
    yield
    gc.unfreeze()
    if not enabled:
        gc.disable()


def test_a_command_starts_without_the_collector_and_works_with_it(
    collector: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
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
    assert seen["start-up"] == (False, 0)
    enabled, frozen = seen["work"]
    assert enabled and frozen > 0  # start-up's objects: out of the work's collections
    assert gc.isenabled() and gc.get_freeze_count() == 0  # as it was found


def test_a_command_that_stops_at_start_up_leaves_the_collector_as_it_was(
    collector: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COACH_DATABASE_URL", "bogus://x")

    assert main(["sessions", "list"]) == 2

    assert capsys.readouterr().err.startswith("coach: ")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_caller_without_the_collector_gets_it_back_off(
    collector: None, capsys: pytest.CaptureFixture[str]
) -> None:
    gc.disable()

    assert main(["keys", "new"]) == 0

    assert len(capsys.readouterr().out.strip()) >= 43  # 32 random bytes, base64
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def test_a_caller_that_froze_objects_keeps_them_frozen(
    collector: None, capsys: pytest.CaptureFixture[str]
) -> None:
    gc.freeze()  # all the caller's objects so far
    frozen = gc.get_freeze_count()

    assert main(["keys", "new"]) == 0

    assert capsys.readouterr().out.strip()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
