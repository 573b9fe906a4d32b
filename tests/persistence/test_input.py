"""Input off the happy path: one identity rule for both databases, ids that are not ids."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from coach.errors import InvalidWrite, SessionNotFound
from coach.persistence import Repository
from coach.persistence.schema import USERS
from coach.state import Action, DeltaSpec
from coach.store import MAX_IDENTITY, check_identity, clean_text
from tests.support import raw_sql

REFUSED = {
    "empty": "",
    "blank": "   ",
    "too long": "x" * (MAX_IDENTITY + 1),
    "leading space": " ada",
    "trailing space": "ada ",
    "newline": "ada\nlovelace",
    "nul": "ada\x00",
    "lone surrogate": "ada\udcff",  # what a non-UTF-8 byte in argv becomes
    "right-to-left override": "\u202eada",  # shows as "ada" reversed, or as "ada"
    "zero-width space": "a\u200bda",  # shows as "ada"
}
ACCEPTED = {
    "plain": "ada",
    "spaces and quotes": "Ada 'The Countess' \"Lovelace\"",
    "longest": "é" * MAX_IDENTITY,
    "emoji": "ada 🧮",
    "shell characters": "a$b;`c`|d&",
}


async def _users(repo: Repository) -> int:
    async with raw_sql(repo) as conn:
        return int((await conn.execute(select(func.count()).select_from(USERS))).scalar_one())


@pytest.mark.parametrize("identity", REFUSED.values(), ids=REFUSED.keys())
def test_check_identity_refuses_with_one_line(identity: str) -> None:
    with pytest.raises(InvalidWrite) as refused:
        check_identity(identity)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("An identity")
    message.encode("utf-8")  # fit for a terminal: never quotes the bad text back raw


@pytest.mark.parametrize("identity", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_check_identity_accepts_names_as_they_are(identity: str) -> None:
    assert check_identity(identity) == identity


@pytest.mark.parametrize("identity", REFUSED.values(), ids=REFUSED.keys())
async def test_the_repository_refuses_the_same_identities_on_both_databases(
    repo: Repository, identity: str
) -> None:
    with pytest.raises(InvalidWrite) as created:
        await repo.get_or_create_user(identity, display_name="Ada")
    assert str(created.value) == _message(identity)
    if "invisible" in str(created.value):
        # Looked up as spelt (a user stored before the rule), never created.
        assert await repo.find_user(identity) is None
    else:
        with pytest.raises(InvalidWrite) as found:
            await repo.find_user(identity)
        assert str(found.value) == str(created.value)
    assert await _users(repo) == 0


@pytest.mark.parametrize("identity", ACCEPTED.values(), ids=ACCEPTED.keys())
async def test_accepted_identities_round_trip_on_both_databases(
    repo: Repository, identity: str
) -> None:
    user = await repo.get_or_create_user(identity, display_name=identity)
    assert (user.identity, user.display_name) == (identity, identity)
    assert await repo.find_user(identity) == user


async def test_a_compatibility_form_is_the_same_person_on_both_databases(
    repo: Repository,
) -> None:
    # A full-width "Ａda" looks like "Ada" everywhere it is listed: it is the same key.
    assert check_identity("\uff21da") == "Ada"
    user = await repo.get_or_create_user("\uff21da", display_name="Ada")
    assert user.identity == "Ada"
    assert await repo.find_user("Ada") == user == await repo.find_user("\uff21da")
    assert await _users(repo) == 1


async def test_a_user_stored_before_the_rule_is_still_found_and_erased(
    repo: Repository,
) -> None:
    # Stored by an older release, whose rule let a zero-width space through.
    # (Migration 0008 sealed it and keyed it by the hash of that spelling.)
    legacy, user_id = "a\u200bda", "f" * 32
    sealer = await repo.vault.create(user_id)
    values = {"id": user_id, "identity": legacy, "display_name": "Ada"}
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            USERS.insert().values(
                **sealer.seal_row("users", values),
                identity_hash=await repo.vault.identity_hash(legacy),
                created_at=datetime.now(UTC),
            )
        )
    found = await repo.find_user(legacy)
    assert found is not None and found.identity == legacy
    with pytest.raises(InvalidWrite, match="invisible"):
        await repo.get_or_create_user(legacy)  # nobody new is keyed that way
    assert await repo.delete_user(found.identity) == 0
    assert await repo.find_user(legacy) is None


async def test_a_display_name_is_stored_as_valid_utf8_within_the_column(
    repo: Repository,
) -> None:
    user = await repo.get_or_create_user("ada", display_name="Ada \ud83d\x00")
    assert user.display_name == "Ada \ufffd\ufffd"
    with pytest.raises(InvalidWrite):
        await repo.get_or_create_user("bob", display_name="b" * (MAX_IDENTITY + 1))
    assert await _users(repo) == 1


@pytest.mark.parametrize("session_id", ["nope", "x\ud800", "\x00", "A" * 32, "0" * 31 + "\udcff"])
async def test_a_session_id_that_is_no_id_is_unknown_on_both_databases(
    repo: Repository, session_id: str
) -> None:
    assert await repo.get_session(session_id) is None
    assert (await repo.get_state(session_id)).step == 0
    assert await repo.get_session_conversation(session_id) == []
    assert await repo.load_agent_state(session_id) == []
    with pytest.raises(SessionNotFound):
        await repo.add_session_message(session_id, "user", "hello")


def _message(identity: str) -> str:
    with pytest.raises(InvalidWrite) as refused:
        check_identity(identity)
    return str(refused.value)


def test_clean_text_keeps_valid_text_and_replaces_what_is_not_utf8() -> None:
    assert clean_text("plain ✓ 🧮") == "plain ✓ 🧮"
    assert clean_text("split \ud83d\ude00 emoji") == "split 😀 emoji"
    assert clean_text("a\x00b\udcffc\ud800") == "a\ufffdb\ufffdc\ufffd"
    assert clean_text(None) is None


# --- every column's rule, checked before any database sees the value ------------------

SPEC = DeltaSpec(trigger="user_action", source="user", delta_type="update", path="view")


async def _state_and_outputs(repo: Repository, session_id: str) -> tuple[object, ...]:
    return (await repo.get_state(session_id), await repo.get_phase_outputs(session_id))


async def test_a_user_action_keeps_its_actor_however_long_the_identity(repo: Repository) -> None:
    # The actor of a user action is the caller's identity: up to 255 characters.
    user = await repo.get_or_create_user("actor")
    session = await repo.create_session(user.id, "challenge")
    actor = "é" * MAX_IDENTITY
    await repo.update_view(session.id, {}, SPEC.model_copy(update={"actor_id": actor}))
    (delta,) = await repo.get_deltas(session.id)
    assert delta.actor_id == actor


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda repo, sid: repo.update_view(
                sid, {}, SPEC.model_copy(update={"actor_id": "x" * (MAX_IDENTITY + 1)})
            ),
            id="actor longer than an identity",
        ),
        pytest.param(
            lambda repo, sid: repo.update_view(
                sid, {}, SPEC.model_copy(update={"turn_id": "t" * 65})
            ),
            id="turn id longer than its column",
        ),
        pytest.param(
            lambda repo, sid: repo.save_phase_output(sid, "p" * 65, "Long", "running"),
            id="phase id longer than its column",
        ),
        pytest.param(
            lambda repo, sid: repo.update_data(sid, {"idea": "a\ud800b"}, SPEC),
            id="zone value holding a lone surrogate",
        ),
        pytest.param(
            lambda repo, sid: repo.update_view(
                sid, {}, SPEC.model_copy(update={"action": Action(params={"q": "\udcff"})})
            ),
            id="delta action holding a lone surrogate",
        ),
    ],
)
async def test_what_a_column_cannot_hold_is_refused_alike_on_both_databases(
    repo: Repository, write: Any
) -> None:
    user = await repo.get_or_create_user("columns")
    session = await repo.create_session(user.id, "challenge")
    before = await _state_and_outputs(repo, session.id)
    with pytest.raises(InvalidWrite):
        await write(repo, session.id)
    assert await _state_and_outputs(repo, session.id) == before


async def test_session_and_phase_text_is_stored_as_valid_utf8(repo: Repository) -> None:
    user = await repo.get_or_create_user("texts")
    session = await repo.create_session(user.id, "onboarding \ud83d\ude00 \udcff", room="room\x00")
    await repo.save_phase_output(session.id, "challenge", "Chall\udcffenge", "completed")
    stored = await repo.get_session(session.id)
    assert stored is not None
    assert stored.design_challenge == "onboarding 😀 \ufffd"
    assert stored.room == "room\ufffd"
    (output,) = await repo.get_phase_outputs(session.id)
    assert output.phase_name == "Chall\ufffdenge"
