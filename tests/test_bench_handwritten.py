"""The hand-written reference (``bench.handwritten``) does coach's work, all of it.

Its figures stand for the contract's work with no layer of coach's around it, so what
is held here is that it makes and reads exactly coach's rows. The rows it writes are the
rows :func:`raw_batches` makes with coach's own functions — the same claims and links,
the same signatures, payloads and texts that open to the same bytes — for chat messages
whose text their conversation row keeps, whole ones (compressed), and a step that is no
model at all. What it reads back is what coach's decode gives — from a session coach
wrote, and from those rows, their texts opened from the steps' own message rows — and
it refuses what coach refuses: a forged signature, a missing step. And a turn it writes
through raw's writer (the turn ladder's least by hand) is one coach resumes as its own.
No timing is asserted: the figures are the bench's.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.backends import SECRET, turn_ops
from bench.handwritten import hand_batches, hand_decode
from bench.measure import sqlite_dir
from bench.profiles import resumable
from bench.rawrows import RawBatch, raw_batches
from bench.recorder_cpu import workload
from bench.storage_speed import _StepRow
from bench.text import turns
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from livekit.agents.llm import ChatMessage

from coach.persistence.codec import StepCodec
from coach.persistence.conversation import open_content
from coach.persistence.crypto import Sealer, new_data_key
from coach.persistence.driver import utc
from coach.persistence.memory import decode_or_empty
from coach.store import AppendSteps


def _opened(rows: RawBatch, sealer: Sealer) -> tuple[list[tuple[object, ...]], ...]:
    said: list[tuple[object, ...]] = [
        (sid, role, sealer.open("session_conversations", "content", (sid, rows.now, role), blob))
        for sid, role, blob in rows.messages
    ]
    steps: list[tuple[object, ...]] = [
        (
            sid,
            seq,
            codec,
            version,
            signature,
            sealer.open("agent_steps", "payload", (sid, seq), blob),
        )
        for sid, seq, codec, version, signature, blob in rows.steps
    ]
    return said, steps


A, B = "a" * 32, "b" * 32


def _ops() -> list[object]:
    """Two sessions' turns, then steps of ``A`` no message of theirs carries: a whole
    chat message long enough to be compressed, and a plain value."""
    whole = ChatMessage(role="assistant", content=["a long answer, " * 40])
    return [*workload([A, B], 30, 7), AppendSteps(A, 60, (whole, {"plain": [1, 2]}))]


def test_it_writes_the_rows_coach_writes() -> None:
    key = new_data_key()
    sealer = Sealer("someone", key)

    ops = _ops()

    by_hand = hand_batches(ops, SECRET, AESGCM(key), 25)
    by_coach = raw_batches(ops, StepCodec(SECRET), 25, sealer)

    assert len(by_hand) == len(by_coach) == 8  # 181 ops
    for hand, coach in zip(by_hand, by_coach, strict=True):
        assert hand.claims == coach.claims
        assert hand.links == coach.links
        assert _opened(hand, sealer) == _opened(coach, sealer)
    last = by_hand[-1]
    at = [i for i, step in enumerate(last.steps) if step[:2] in ((A, 60), (A, 61))]
    assert [last.links[i] for i in at] == [None, None]  # the whole message, the plain value
    whole = _opened(last, sealer)[1][at[0]][-1]
    assert isinstance(whole, bytes) and whole[:1] == b"x"  # stored compressed


def _step_rows(batches: list[RawBatch], session_id: str) -> list[Any]:
    """``session_id``'s steps as a resume reads them, each with its message's row."""
    rows = []
    for number, batch in enumerate(batches):
        at = batch.now.replace(tzinfo=None).isoformat(" ")  # as SQLite returns it
        for (sid, seq, codec, version, signature, payload), link in zip(
            batch.steps, batch.links, strict=True
        ):
            step = (seq, codec, version, signature, payload)
            if sid != session_id:
                continue
            if link is None:
                rows.append(_StepRow(*step, None, None, None, None))
            else:
                _, role, content = batch.messages[link]
                rows.append(_StepRow(*step, 1000 * number + link, content, at, role))
    return rows


def test_it_reads_its_rows_as_coach_reads_them() -> None:
    key = new_data_key()
    sealer = Sealer("someone", key)
    rows = _step_rows(hand_batches(_ops(), SECRET, AESGCM(key), 25), A)

    _, by_hand = hand_decode(AESGCM(key), SECRET, A, [], rows)

    assert by_hand == decode_or_empty(StepCodec(SECRET), sealer, A, rows, 0, len(rows))
    assert len(by_hand) == 62 and by_hand[-1] == {"plain": [1, 2]}
    with pytest.raises(ValueError, match="step 3 is missing"):
        hand_decode(AESGCM(key), SECRET, A, [], rows[:3] + rows[4:])


async def test_it_reads_what_coach_reads() -> None:
    with sqlite_dir() as directory:
        async with resumable(directory / "r.db", 40) as (handle, coach, raw):
            window, steps, stored = await raw.resume_rows()
            sealer = await coach.repo.vault.sealer(coach.user_id)
    sid = handle.id
    texts = {
        message_id: open_content(sealer, sid, utc(at), role, content)
        for message_id, role, content, at in window
    }
    decoded = decode_or_empty(StepCodec(SECRET), sealer, sid, steps, steps[0].seq, stored, texts)

    by_hand = hand_decode(sealer._aead, SECRET, sid, window, steps)

    assert len(decoded) == len(steps) == 50
    assert by_hand == (texts, decoded)
    for mine, theirs in zip(by_hand[1], decoded, strict=True):
        assert mine.model_fields_set == theirs.model_fields_set  # type: ignore[attr-defined]
    forged = steps[7]._replace(signature=bytes(16))
    with pytest.raises(ValueError, match="signature mismatch"):
        hand_decode(sealer._aead, SECRET, sid, window, [*steps[:7], forged, *steps[8:]])


async def test_coach_resumes_the_turns_it_writes_through_raw() -> None:
    texts = turns(3, 30)
    with sqlite_dir() as directory:
        async with resumable(directory / "r.db", 0) as (handle, coach, raw):
            sealer = await coach.repo.vault.sealer(coach.user_id)
            for n, turn in enumerate(texts):
                ops = turn_ops(handle.id, 2 * n, turn)
                (rows,) = hand_batches(ops, SECRET, sealer._aead)
                said = [(role, content) for _, role, content in rows.messages]
                await raw.write_rows(2 * n, said, rows.steps, rows.now)
            await coach.complete_phase(handle)
            resumed = await coach.repo.resume_session(handle.id, user_id=coach.user_id)

    spoken = [text for turn in texts[-25:] for text in (turn.user, turn.assistant)]
    assert [step.content[0] for step in resumed.memory] == spoken
    assert [m.content for m in resumed.context.history[-2:]] == [
        texts[-1].user,
        texts[-1].assistant,
    ]
