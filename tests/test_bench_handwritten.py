"""The hand-written floor (``bench.handwritten``) does coach's work, all of it.

Its figures stand for the least any Python implementation of the contract can cost,
so what is held here is that it makes and reads exactly coach's rows: the rows it
writes are the rows :func:`raw_batches` makes with coach's own functions (the same
claims and links, the same signatures, and payloads and texts that open to the same
bytes under the person's key), and what it reads back from a session coach wrote is
what coach's decode gives — the same texts, the same chat items — and a step whose
signature does not match is refused, as coach refuses it. No timing is asserted: the
figures are the bench's. And a turn it writes through raw's writer — the turn ladder's
least by hand — is one coach resumes as its own.
"""

from __future__ import annotations

import pytest
from bench.backends import SECRET, CoachBackend, turn_ops
from bench.handwritten import hand_batches, hand_decode
from bench.measure import sqlite_dir, sqlite_url
from bench.profiles import prepared_session
from bench.rawrows import RawBatch, raw_batches
from bench.recorder_cpu import workload
from bench.storage_speed import RawCoachRows
from bench.text import turns
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coach.persistence.codec import StepCodec
from coach.persistence.conversation import open_content
from coach.persistence.crypto import Sealer, new_data_key
from coach.persistence.driver import utc
from coach.persistence.memory import decode_or_empty


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


def test_it_writes_the_rows_coach_writes() -> None:
    ops = workload(["a" * 32, "b" * 32], 30, 7)
    key = new_data_key()
    sealer = Sealer("someone", key)

    by_hand = hand_batches(ops, SECRET, AESGCM(key), 25)
    by_coach = raw_batches(ops, StepCodec(SECRET), 25, sealer)

    assert len(by_hand) == len(by_coach) == 8  # 180 ops
    for hand, coach in zip(by_hand, by_coach, strict=True):
        assert hand.claims == coach.claims
        assert hand.links == coach.links and any(link is not None for link in hand.links)
        assert _opened(hand, sealer) == _opened(coach, sealer)


async def test_it_reads_what_coach_reads() -> None:
    with sqlite_dir() as directory:
        handle = await prepared_session(directory / "r.db", 40)
        coach = CoachBackend(sqlite_url(directory / "r.db"))
        await coach.open()
        raw = RawCoachRows(directory / "r.db")
        await raw.open(handle.id)
        try:
            window, steps, stored = await raw.resume_rows()
            sealer = await coach.repo.vault.sealer(coach.user_id)
        finally:
            await raw.aclose()
            await coach.aclose()
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
        assert type(mine) is type(theirs)
        assert mine.model_fields_set == theirs.model_fields_set  # type: ignore[attr-defined]
    forged = steps[7]._replace(signature=bytes(16))
    with pytest.raises(ValueError, match="signature mismatch"):
        hand_decode(sealer._aead, SECRET, sid, window, [*steps[:7], forged, *steps[8:]])


async def test_coach_resumes_the_turns_it_writes_through_raw() -> None:
    texts = turns(3, 30)
    with sqlite_dir() as directory:
        handle = await prepared_session(directory / "r.db")
        coach = CoachBackend(sqlite_url(directory / "r.db"))
        await coach.open()
        raw = RawCoachRows(directory / "r.db")
        await raw.open(handle.id)
        try:
            sealer = await coach.repo.vault.sealer(coach.user_id)
            for n, turn in enumerate(texts):
                ops = turn_ops(handle.id, 2 * n, turn)
                (rows,) = hand_batches(ops, SECRET, sealer._aead)
                said = [(role, content) for _, role, content in rows.messages]
                await raw.write_rows(2 * n, said, rows.steps, rows.now)
            await coach.complete_phase(handle)
            resumed = await coach.repo.resume_session(handle.id, user_id=coach.user_id)
        finally:
            await raw.aclose()
            await coach.aclose()

    spoken = [text for turn in texts[-25:] for text in (turn.user, turn.assistant)]
    assert [step.content[0] for step in resumed.memory] == spoken
    assert [m.content for m in resumed.context.history[-2:]] == [
        texts[-1].user,
        texts[-1].assistant,
    ]
