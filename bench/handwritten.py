"""The contract's work written by hand: what any Python storage layer must do, and no more.

The targets of issue 25 compare coach with a peer that stores its items as plain JSON
(agents' ``SQLiteSession``) and with raw writers that take rows already encoded. Coach's
contract asks more of every row: personal text sealed with the person's key (AES-GCM,
the row named in its associated data), every memory step signed (HMAC-SHA256) and, on
the way back, verified and unpickled through the allow-list into the chat items an agent
resumes with (SPEC §4.4, issue 24). These two functions do exactly that work — the same
rows, byte for byte where nothing is random, as coach's own functions make and read
them (``tests/test_bench_handwritten.py``) — in one loop each, with every constant made
before the loop, no record, no layer, no check the rows do not need.

So they are a floor for *any* implementation of the contract in Python: the raw
database work plus one of them is the least a recorder or a resume can cost. Where that
sum is already above a target, the target cannot be met without giving up part of the
contract; where it is below, what lies between it and coach is coach's own code.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coach.persistence.codec import (
    _HEAD,
    _HEAD_WITH_TEXT,
    ALLOWED_GLOBALS,
    CODEC_NAME,
    CODEC_VERSION,
    COMPRESS_FROM,
    PICKLE_PROTOCOL,
    _bound,
    _model,
)
from coach.store import AddMessage, AppendSteps

from .rawrows import RawBatch

__all__ = ["hand_batches", "hand_decode"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CHAT = "livekit.agents.llm.chat_context"


def _micros(at: datetime | str) -> str:
    """A time as the associated data names it: microseconds since the epoch. SQLite
    returns UTC text."""
    if isinstance(at, str):
        at = datetime.fromisoformat(at).replace(tzinfo=UTC)
    delta = at - _EPOCH
    return str((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _hmac_sha256(key: bytes) -> Callable[[bytes], bytes]:
    """HMAC-SHA256 under ``key`` (RFC 2104) with its two padded key states hashed once:
    the same digest as :func:`hmac.digest`, less work per message."""
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def mac(message: bytes) -> bytes:
        i, o = inner.copy(), outer.copy()
        i.update(message)
        o.update(i.digest())
        return o.digest()

    return mac


def _changed(cls: type) -> Callable[[Any], dict[str, Any]]:
    """A pydantic model's fields that differ from their defaults (a factory's value
    made once, to compare with), as coach's codec stores them."""
    defaults = {
        name: info.default_factory() if info.default_factory is not None else info.default
        for name, info in cls.model_fields.items()  # type: ignore[attr-defined]
    }
    missing = object()

    def changed(model: Any) -> dict[str, Any]:
        return {k: v for k, v in model.__dict__.items() if defaults.get(k, missing) != v}

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
        nonces, used = os.urandom(12 * 3 * batch), 0  # random nonces, read in bulk
        appends: dict[str, tuple[int, list[Any]]] = {}
        waiting: dict[tuple[str, object, str], deque[int]] = {}
        for op in ops[first : first + batch]:
            if type(op) is AddMessage:
                sid, role, words = op.session_id, op.role, op.content
                waiting.setdefault((sid, role, words), deque()).append(len(rows.messages))
                ad = ("session_conversations.content\x1f" + sid + at + role).encode()
                if used + 12 > len(nonces):
                    nonces, used = os.urandom(12 * 3 * batch), 0
                nonce, used = nonces[used : used + 12], used + 12
                plain = b"s" + words.encode("utf-8", "surrogatepass")
                sealed = b"\x01" + nonce + encrypt(nonce, plain, ad)
                rows.messages.append((sid, role, sealed))
            elif type(op) is AppendSteps:
                appends.setdefault(op.session_id, (op.start, []))[1].extend(op.steps)
            else:
                raise TypeError(f"hand-written rows know messages and steps, not {op!r}")
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
                if used + 12 > len(nonces):
                    nonces, used = os.urandom(12 * 3 * batch), 0
                nonce, used = nonces[used : used + 12], used + 12
                ad = (head + str(seq)).encode()
                sealed = b"\x01" + nonce + encrypt(nonce, b"b" + payload, ad)
                rows.links.append(link)
                rows.steps.append((sid, seq, CODEC_NAME, CODEC_VERSION, signature, sealed))
        out.append(rows)
    return out


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def hand_decode(
    aead: AESGCM, secret: bytes, session_id: str, window: Sequence[Any], steps: Sequence[Any]
) -> tuple[dict[int, str], list[object]]:
    """What a resume decodes of the rows :meth:`RawCoachRows.resume_rows` reads —
    ``window`` (``id, role, content, created_at``) and ``steps`` (``seq, codec, version,
    signature, payload, message id, content, created_at, role``), sealed for ``aead`` (a
    person's cipher) and signed with ``secret`` — made by hand: the
    messages' texts by id, and the steps, each opened, verified and unpickled through
    the allow-list into its chat item.

    Raises:
        ValueError: A row does not open, verify or unpickle (the bench's rows always do).
    """
    decrypt, mac = aead.decrypt, _hmac_sha256(secret)
    equal, Unpickler, BytesIO = hmac.compare_digest, _Unpickler, io.BytesIO
    messages = "session_conversations.content\x1f" + session_id + "\x1f"
    texts = {}
    for message_id, role, content, at in window:
        ad = (messages + _micros(at) + "\x1f" + role).encode()
        plain = decrypt(content[1:13], content[13:], ad)
        texts[message_id] = plain[1:].decode("utf-8", "surrogatepass")
    bound = _bound(CODEC_NAME, CODEC_VERSION, session_id)
    head = "agent_steps.payload\x1f" + session_id + "\x1f"
    decoded: list[object] = []
    for seq, codec, version, signature, blob, message_id, content, at, role in steps:
        if codec != CODEC_NAME or version != CODEC_VERSION:
            raise ValueError(f"step {seq}: not this codec")
        payload = decrypt(blob[1:13], blob[13:], (head + str(seq)).encode())[1:]
        text = None
        if content is not None:
            text = texts.get(message_id)
            if text is None:
                ad = (messages + _micros(at) + "\x1f" + role).encode()
                plain = decrypt(content[1:13], content[13:], ad)
                text = plain[1:].decode("utf-8", "surrogatepass")
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
        if (module, name) not in ALLOWED_GLOBALS:
            raise ValueError(f"step {seq}: {module}.{name} is not allowed")
        if kind == "t":
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
        step = cls.__new__(cls)
        step.__setstate__(
            {
                "__dict__": state,
                "__pydantic_extra__": None,
                "__pydantic_fields_set__": fields_set,
                "__pydantic_private__": private,
            }
        )
        decoded.append(step)
    return texts, decoded
