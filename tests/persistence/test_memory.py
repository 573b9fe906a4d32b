"""Agent memory steps: signed pickle round trip, append-only writes, rejection of bad blobs."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest
from livekit.agents import llm
from sqlalchemy import text

from coach.errors import InvalidWrite, SessionNotFound, StaleWrite
from coach.persistence import Repository, StepCodec
from tests.support import append_steps, raw_sql


def _items() -> list[object]:
    return [
        llm.ChatMessage(role="system", content=["You are DesignCoach."]),
        llm.ChatMessage(role="user", content=["I'm Alice"], transcript_confidence=0.93),
        llm.FunctionCall(call_id="call_1", name="identify_user", arguments='{"name": "Alice"}'),
        llm.FunctionCallOutput(call_id="call_1", name="identify_user", output="ok", is_error=False),
        llm.AgentHandoff(old_agent_id="coach", new_agent_id="strategist"),
        llm.ChatMessage(role="assistant", content=["Let's empathize."], interrupted=True),
    ]


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("memory-user")
    return (await repo.create_session(user.id)).id


async def _rows(repo: Repository, sid: str) -> list[tuple[int, bytes]]:
    async with raw_sql(repo) as conn:
        result = await conn.execute(
            text("SELECT seq, signature FROM agent_steps WHERE session_id = :s ORDER BY seq"),
            {"s": sid},
        )
        return [(int(seq), bytes(sig)) for seq, sig in result]


async def _set_payload(repo: Repository, sid: str, seq: int, payload: bytes, sig: bytes) -> None:
    """Store ``payload`` at ``seq`` as someone holding the person's data key would (sealed
    in place), so what is checked is the signature and the allow-list beneath."""
    session = await repo.get_session(sid)
    assert session is not None
    sealer = await repo.vault.sealer(session.user_id)
    payload = sealer.seal("agent_steps", "payload", (sid, seq), payload)  # type: ignore[assignment]
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            text(
                "UPDATE agent_steps SET payload = :p, signature = :g "
                "WHERE session_id = :s AND seq = :q"
            ),
            {"p": payload, "g": sig, "s": sid, "q": seq},
        )


async def test_livekit_chat_items_round_trip(repo: Repository) -> None:
    sid = await _session(repo)
    items = _items()
    assert await repo.save_agent_state(sid, items) == len(items)
    loaded = await repo.load_agent_state(sid)
    assert loaded == items
    assert [type(x) for x in loaded] == [type(x) for x in items]
    assert isinstance(loaded[2], llm.FunctionCall) and loaded[2].arguments == '{"name": "Alice"}'
    assert await repo.agent_step_count(sid) == len(items)


async def test_only_new_steps_are_written(repo: Repository) -> None:
    sid = await _session(repo)
    items = _items()
    await repo.save_agent_state(sid, items[:2])
    before = await _rows(repo, sid)
    assert await repo.save_agent_state(sid, items[:5]) == 5
    after = await _rows(repo, sid)
    assert len(after) == 5
    assert after[:2] == before  # the first rows were not rewritten
    assert await repo.save_agent_state(sid, items[:5]) == 5  # nothing new: nothing written
    assert await repo.save_agent_state(sid, items[:3]) == 5  # a shorter list never truncates
    assert len(await _rows(repo, sid)) == 5
    assert await repo.load_agent_state(sid) == items[:5]


async def test_append_with_the_right_start(repo: Repository) -> None:
    sid = await _session(repo)
    items = _items()
    assert await append_steps(repo, sid, items[:3], start=0) == 3
    assert await append_steps(repo, sid, items[3:], start=3) == 6
    with pytest.raises(StaleWrite, match="has 6 memory steps stored, not 4"):
        await append_steps(repo, sid, items[:1], start=4)
    assert await repo.load_agent_state(sid) == items


async def test_stale_append_writes_nothing(repo: Repository) -> None:
    sid = await _session(repo)
    await append_steps(repo, sid, _items()[:2], start=0)
    with pytest.raises(StaleWrite):
        await append_steps(repo, sid, _items()[:3], start=0)
    assert await repo.agent_step_count(sid) == 2


async def test_unpicklable_step_writes_nothing(repo: Repository) -> None:
    sid = await _session(repo)
    with pytest.raises(InvalidWrite, match="memory step 1 cannot be pickled"):
        await repo.save_agent_state(sid, [_items()[0], lambda: None])
    assert await repo.agent_step_count(sid) == 0


async def test_no_steps_loads_empty(repo: Repository) -> None:
    sid = await _session(repo)
    assert await repo.load_agent_state(sid) == []
    assert await repo.load_agent_state("unknown-session") == []
    assert await repo.agent_step_count(sid) == 0


async def test_steps_of_unknown_session_are_refused(repo: Repository) -> None:
    with pytest.raises(SessionNotFound):
        await repo.save_agent_state("missing", _items())


async def test_corrupt_blob_loads_empty_and_logs(
    repo: Repository, memory_secret: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    sid = await _session(repo)
    await repo.save_agent_state(sid, _items())
    garbage = b"\x80\x05not really a pickle"
    signed = StepCodec(memory_secret).sign(sid, 2, garbage)  # validly signed, but garbage
    await _set_payload(repo, sid, 2, garbage, signed.signature)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    [record] = [r for r in caplog.records if r.name == "coach.persistence"]
    assert record.levelno == logging.ERROR
    assert "step 2" in record.getMessage()


async def test_tampered_blob_is_rejected(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    sid = await _session(repo)
    await repo.save_agent_state(sid, _items())
    [(_, signature)] = [row for row in await _rows(repo, sid) if row[0] == 1]
    tampered = pickle.dumps(llm.ChatMessage(role="user", content=["I'm Mallory"]), protocol=5)
    await _set_payload(repo, sid, 1, tampered, signature)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    assert "signature mismatch" in caplog.text


async def test_blob_moved_to_another_session_or_position_is_rejected(repo: Repository) -> None:
    sid = await _session(repo)
    other = await _session(repo)
    await repo.save_agent_state(sid, _items())
    await repo.save_agent_state(other, _items()[:2])
    async with raw_sql(repo, begin=True) as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT payload, signature FROM agent_steps WHERE session_id = :s AND seq = 0"
                ),
                {"s": sid},
            )
        ).one()
    # the genuine step 0 of `sid`, copied to step 1 of `sid` and to step 0 of `other`
    await _set_payload(repo, sid, 1, bytes(row[0]), bytes(row[1]))
    await _set_payload(repo, other, 0, bytes(row[0]), bytes(row[1]))
    assert await repo.load_agent_state(sid) == []
    assert await repo.load_agent_state(other) == []


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


async def test_foreign_pickle_never_executes(
    repo: Repository, memory_secret: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid = await _session(repo)
    await repo.save_agent_state(sid, _items()[:2])
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Exploit(marker), protocol=5)

    # 1. a foreign blob with a made-up signature fails the HMAC check
    await _set_payload(repo, sid, 0, evil, b"\x00" * 32)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    assert not marker.exists()

    # 2. even correctly signed (a leaked key), os.system is not on the allow-list
    forged = StepCodec(memory_secret).sign(sid, 0, evil)
    await _set_payload(repo, sid, 0, evil, forged.signature)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    assert not marker.exists()
    assert "not allowed" in caplog.text


async def test_resume_memory_falls_back_to_empty_on_corruption(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    user = await repo.get_or_create_user("resumer")
    sid = (await repo.create_session(user.id)).id
    await repo.save_phase_output(sid, "challenge", "Challenge", "completed", output="c")
    items = _items()
    await repo.save_agent_state(sid, items)
    assert (await repo.resume_session(sid, user_id=user.id)).memory == items
    await _set_payload(repo, sid, 0, b"junk", b"\x01" * 32)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        result = await repo.resume_session(sid, user_id=user.id)
    assert result.memory == []
    assert result.next_phase_id == "empathize"


async def _delete_steps(repo: Repository, sid: str, where: str) -> None:
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(
            text(f"DELETE FROM agent_steps WHERE session_id = :s AND {where}"), {"s": sid}
        )


@pytest.mark.parametrize(
    ("where", "missing"), [("seq = 0", "step 0"), ("seq = 5", "step 5"), ("seq < 2", "step 0")]
)
async def test_a_cut_history_is_reported_not_loaded_short(
    repo: Repository, caplog: pytest.LogCaptureFixture, where: str, missing: str
) -> None:
    # The first or the last rows gone: every row left still verifies (signatures bind
    # positions, not neighbours), so only the stored count can tell.
    sid = await _session(repo)
    items = _items()
    await repo.save_agent_state(sid, items)
    await _delete_steps(repo, sid, where)
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    assert f"memory {missing} is missing" in caplog.text
    newest = await repo.load_agent_state(sid, newest=1)
    assert newest == ([] if missing == "step 5" else items[-1:])


async def test_bounded_loads_and_pages(repo: Repository) -> None:
    sid = await _session(repo)
    items = _items()
    await repo.save_agent_state(sid, items)
    assert await repo.load_agent_state(sid, newest=2) == items[-2:]
    assert await repo.load_agent_state(sid, newest=0) == []
    assert await repo.load_agent_state(sid, newest=100) == items
    assert await repo.load_agent_state(sid, since=4) == items[4:]
    assert await repo.load_agent_state(sid, since=6) == []
    pages = [await repo.load_agent_state(sid, since=n, limit=4) for n in (0, 4, 8)]
    assert pages == [items[:4], items[4:], []]
    assert await repo.agent_step_count(sid) == len(items)


async def test_the_stored_count_is_the_conflict_check(repo: Repository) -> None:
    # Two writers that both saw 6 steps: the second append is refused and writes nothing.
    sid = await _session(repo)
    await repo.save_agent_state(sid, _items())
    await append_steps(repo, sid, ["a"], start=6)
    with pytest.raises(StaleWrite, match="has 7 memory steps stored, not 6"):
        await append_steps(repo, sid, ["b"], start=6)
    assert await repo.load_agent_state(sid, since=6) == ["a"]
