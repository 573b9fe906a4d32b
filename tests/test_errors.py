"""Every coach error survives pickling: the writer process sends them back to the agent."""

from __future__ import annotations

import pickle

import pytest

from coach import errors
from coach.errors import (
    BranchRefused,
    CoachError,
    ConfigError,
    CorruptBlob,
    InvalidRole,
    InvalidWrite,
    NoOpenSession,
    NothingToResume,
    NotIdentified,
    PersonErased,
    PromptError,
    ResumeError,
    SavingBehind,
    SessionCompleted,
    SessionFailed,
    SessionNotFound,
    StaleWrite,
    StorageError,
)

EXAMPLES: list[CoachError] = [
    ConfigError("no LLM configured"),
    PromptError("phases.yaml", "phases[2].owner", "unknown agent"),
    StorageError("write_batch failed: ConnectionResetError"),
    StaleWrite("Session s1 has 4 memory steps stored, not 3"),
    InvalidRole("robot"),
    InvalidWrite("message content must be a string"),
    CorruptBlob("session s1: memory step 2 failed its signature"),
    NoOpenSession("finish the session"),
    NotIdentified("load a session"),
    SavingBehind(5.0),
    PersonErased("0123456789abcdef0123456789abcdef"),
    ResumeError("s1", "Session s1 cannot be resumed"),
    SessionNotFound("s1"),
    SessionCompleted("s1"),
    SessionFailed("s1"),
    NothingToResume("s1"),
    BranchRefused("s1", "define", "Define is not completed yet, so there is nothing to branch."),
]


def test_the_examples_cover_the_whole_tree() -> None:
    tree = {
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, CoachError)
    }
    assert {type(e) for e in EXAMPLES} | {CoachError} == tree


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_pickles_to_an_equal_one(error: CoachError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)  # session_id, role, file/key/reason


def test_a_storage_error_keeps_whether_it_is_transient() -> None:
    error = StorageError("the connection was lost")
    assert error.transient is False  # by default: a failure that does not pass by itself
    error.transient = True
    assert pickle.loads(pickle.dumps(error)).transient is True
