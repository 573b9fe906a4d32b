"""The bench's instruction counts: the timed loop alone, the same figure each time."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.instructions import build_helper, count, main


def test_a_count_repeats_and_grows_with_the_work(tmp_path: Path) -> None:
    helper = build_helper(tmp_path)
    empty = [count("unit", 5, tmp_path, helper) for _ in range(2)]
    written = count("coach", 5, tmp_path, helper)
    assert abs(empty[0] - empty[1]) < 0.02 * empty[0]  # the same work, the same count
    assert written > 2 * empty[0] > 0  # a turn's write: all an empty unit does, and more


@pytest.mark.parametrize("sessions", [50, 1])
def test_the_recorders_batch_path_counts_coach_over_raw(tmp_path: Path, sessions: int) -> None:
    helper = build_helper(tmp_path)
    raw = count("recorder_raw", 50, tmp_path, helper, sessions)
    coach = count("recorder", 50, tmp_path, helper, sessions)
    assert coach > 2 * raw > 0  # coach encodes, seals and signs what raw was handed made


def test_a_session_count_under_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--sessions", "0", "recorder"])
    assert exited.value.code == 2
    assert "--sessions must be at least 1" in capsys.readouterr().err


def test_a_resume_is_counted_per_read_coach_over_its_reference(tmp_path: Path) -> None:
    helper = build_helper(tmp_path)
    reference = count("resume_stack", 2, tmp_path, helper)
    coach = count("resume", 2, tmp_path, helper)
    # coach does the reference's reads and decode, and builds the resumed context too
    assert coach > reference > 0
