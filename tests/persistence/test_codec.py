"""The signed, allow-listed step codec on its own (no database)."""

from __future__ import annotations

import dataclasses
import hmac
import pickle
from datetime import UTC, datetime

import pytest
from livekit.agents import llm

from coach.errors import CorruptBlob
from coach.persistence import StepCodec
from coach.persistence.codec import CODEC_NAME, CODEC_VERSION

SECRET = b"0123456789abcdef0123456789abcdef"


def test_round_trip_of_plain_values_and_chat_items() -> None:
    codec = StepCodec(SECRET)
    for step in (
        {"a": [1, 2.5, None, True], "when": datetime(2030, 1, 1, tzinfo=UTC), "s": {1, 2}},
        llm.ChatMessage(role="user", content=["hi", llm.ImageContent(image="https://x/y.png")]),
        llm.FunctionCall(call_id="c", name="f", arguments="{}"),
    ):
        encoded = codec.encode("s1", 3, step)
        assert (encoded.codec, encoded.version, encoded.seq) == (CODEC_NAME, CODEC_VERSION, 3)
        decoded = codec.decode("s1", encoded)
        assert decoded == step
        if isinstance(step, llm.ChatMessage | llm.FunctionCall):
            assert isinstance(decoded, type(step))
            assert decoded.model_fields_set == step.model_fields_set


def _part(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


@pytest.mark.parametrize("length", [16, 64, 65, 200])
def test_signature_is_hmac_sha256_of_the_bound_parts_for_any_secret_length(length: int) -> None:
    # Stored signatures must keep verifying across releases: the signed message is the
    # length-prefixed domain (and text left out), codec, version and session, then the
    # position and the payload; version 2 keeps the first 128 bits.
    secret = bytes(range(256))[:length]
    codec = StepCodec(secret)
    parts = _part(CODEC_NAME.encode()) + _part(b"2") + _part(b"s1")
    tail = (7).to_bytes(8, "big", signed=True) + b"payload"
    plain = _part(b"coach.agent_step") + parts + tail
    said = _part(b"coach.agent_step+text") + _part("hé".encode()) + parts + tail
    assert codec.sign("s1", 7, b"payload").signature == hmac.digest(secret, plain, "sha256")[:16]
    with_text = codec.sign("s1", 7, b"payload", text="hé").signature
    assert with_text == hmac.digest(secret, said, "sha256")[:16]
    sign = codec.signer("s1")  # the write path's: the session's part made once
    assert sign(7, b"payload", None) == hmac.digest(secret, plain, "sha256")[:16]
    assert sign(7, b"payload", "hé") == with_text
    version_1 = plain.replace(_part(b"2"), _part(b"1"))
    assert codec.sign("s1", 7, b"payload", version=1).signature == hmac.digest(
        secret, version_1, "sha256"
    )


def test_signature_binds_session_position_and_secret() -> None:
    codec = StepCodec(SECRET)
    encoded = codec.encode("s1", 0, ["step"])
    with pytest.raises(CorruptBlob, match="signature mismatch"):
        codec.decode("s2", encoded)
    with pytest.raises(CorruptBlob, match="signature mismatch"):
        codec.decode("s1", dataclasses.replace(encoded, seq=1))
    with pytest.raises(CorruptBlob, match="signature mismatch"):
        StepCodec(b"another-secret-of-32-bytes-----!").decode("s1", encoded)
    with pytest.raises(CorruptBlob, match="unknown codec"):
        codec.decode("s1", dataclasses.replace(encoded, version=99))


def test_allow_list_refuses_unknown_classes_even_when_signed() -> None:
    codec = StepCodec(SECRET)
    payload = pickle.dumps(ValueError("x"), protocol=5)
    with pytest.raises(CorruptBlob, match="builtins.ValueError is not allowed"):
        codec.decode("s1", codec.sign("s1", 0, payload))
    extended = StepCodec(SECRET, extra_allowed=[("builtins", "ValueError")])
    signed = extended.sign("s1", 0, extended.dumps(ValueError("x")))
    assert isinstance(extended.decode("s1", signed), ValueError)


def test_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        StepCodec(b"short")
