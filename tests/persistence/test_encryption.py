"""Encryption at rest: what a person says is stored sealed with their own key, the keys
live apart from the data, and an erase destroys the key, so a copy of the data taken
before it holds nothing anyone can read of that person."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from livekit.agents import llm
from sqlalchemy import text
from sqlalchemy.engine import make_url

from coach.__main__ import main
from coach.errors import ConfigError, CorruptBlob, PersonErased
from coach.persistence import Repository, open_repository
from coach.persistence.crypto import MasterKeys, Sealer, new_data_key
from coach.persistence.keystore import default_keys_url
from coach.state.zones import DeltaSpec
from coach.store import AddMessage, AppendSteps, ClosePhase, SavePhaseOutput, WriteZone
from tests.support import (
    MASTER_KEY,
    MEMORY_SECRET,
    keys_of,
    keys_url,
    raw_sql,
    sqlite_bytes,
    stored_bytes,
    wal_kept,
)

MARKERS = {
    "identity": "ident-QZX-alice",
    "name": "name-QZX-Alice",
    "challenge": "challenge-QZX-lockers",
    "said": "said-QZX-i-hate-my-commute",
    "reply": "reply-QZX-tell-me-more",
    "prompt": "prompt-QZX-you-are-a-coach",
    "input": "input-QZX-phase-input",
    "output": "output-QZX-phase-output",
    "tool": "tool-QZX-search-lockers",
    "zone": "zone-QZX-insight",
    "delta": "delta-QZX-query",
    "fact": "fact-QZX-leads-a-team",
}


async def visit(repo: Repository, identity: str = MARKERS["identity"]) -> tuple[str, str]:
    """A person's visit touching every personal column; returns (user id, session id)."""
    user = await repo.get_or_create_user(identity, MARKERS["name"])
    session = await repo.create_session(user.id, MARKERS["challenge"])
    sid = session.id
    call = llm.FunctionCall(call_id="c1", name="search", arguments=f'{{"q": "{MARKERS["tool"]}"}}')
    spec = DeltaSpec(
        trigger="user_query",
        source="llm",
        delta_type="update",
        path="data.insights",
        action={"type": "search", "tool": "search", "params": {"q": MARKERS["delta"]}},
        actor_id=identity,
    )
    await repo.write_batch(
        [
            AddMessage(sid, "user", MARKERS["said"]),
            AddMessage(sid, "assistant", MARKERS["reply"]),
            AppendSteps(
                sid,
                0,
                (
                    llm.ChatMessage(role="user", content=[MARKERS["said"]]),
                    call,
                    llm.ChatMessage(role="assistant", content=[MARKERS["reply"]]),
                ),
            ),
            SavePhaseOutput(
                *(sid, "challenge", "Challenge", "completed"),
                *(MARKERS["prompt"], MARKERS["input"], MARKERS["output"]),
            ),
            WriteZone(sid, "data", {"insights": [MARKERS["zone"]]}, spec, 0),
            ClosePhase(sid, "challenge", 3, 1, {"data": {"insights": [MARKERS["zone"]]}}),
        ]
    )
    fact = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="facts")
    await repo.update_person(user.id, {"facts": [MARKERS["fact"]]}, fact)
    return user.id, sid


def dump(url: str) -> list[str]:
    """Every row of a SQLite database, as SQL."""
    with sqlite3.connect(database_file(url)) as conn:
        return list(conn.iterdump())


def database_file(url: str) -> Path:
    database = make_url(url).database
    assert database is not None
    return Path(database)


async def test_nothing_personal_is_stored_readable(database_url: str) -> None:
    """The database's bytes — on disk, the SQLite file and its WAL, or PostgreSQL's
    relation files and WAL segments; in memory, its image — hold no marker, the key store
    neither; and every value reads back as it was written."""
    repo = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    try:
        async with wal_kept(repo) as since:
            user_id, sid = await visit(repo)
            assert (await repo.get_user(user_id)).identity == MARKERS["identity"]  # type: ignore[union-attr]
            assert (await repo.get_session(sid)).design_challenge == MARKERS["challenge"]  # type: ignore[union-attr]
            said = await repo.get_session_conversation(sid)
            assert [m.content for m in said] == [MARKERS["said"], MARKERS["reply"]]
            steps = await repo.load_agent_state(sid)
            assert MARKERS["tool"] in steps[1].arguments  # type: ignore[attr-defined]
            assert (await repo.get_state(sid)).data == {"insights": [MARKERS["zone"]]}
            (delta,) = await repo.get_deltas(sid)
            assert delta.actor_id == MARKERS["identity"]
            assert delta.action.params == {"q": MARKERS["delta"]}
            assert (await repo.get_person(user_id)).value == {"facts": [MARKERS["fact"]]}
            (output,) = await repo.get_phase_outputs(sid)
            assert (output.system_prompt, output.output) == (MARKERS["prompt"], MARKERS["output"])
            found = await repo.find_user(MARKERS["identity"])
            assert found is not None and found.id == user_id
            raw = await stored_bytes(repo, database_url, since)
        assert b"data.insights" in raw  # what stays clear is there: the scan sees the rows
        for name, marker in MARKERS.items():
            assert marker.encode() not in raw, f"{name} is stored readable"
        store = keys_url(database_url) or str(default_keys_url(database_url))
        key_bytes = sqlite_bytes(store)
        assert user_id.encode() in key_bytes  # the key store holds keys, wrapped
        for marker in MARKERS.values():
            assert marker.encode() not in key_bytes
    finally:
        await repo.aclose()


@pytest.mark.postgres
async def test_the_wal_scanned_is_all_of_it_though_checkpoints_recycle_segments(
    postgres_url: str, open_repo: Callable[..., Awaitable[Repository]]
) -> None:
    # The scan above reads the WAL written since the test began. A checkpoint (the
    # scan's own, another test's, the server's) recycles the segments before it: they
    # were skipped unread, so a word written there went unseen, or vanished mid-read.
    # And a WAL page begins with a header, which splits a value written over a page's
    # end: the first words (23 KB) are longer than two pages, so they always are split.
    first = " ".join(f"written in the first segment, word {n}" for n in range(600))
    assert len(first) > 2 * 8192
    repo = await open_repo(postgres_url)
    async with wal_kept(repo) as since, raw_sql(repo) as conn:
        emit = text("SELECT pg_logical_emit_message(false, 'coach', :words)")
        await conn.execute(emit, {"words": first})
        await conn.execute(text("SELECT pg_switch_wal()"))
        await conn.execute(emit, {"words": "written in the next"})
        await conn.commit()
        await conn.execute(text("CHECKPOINT"))
        raw = await stored_bytes(repo, postgres_url, since)
    assert first.encode() in raw
    assert b"written in the next" in raw


async def test_a_copy_taken_before_an_erase_cannot_be_read_for_that_person(
    database_url: str, backup_of: Callable[[str], Awaitable[str]]
) -> None:
    repo = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    try:
        alice, alice_session = await visit(repo)
        _, bob_session = await visit(repo, "bob")
    finally:
        await repo.aclose()
    backup = await backup_of(database_url)  # yesterday's backup
    repo = await open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    try:
        assert await repo.delete_user(MARKERS["identity"]) == 1
    finally:
        await repo.aclose()
    # The backup, opened with the same master key and the same key store.
    store = keys_url(database_url) or str(default_keys_url(database_url))
    copy = await open_repository(
        backup, secret=MEMORY_SECRET, master_keys=MasterKeys.of(MASTER_KEY), keys_url=store
    )
    try:
        with pytest.raises(PersonErased) as erased:
            await copy.get_session(alice_session)
        assert str(erased.value) == (
            f"User {alice} was erased: their data key is destroyed, so what this database "
            "still holds of them cannot be read."
        )
        with pytest.raises(PersonErased):
            await copy.find_user(MARKERS["identity"])
        with pytest.raises(PersonErased):
            await copy.get_user_sessions(alice)
        with pytest.raises(PersonErased):
            await copy.get_session_conversation(alice_session)
        # Other people's sessions read as before.
        bob = await copy.get_session(bob_session)
        assert bob is not None and bob.design_challenge == MARKERS["challenge"]
        assert [s.id for s in await copy.list_sessions()] == [bob_session]
    finally:
        await copy.aclose()


def test_a_sealed_field_keeps_the_format_earlier_releases_wrote() -> None:
    # Stored values must keep opening across releases: 0x01, a 12-byte nonce, then
    # AES-256-GCM of the kind and the value, its associated data the table and column,
    # then each naming value after a 0x1f — a time as microseconds since the epoch.
    key = new_data_key()
    sealer, aead = Sealer("0" * 32, key), AESGCM(key)
    at = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    row = {"session_id": "s1", "created_at": at, "role": "user", "content": "hé"}
    sealed = sealer.seal_row("session_conversations", row)["content"]
    micros = int((at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10**6 + 6
    named = f"session_conversations.content\x1fs1\x1f{micros}\x1fuser".encode()
    assert sealed[:1] == b"\x01"
    assert aead.decrypt(sealed[1:13], sealed[13:], named) == "shé".encode()
    step = sealer.seal("agent_steps", "payload", ("s1", 7), b"\x80pickle")
    assert step is not None
    assert aead.decrypt(step[1:13], step[13:], b"agent_steps.payload\x1fs1\x1f7") == b"b\x80pickle"
    data = sealer.seal_row("session_state", {"session_id": "s1", "data": {"a": 1}, "view": None})
    assert data["view"] is None and "template" not in data
    opened = aead.decrypt(data["data"][1:13], data["data"][13:], b"session_state.data\x1fs1")
    assert opened == b'j{"a":1}'


async def test_a_value_moved_to_another_row_fails_to_open(repo: Repository) -> None:
    _, sid = await visit(repo)
    first, second = await repo.get_session_conversation(sid)
    async with raw_sql(repo, begin=True) as conn:
        content = (
            await conn.execute(
                text("SELECT content FROM session_conversations WHERE id = :id"), {"id": first.id}
            )
        ).scalar()
        await conn.execute(
            text("UPDATE session_conversations SET content = :c WHERE id = :id"),
            {"c": content, "id": second.id},
        )
    with pytest.raises(CorruptBlob, match="fails its authentication"):
        await repo.get_session_conversation(sid)


async def _copy_content(repo: Repository, source: int, target: int) -> None:
    """Message ``target``'s stored text replaced by message ``source``'s, sealed bytes and all."""
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            text(
                "UPDATE session_conversations SET content = "
                "(SELECT content FROM session_conversations WHERE id = :a) WHERE id = :b"
            ),
            {"a": source, "b": target},
        )


async def test_two_messages_of_one_batch_cannot_be_swapped(repo: Repository) -> None:
    """Same session, same role, one batch: each message's time still names it."""
    _, sid = await visit(repo)
    await repo.write_batch([AddMessage(sid, "user", "first"), AddMessage(sid, "user", "second")])
    *_, first, second = await repo.get_session_conversation(sid)
    assert (first.content, second.content) == ("first", "second")
    assert first.created_at < second.created_at
    await _copy_content(repo, first.id, second.id)
    with pytest.raises(CorruptBlob, match="fails its authentication"):
        await repo.get_session_conversation(sid)


async def test_a_resume_refuses_a_window_message_moved_to_another_row(repo: Repository) -> None:
    # The resume reads its window with a statement of its own (on the driver's cursor):
    # a message's time and role, read there, still bind its text.
    user_id, sid = await visit(repo)
    first, second = await repo.get_session_conversation(sid)
    await _copy_content(repo, first.id, second.id)
    with pytest.raises(CorruptBlob, match="session_conversations.content .* fails its"):
        await repo.resume_session(sid, user_id=user_id)


async def test_a_resume_with_a_step_moved_to_another_position_rebuilds_its_history(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    user_id, sid = await visit(repo)
    assert len((await repo.resume_session(sid, user_id=user_id)).memory) == 3
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            text(
                "UPDATE agent_steps SET payload = (SELECT payload FROM agent_steps "
                "WHERE session_id = :s AND seq = 1) WHERE session_id = :s AND seq = 2"
            ),
            {"s": sid},
        )
    resumed = await repo.resume_session(sid, user_id=user_id)
    assert resumed.memory == []
    assert [m.content for m in resumed.context.history][-2:] == [MARKERS["said"], MARKERS["reply"]]
    assert "agent_steps.payload of user" in caplog.text


async def test_rotating_the_master_key_rewraps_keys_and_leaves_the_data(
    sqlite_url: str,
) -> None:
    new_key = "a-brand-new-master-key-0123456789abcdef"
    repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=MEMORY_SECRET)
    try:
        user_id, sid = await visit(repo)
        before = dump(sqlite_url)
    finally:
        await repo.aclose()
    rotating = MasterKeys.of(new_key, [MASTER_KEY])
    repo = await open_repository(sqlite_url, secret=MEMORY_SECRET, master_keys=rotating)
    try:
        assert await repo.vault.store.rewrap(rotating) == (2, 0)  # alice and the lookup key
        assert await repo.vault.store.rewrap(rotating) == (0, 2)
    finally:
        await repo.aclose()
    assert dump(sqlite_url) == before  # no row touched
    repo = await open_repository(
        sqlite_url, secret=MEMORY_SECRET, master_keys=MasterKeys.of(new_key)
    )
    try:
        assert (await repo.get_session(sid)).design_challenge == MARKERS["challenge"]  # type: ignore[union-attr]
        assert (await repo.find_user(MARKERS["identity"])).id == user_id  # type: ignore[union-attr]
    finally:
        await repo.aclose()
    repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=MEMORY_SECRET)
    try:
        with pytest.raises(ConfigError, match="which is not configured"):
            await repo.get_session(sid)
    finally:
        await repo.aclose()


async def test_a_key_store_is_required_apart_from_a_postgres_database() -> None:
    url = "postgresql+asyncpg://coach@127.0.0.1/coach"
    with pytest.raises(ConfigError, match="COACH_KEYS_URL is required"):
        await open_repository(url, secret=MEMORY_SECRET, master_keys=MasterKeys.of(MASTER_KEY))
    with pytest.raises(ConfigError, match="names the data database itself"):
        await open_repository(
            url, secret=MEMORY_SECRET, master_keys=MasterKeys.of(MASTER_KEY), keys_url=url
        )


def test_a_short_master_key_is_refused_with_how_to_make_one() -> None:
    with pytest.raises(ConfigError, match="at least 32 characters.*python -m coach keys new"):
        MasterKeys.of("too-short")


def test_the_keys_commands_make_a_key_and_rotate_to_it(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # no developer .env
    assert main(["keys", "new"]) == 0
    new_key = capsys.readouterr().out.strip()
    assert len(new_key) >= 32 and new_key != MASTER_KEY

    async def write() -> str:
        repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=MEMORY_SECRET)
        try:
            return (await visit(repo))[1]
        finally:
            await repo.aclose()

    sid = asyncio.run(write())
    monkeypatch.setenv("COACH_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("COACH_SECRET_KEY", MEMORY_SECRET.decode())
    monkeypatch.setenv("COACH_MASTER_KEY", new_key)
    monkeypatch.setenv("COACH_PREVIOUS_MASTER_KEYS", MASTER_KEY)
    assert main(["keys", "rotate"]) == 0
    new_id = MasterKeys.of(new_key).current.key_id
    assert capsys.readouterr().out == (
        f"2 data keys re-wrapped under master key {new_id}; 0 already were. The previous "
        "master keys wrap nothing now: remove them from COACH_PREVIOUS_MASTER_KEYS.\n"
    )
    monkeypatch.delenv("COACH_PREVIOUS_MASTER_KEYS")  # the new key alone reads everything
    assert main(["sessions", "show", sid]) == 0
    assert MARKERS["challenge"] in capsys.readouterr().out


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_a_sealed_value_opens_as_any_driver_returns_its_bytes(kind: type) -> None:
    sealer = Sealer("0" * 32, new_data_key())
    row = ("1" * 32, 7)
    for value in ("words", b"\x00bytes", {"json": [1, 2]}):
        blob = sealer.seal("agent_steps", "payload", row, value)
        assert blob is not None
        assert sealer.open("agent_steps", "payload", row, kind(blob)) == value


@pytest.mark.parametrize("stored", ["words", b"words", b"", 7])
def test_a_value_stored_unsealed_is_refused_not_read(stored: object) -> None:
    sealer = Sealer("0" * 32, new_data_key())
    with pytest.raises(CorruptBlob, match="agent_steps.payload of user 0+ is not sealed"):
        sealer.open("agent_steps", "payload", ("1" * 32, 7), stored)
