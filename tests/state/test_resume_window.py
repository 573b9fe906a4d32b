"""The pure resume logic: next phase and the sliding history window."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coach.state import HistoryMessage, completed_phase_ids, next_phase_id, reconstruct_history

PHASES = ("challenge", "empathize", "define", "ideate", "strategy", "evaluation")


@dataclass(frozen=True)
class Out:
    phase_id: str
    status: str = "completed"
    system_prompt: str | None = "SYS"
    user_input: str | None = None
    output: str | None = None


@dataclass(frozen=True)
class Msg:
    role: str
    content: str
    phase_id: str | None = None
    interrupted: bool = False


def _pairs(n: int) -> list[Out]:
    return [Out(f"p{i}", user_input=f"u{i}", output=f"a{i}") for i in range(n)]


@pytest.mark.parametrize(
    ("pairs", "kept"), [(0, 0), (1, 1), (24, 24), (25, 25), (26, 25), (50, 25)]
)
def test_window_keeps_the_last_25_pairs(pairs: int, kept: int) -> None:
    history = reconstruct_history(_pairs(pairs), [], max_pairs=25)
    assert len(history) == 2 * kept
    assert [m.content for m in history[::2]] == [f"u{i}" for i in range(pairs - kept, pairs)]
    assert [m.content for m in history[1::2]] == [f"a{i}" for i in range(pairs - kept, pairs)]
    assert {m.role for m in history[::2]} <= {"user"}
    assert {m.role for m in history[1::2]} <= {"assistant"}


def test_max_pairs_zero_gives_nothing() -> None:
    assert reconstruct_history(_pairs(5), [Msg("user", "hi")], max_pairs=0) == []


def test_negative_window_is_an_error() -> None:
    with pytest.raises(ValueError):
        reconstruct_history([], [], max_pairs=-1)


def test_only_completed_outputs_with_a_system_prompt_count() -> None:
    outputs = [
        Out("a", user_input="ua", output="oa"),
        Out("b", status="running", user_input="ub"),
        Out("c", status="failed"),
        Out("d", system_prompt=None, user_input="ud", output="od"),
        Out("e", user_input=None, output=None),
    ]
    assert reconstruct_history(outputs, []) == [
        HistoryMessage("user", "ua", "a"),
        HistoryMessage("assistant", "oa", "a"),
        HistoryMessage("user", "", "e"),
        HistoryMessage("assistant", "", "e"),
    ]


def test_conversation_follows_the_phase_pairs_and_shares_the_window() -> None:
    conversation = [Msg("user", "q"), Msg("assistant", "par", "define", interrupted=True)]
    history = reconstruct_history(_pairs(3), conversation, max_pairs=2)
    assert history == [
        HistoryMessage("user", "u2", "p2"),
        HistoryMessage("assistant", "a2", "p2"),
        HistoryMessage("user", "q"),
        HistoryMessage("assistant", "par", "define", interrupted=True),
    ]


def test_next_phase_is_the_first_without_a_completed_output() -> None:
    assert next_phase_id(PHASES, []) == "challenge"
    outputs = [Out("challenge"), Out("define"), Out("empathize", status="running")]
    assert next_phase_id(PHASES, outputs) == "empathize"
    assert next_phase_id(PHASES, [Out(p) for p in PHASES]) == "evaluation"
    with pytest.raises(ValueError):
        next_phase_id((), [])


def test_completed_phase_ids_keep_order_without_repeats() -> None:
    outputs = [Out("b"), Out("a", status="failed"), Out("c"), Out("b")]
    assert completed_phase_ids(outputs) == ["b", "c"]
