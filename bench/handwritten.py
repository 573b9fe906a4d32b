"""The contract's work written by hand: a reference for what coach's own code adds.

The targets of issue 25 compare coach with a peer that stores its items as plain JSON
(agents' ``SQLiteSession``) and with raw writers that take rows already encoded. Coach's
contract asks more of every row: personal text sealed with the person's key (AES-GCM,
the row named in its associated data), every memory step signed (HMAC-SHA256) and, on
the way back, verified and unpickled through the allow-list into the chat items an agent
resumes with (SPEC §4.4, issue 24). These two functions do that work — the same rows,
byte for byte where nothing is random, as coach's own functions make and read them, and
the same checks on the way back (``tests/test_bench_handwritten.py``) — in one loop each,
with their constants made once per key and model class, no record and no layer.

They are a hand-tuned reference, not a proven minimum: a faster loop may exist (a
restricted unpickler reused across steps saved about 1 µs a step in a side measurement,
and is not taken here). So "above the target even by hand" says the contract leaves no
room for a storage layer in that budget, with the reference's margin; "below it by hand"
says what is between is coach's own code.
"""

from __future__ import annotations

import hmac
import io
import os
import pickle
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coach.persistence.codec import (
    _HEAD,
    _HEAD_WITH_TEXT,
    ALLOWED_GLOBALS,
    CODEC_NAME,
    CODEC_VERSION,
    COMPRESS_FROM,
    PICKLE_PROTOCOL,
    _AllowListUnpickler,
    _bound,
    _hmac_sha256,
    _model,
)
from coach.store import AddMessage, AppendSteps

from .rawrows import RawBatch

__all__ = ["hand_batches", "hand_decode"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_CHAT = "livekit.agents.llm.chat_context"
_set = object.__setattr__


def _micros(at: datetime | str) -> str:
    """A time as the associated data names it: microseconds since the epoch. SQLite
    returns UTC text."""
    if isinstance(at, str):
        return str((datetime.fromisoformat(at) - _NAIVE_EPOCH) // _MICROSECOND)
    return str((at - _EPOCH) // _MICROSECOND)


_CHANGED: dict[type, Callable[[Any], dict[str, Any]]] = {}


def _changed(cls: Any) -> Callable[[Any], dict[str, Any]]:
    """A pydantic model's fields that differ from their defaults (a factory's value
    made once per class, to compare with), as coach's codec stores them."""
    if cls in _CHANGED:
        return _CHANGED[cls]
    defaults = {
        name: info.default_factory() if info.default_factory is not None else info.default
        for name, info in cls.model_fields.items()
    }
    missing = object()

    def changed(model: Any) -> dict[str, Any]:
        return {k: v for k, v in model.__dict__.items() if defaults.get(k, missing) != v}

    _CHANGED[cls] = changed
    return changed


def hand_batches(
    ops: Sequence[object], secret: bytes, aead: AESGCM, batch: int = 100
) -> list[RawBatch]:
    """The rows of :func:`bench.rawrows.raw_batches` for ``ops`` — sealed with ``aead``
    (a person's cipher), the steps signed with ``secret`` — made by hand."""
    encrypt, dumps, mac = aead.encrypt, pickle.dumps, _hmac_sha256(secret)
    models: dict[type, Callable[[Any], dict[str, Any]] | None] = {}
    out = []
    for first in range(0, len(ops), batch):
        rows = RawBatch()
        at = "\x1f" + _micros(rows.now) + "\x1f"
        spoken: list[tuple[str, str, str]] = []
        appends: dict[str, tuple[int, list[Any]]] = {}
        waiting: dict[tuple[str, object, str], deque[int]] = {}
        for op in ops[first : first + batch]:
            if type(op) is AddMessage:
                key = (op.session_id, op.role, op.content)
                waiting.setdefault(key, deque()).append(len(spoken))
                spoken.append(key)
            elif type(op) is AppendSteps:
                appends.setdefault(op.session_id, (op.start, []))[1].extend(op.steps)
            else:
                raise TypeError(f"hand-written rows know messages and steps, not {op!r}")
        # one read of random bytes for every seal of the batch
        nonces = os.urandom(12 * (len(spoken) + sum(len(s) for _, s in appends.values())))
        used = 0
        for sid, role, words in spoken:
            ad = ("session_conversations.content\x1f" + sid + at + role).encode()
            nonce, used = nonces[used : used + 12], used + 12
            plain = b"s" + words.encode("utf-8", "surrogatepass")
            rows.messages.append((sid, role, b"\x01" + nonce + encrypt(nonce, plain, ad)))
        for sid in sorted(appends):
            start, steps = appends[sid]
            rows.claims.append((sid, start, start + len(steps)))
            bound = _bound(CODEC_NAME, CODEC_VERSION, sid)
            head = "agent_steps.payload\x1f" + sid + "\x1f"
            for seq, step in enumerate(steps, start):
                cls = type(step)
                if cls not in models:
                    allowed = (cls.__module__, cls.__name__) in ALLOWED_GLOBALS
                    model = allowed and hasattr(cls, "model_fields")
                    models[cls] = _changed(cls) if model else None
                changed = models[cls]
                link: int | None = None
                text: str | None = None
                if changed is not None:
                    fields = changed(step)
                    fields_set = tuple(sorted(step.__pydantic_fields_set__))
                    private = step.__pydantic_private__
                    content, speaker = getattr(step, "content", None), getattr(step, "role", None)
                    if type(content) is list and len(content) == 1 and type(content[0]) is str:
                        queue = waiting.get((sid, speaker, content[0]))
                        if queue:
                            link, text = queue.popleft(), content[0]
                            del fields["content"]
                    ident, created = fields.pop("id", None), fields.pop("created_at", None)
                    implied = set(fields) | ({"content"} if text is not None else set())
                    given = None if set(fields_set) == implied else fields_set
                    module = "" if cls.__module__ == _CHAT else cls.__module__
                    kind = "m" if text is None else "t"
                    envelope: tuple[object, ...] = (kind, module, cls.__name__, ident, created)
                    envelope += (fields, given, private)
                else:
                    envelope = ("p", step)
                payload = dumps(envelope, protocol=PICKLE_PROTOCOL)
                if len(payload) >= COMPRESS_FROM:
                    packed = zlib.compress(payload, 6)
                    payload = packed if len(packed) < len(payload) else payload
                if text is None:
                    signed = _HEAD
                else:
                    said = text.encode("utf-8", "surrogatepass")
                    signed = _HEAD_WITH_TEXT + len(said).to_bytes(4, "big") + said
                signed += bound + seq.to_bytes(8, "big", signed=True) + payload
                signature = mac(signed)[:16]
                nonce, used = nonces[used : used + 12], used + 12
                ad = (head + str(seq)).encode()
                sealed = b"\x01" + nonce + encrypt(nonce, b"b" + payload, ad)
                rows.links.append(link)
                rows.steps.append((sid, seq, CODEC_NAME, CODEC_VERSION, signature, sealed))
        out.append(rows)
    return out


def _opened(decrypt: Any, blob: bytes, ad: bytes, kind: bytes) -> bytes:
    """A sealed value's plain bytes, after its format and kind are checked."""
    if blob[:1] != b"\x01" or len(blob) < 29:
        raise ValueError("not sealed")
    plain: bytes = decrypt(blob[1:13], blob[13:], ad)
    if plain[:1] != kind:
        raise ValueError("not the kind of value stored there")
    return plain[1:]


class _Writer(Protocol):
    async def write(self, rows: RawBatch) -> None: ...


async def write_hand_batches(
    writer: _Writer, ops: Sequence[object], secret: bytes, aead: AESGCM, batch: int = 100
) -> int:
    """``ops``'s rows made by hand (:func:`hand_batches`) batch by batch of ``batch`` ops,
    each written by ``writer`` as soon as it is made; the batches written."""
    written = 0
    for start in range(0, len(ops), batch):
        for rows in hand_batches(ops[start : start + batch], secret, aead, batch):
            await writer.write(rows)
            written += 1
    return written


def hand_decode(
    aead: AESGCM, secret: bytes, session_id: str, window: Sequence[Any], steps: Sequence[Any]
) -> tuple[dict[int, str], list[object]]:
    """What a resume decodes of the rows :meth:`RawCoachRows.resume_rows` reads —
    ``window`` (``id, role, content, created_at``) and ``steps`` (``seq, codec, version,
    signature, payload, message id, content, created_at, role``, consecutive positions),
    sealed for ``aead`` (a person's cipher) and signed with ``secret`` — made by hand: the
    messages' texts by id, and the steps, each opened, verified and unpickled through
    the allow-list into its chat item, with the checks coach makes.

    Raises:
        ValueError: A row is not sealed, is missing, does not verify, or unpickles to
            what coach would refuse.
        cryptography.exceptions.InvalidTag: A sealed value does not open.
    """
    decrypt, mac = aead.decrypt, _hmac_sha256(secret)
    equal, Unpickler, BytesIO = hmac.compare_digest, _AllowListUnpickler, io.BytesIO
    messages = "session_conversations.content\x1f" + session_id + "\x1f"
    texts = {}
    for message_id, role, content, at in window:
        ad = (messages + _micros(at) + "\x1f" + role).encode()
        texts[message_id] = _opened(decrypt, content, ad, b"s").decode("utf-8", "surrogatepass")
    bound = _bound(CODEC_NAME, CODEC_VERSION, session_id)
    head = "agent_steps.payload\x1f" + session_id + "\x1f"
    decoded: list[object] = []
    expected = steps[0][0] if steps else 0
    for seq, codec, version, signature, blob, message_id, content, at, role in steps:
        if seq != expected:
            raise ValueError(f"step {expected} is missing")
        expected += 1
        if codec != CODEC_NAME or version != CODEC_VERSION:
            raise ValueError(f"step {seq}: not this codec")
        payload = _opened(decrypt, blob, (head + str(seq)).encode(), b"b")
        text = None
        if content is not None:
            text = texts.get(message_id)
            if text is None:
                ad = (messages + _micros(at) + "\x1f" + role).encode()
                text = _opened(decrypt, content, ad, b"s").decode("utf-8", "surrogatepass")
            said = text.encode("utf-8", "surrogatepass")
            signed = _HEAD_WITH_TEXT + len(said).to_bytes(4, "big") + said
        else:
            signed = _HEAD
        signed += bound + seq.to_bytes(8, "big", signed=True) + payload
        if not equal(mac(signed)[:16], signature):
            raise ValueError(f"step {seq}: signature mismatch")
        if payload[:1] == b"x":
            payload = zlib.decompress(payload)
        envelope = Unpickler(BytesIO(payload)).load()
        if envelope[0] == "p":
            decoded.append(envelope[1])
            continue
        kind, module, name, ident, created, fields, fields_set, private = envelope
        module = module or _CHAT
        if kind not in ("m", "t") or (module, name) not in ALLOWED_GLOBALS:
            raise ValueError(f"step {seq}: {module}.{name} is not allowed")
        if kind == "t":
            if text is None:
                raise ValueError(f"step {seq}: its text is missing")
            fields["content"] = [text]
        fields_set = set(fields if fields_set is None else fields_set)
        if ident is not None:
            fields["id"] = ident
        if created is not None:
            fields["created_at"] = created
        cls, template, factories = _model(module, name)
        state = template.copy()
        state.update(fields)
        for field_name, factory in factories:
            if field_name not in fields:
                state[field_name] = factory()
        step = cls.__new__(cls)  # what pydantic's __setstate__ sets, without the call
        _set(step, "__pydantic_fields_set__", fields_set)
        _set(step, "__pydantic_extra__", None)
        _set(step, "__pydantic_private__", private)
        _set(step, "__dict__", state)
        decoded.append(step)
    return texts, decoded
