"""The signed, allow-listed pickle codec for agent memory steps (SPEC §4.4).

Pickle is an explicit choice here: memory steps are LiveKit chat items (pydantic models)
that must come back as the very same objects. Pickle is only ever loaded from bytes this
service wrote, so every blob carries an HMAC-SHA256 under the service secret, bound to
``(codec, version, session_id, seq, payload)``: a blob edited in place, or copied to
another session or position, fails the check. The signature is compared with
:func:`hmac.compare_digest` *before* any unpickling, and unpickling then resolves only
the classes of :data:`ALLOWED_GLOBALS` — a foreign pickle with a ``__reduce__`` payload
can neither pass the signature nor name ``os.system``.

**Version 2** (written now) is compact: a chat item is pickled as its class name and
only the fields that differ from their defaults (not the whole pydantic state with
every field name), and a pickle of :data:`COMPRESS_FROM` bytes or more is
zlib-compressed when that is smaller (a shorter one never gains, and starting zlib
costs more than the rest of the encoding). A message
whose text is also a conversation row leaves the text out (``elide_text``): the row
supplies it on load, and the signature binds that text too, so the step still comes
back exactly or not at all. Its signature is the first 128 bits of the HMAC. Version 1
(a plain pickle of the object, with the full 256-bit HMAC), written by earlier
releases, still decodes; migration 0003 converts stored rows to version 2.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib
import io
import pickle
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import CorruptBlob

__all__ = ["ALLOWED_GLOBALS", "CODEC_NAME", "CODEC_VERSION", "EncodedStep", "StepCodec"]

CODEC_NAME: Final = "pickle-hmac-sha256"
CODEC_VERSION: Final = 2
PICKLE_PROTOCOL: Final = 5
COMPRESS_FROM: Final = 256
"""A pickle shorter than this is stored as it is: ~5 µs of zlib per step saved, and a
chat item with its text left out (~90 bytes) does not shrink anyway."""
_ZLIB_HEADER: Final = b"x"  # a pickle starts with b"\x80"; a zlib stream with b"x"
_MODEL: Final = "m"
_MODEL_WITHOUT_TEXT: Final = "t"
_PLAIN: Final = "p"
_DOMAIN: Final = b"coach.agent_step"
_DOMAIN_WITH_TEXT: Final = b"coach.agent_step+text"

_CHAT = "livekit.agents.llm.chat_context"
ALLOWED_GLOBALS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        # containers and primitives pickle protocol 5 does not encode natively
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("builtins", "complex"),
        ("builtins", "range"),
        ("builtins", "slice"),
        ("builtins", "object"),
        ("collections", "OrderedDict"),
        ("copyreg", "_reconstructor"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("uuid", "UUID"),
        # LiveKit chat items (the memory steps) and their content types
        (_CHAT, "ChatMessage"),
        (_CHAT, "FunctionCall"),
        (_CHAT, "FunctionCallOutput"),
        (_CHAT, "AgentHandoff"),
        (_CHAT, "AgentConfigUpdate"),
        (_CHAT, "ImageContent"),
        (_CHAT, "AudioContent"),
        (_CHAT, "CacheBreakpoint"),
        (_CHAT, "Instructions"),
        ("livekit.rtc.audio_frame", "AudioFrame"),
    }
)
"""The only globals an unpickled memory step may refer to."""


@dataclass(frozen=True, slots=True)
class EncodedStep:
    """One step as stored: codec name, codec version, HMAC signature and pickle bytes —
    and the text of its conversation row when the payload left it out."""

    seq: int
    codec: str
    version: int
    signature: bytes
    payload: bytes
    text: str | None = None


class _AllowListUnpickler(pickle.Unpickler):
    """Resolves only the globals of ``allowed`` (a class attribute: each codec makes a
    subclass with its own, so no Python ``__init__`` runs per step)."""

    allowed: frozenset[tuple[str, str]] = ALLOWED_GLOBALS

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


class StepCodec:
    """Encodes memory steps to signed pickle blobs and decodes them back.

    Args:
        secret: The HMAC key (``Settings.memory_secret``); at least 16 bytes, the same
            on every worker that shares a database.
        extra_allowed: ``(module, name)`` pairs to allow besides :data:`ALLOWED_GLOBALS`.
    """

    def __init__(self, secret: bytes, *, extra_allowed: Iterable[tuple[str, str]] = ()) -> None:
        if len(secret) < 16:
            raise ValueError("the memory secret must be at least 16 bytes long")
        self._hmac = _hmac_sha256(secret)
        self._allowed = ALLOWED_GLOBALS | frozenset(extra_allowed)
        self._models: dict[type, bool] = {}
        """Whether a step's class is an allowed pydantic model, by class (pydantic makes
        even ``hasattr(cls, "model_fields")`` cost a microsecond)."""
        self._unpickler = type(
            "_CodecUnpickler", (_AllowListUnpickler,), {"allowed": self._allowed}
        )

    def dumps(self, step: object, *, elide_text: bool = False) -> bytes:
        """Encode one step as a version-2 payload (unsigned; :meth:`sign` binds it).

        With ``elide_text`` the step must be a chat message whose ``content`` is one
        string, which is left out (its conversation row keeps it; sign with ``text``).
        Raises whatever :func:`pickle.dumps` raises for an object it cannot pickle.
        """
        cls = type(step)
        model = self._models.get(cls)
        if model is None:
            allowed = (cls.__module__, cls.__name__) in self._allowed
            model = self._models[cls] = allowed and hasattr(cls, "model_fields")
        if model:
            fields, fields_set, private = _state(step)
            kind = _MODEL
            if elide_text:
                del fields["content"]
                kind = _MODEL_WITHOUT_TEXT
            # Most steps are LiveKit chat items: their module is implied, their id and
            # time go by position, and the fields set are implied when they are the
            # fields stored (plus the text left out).
            module = "" if cls.__module__ == _CHAT else cls.__module__
            ident, created = fields.pop("id", None), fields.pop("created_at", None)
            implied = set(fields) | ({"content"} if elide_text else set())
            given = None if set(fields_set) == implied else fields_set
            envelope: tuple[object, ...] = (kind, module, cls.__name__, ident, created)
            envelope += (fields, given, private)
        else:
            envelope = (_PLAIN, step)
        raw = pickle.dumps(envelope, protocol=PICKLE_PROTOCOL)
        if len(raw) < COMPRESS_FROM:
            return raw
        packed = zlib.compress(raw, 6)
        return packed if len(packed) < len(raw) else raw

    def signature(
        self,
        session_id: str,
        seq: int,
        payload: bytes,
        *,
        codec: str,
        version: int,
        text: str | None = None,
    ) -> bytes:
        """Return the HMAC-SHA256 of a payload bound to its session, position and codec
        (and to the text it left out, if any)."""
        return self._mac(_bound(codec, version, session_id), seq, payload, version, text)

    def signer(self, session_id: str) -> Callable[[int, bytes, str | None], bytes]:
        """:meth:`signature` of the current codec version for the steps of one session,
        as ``sign(seq, payload, text)``: what binds the session is made once."""
        bound = _bound(CODEC_NAME, CODEC_VERSION, session_id)
        mac = self._mac
        return lambda seq, payload, text: mac(bound, seq, payload, CODEC_VERSION, text)

    def _mac(self, bound: bytes, seq: int, payload: bytes, version: int, text: str | None) -> bytes:
        # The message is the length-prefixed parts — the domain, the text left out (if
        # any), codec, version, session — then the position and the payload; ``bound``
        # is the codec, version and session part, the same for every step of a batch.
        if text is None:
            head = _HEAD
        else:
            said = text.encode("utf-8", "surrogatepass")
            head = _HEAD_WITH_TEXT + len(said).to_bytes(4, "big") + said
        digest = self._hmac(head + bound + seq.to_bytes(8, "big", signed=True) + payload)
        # Version 2 keeps the first 128 bits (HMAC-SHA256-128): as strong against forgery
        # as needed here, and half the bytes on every stored step.
        return digest if version == 1 else digest[:16]

    def sign(
        self,
        session_id: str,
        seq: int,
        payload: bytes,
        *,
        version: int = CODEC_VERSION,
        text: str | None = None,
    ) -> EncodedStep:
        """Wrap an already encoded payload as the step at ``seq`` of ``session_id``
        (``text``: the message text the payload left out)."""
        signature = self.signature(
            session_id, seq, payload, codec=CODEC_NAME, version=version, text=text
        )
        return EncodedStep(seq, CODEC_NAME, version, signature, payload, text)

    def encode(self, session_id: str, seq: int, step: object) -> EncodedStep:
        """Pickle and sign one step."""
        return self.sign(session_id, seq, self.dumps(step))

    def decode(self, session_id: str, stored: EncodedStep) -> object:
        """Check a stored step's signature, then unpickle it with the allow-list.

        Raises:
            CorruptBlob: If the codec is unknown, the signature does not match (tampered,
                foreign or moved blob), or the payload does not unpickle within the
                allow-list. Nothing of the payload runs in any of these cases.
        """
        row = (stored.seq, stored.codec, stored.version, stored.signature, stored.payload)
        return self.decode_rows(session_id, [(*row, stored.text)])[0]

    def decode_rows(self, session_id: str, rows: Iterable[Sequence[Any]]) -> list[object]:
        """:meth:`decode` of many rows of one session, each ``(seq, codec, version,
        signature, payload, text)`` as stored (columns after those are ignored).

        Raises:
            CorruptBlob: At the first row :meth:`decode` would refuse.
        """
        bound: dict[tuple[str, int], bytes] = {}
        steps = []
        for row in rows:
            seq, codec, version, signature, payload, text = row[:6]
            key = (codec, version)
            if key not in bound:
                if codec != CODEC_NAME or version not in (1, CODEC_VERSION):
                    where = f"step {seq} of session {session_id}"
                    raise CorruptBlob(f"{where}: unknown codec {codec!r} v{version}")
                bound[key] = _bound(codec, version, session_id)
            payload = bytes(payload)
            expected = self._mac(bound[key], seq, payload, version, text)
            if not hmac.compare_digest(expected, bytes(signature)):
                raise CorruptBlob(f"step {seq} of session {session_id}: signature mismatch")
            try:
                if version == 1:
                    steps.append(self._unpickler(io.BytesIO(payload)).load())
                    continue
                if payload[:1] == _ZLIB_HEADER:
                    payload = zlib.decompress(payload)
                envelope = self._unpickler(io.BytesIO(payload)).load()
                steps.append(self._restore(envelope, text))
            except Exception as exc:  # any unpickling failure means a corrupt blob
                where = f"step {seq} of session {session_id}"
                raise CorruptBlob(f"{where}: {type(exc).__name__}: {exc}") from exc
        return steps

    def _restore(self, envelope: Any, text: str | None) -> object:
        if envelope[0] == _PLAIN:
            return envelope[1]
        kind, module, name, ident, created, fields, fields_set, private = envelope
        module = module or _CHAT
        if kind not in (_MODEL, _MODEL_WITHOUT_TEXT) or (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        if kind == _MODEL_WITHOUT_TEXT:
            if text is None:
                raise pickle.UnpicklingError("the step's text is missing")
            fields["content"] = [text]  # a dict the unpickler just made: ours to change
        if fields_set is None:
            fields_set = tuple(fields)
        if ident is not None:
            fields["id"] = ident
        if created is not None:
            fields["created_at"] = created
        cls, template, factories = _model(module, name)
        state = template.copy()  # every field in the model's order, then the stored ones
        state.update(fields)
        for field_name, factory in factories:
            if field_name not in fields:
                state[field_name] = factory()
        step = cls.__new__(cls)
        # What pydantic's ``__setstate__`` sets, set here without building its dict.
        _set(step, "__pydantic_fields_set__", set(fields_set))
        _set(step, "__pydantic_extra__", None)
        _set(step, "__pydantic_private__", private)
        _set(step, "__dict__", state)
        return step


def _state(model: Any) -> tuple[dict[str, Any], tuple[str, ...], object]:
    """A pydantic model's fields that differ from their defaults, its set fields and its
    private attributes: all that is needed to build it again."""
    defaults = _default_values(type(model))  # type: ignore[arg-type]
    fields = {
        name: value
        for name, value in model.__dict__.items()
        if defaults.get(name, _NO_DEFAULT) != value
    }
    return fields, tuple(sorted(model.__pydantic_fields_set__)), model.__pydantic_private__


def _part(part: bytes) -> bytes:
    return len(part).to_bytes(4, "big") + part


_HEAD: Final = _part(_DOMAIN)
_HEAD_WITH_TEXT: Final = _part(_DOMAIN_WITH_TEXT)


@functools.lru_cache(maxsize=1024)
def _bound(codec: str, version: int, session_id: str) -> bytes:
    """The signed message's codec, version and session parts (made once for a session
    the process writes or reads again)."""
    return _part(codec.encode()) + _part(str(version).encode()) + _part(session_id.encode())


@functools.cache
def _model(module: str, name: str) -> tuple[Any, dict[str, object], tuple[tuple[str, Any], ...]]:
    """An allowed model class (the caller checked the allow-list), its fields in order
    with their defaults (``None`` where a factory makes the value), and the factories:
    resolved once per class."""
    cls = getattr(importlib.import_module(module), name)
    defaults = _defaults(cls)
    template = {n: (None if f is not None else d) for n, (d, f) in defaults.items()}
    factories = tuple((n, f) for n, (d, f) in defaults.items() if f is not None)
    return cls, template, factories


@functools.cache
def _defaults(cls: Any) -> dict[str, tuple[object, Callable[[], object] | None]]:
    """Each field's ``(default, default_factory)`` (a factory's result is made per use)."""
    return {name: (info.default, info.default_factory) for name, info in cls.model_fields.items()}


@functools.cache
def _default_values(cls: type) -> dict[str, object]:
    """Each field's default value, a factory's made once: compared against only, never
    handed out (a fresh value is made for every decode)."""
    return {name: d if f is None else f() for name, (d, f) in _defaults(cls).items()}


_NO_DEFAULT: Final = object()
_set: Final = object.__setattr__


def _hmac_sha256(key: bytes) -> Callable[[bytes], bytes]:
    """HMAC-SHA256 under ``key`` (RFC 2104) with its two padded key blocks hashed once:
    the digest of :func:`hmac.digest`, for about half its CPU on a step."""
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = hashlib.sha256(key.translate(_INNER_PAD))
    outer = hashlib.sha256(key.translate(_OUTER_PAD))

    def mac(message: bytes) -> bytes:
        hashed = inner.copy()
        hashed.update(message)
        signed = outer.copy()
        signed.update(hashed.digest())
        return signed.digest()

    return mac


_INNER_PAD: Final = bytes(x ^ 0x36 for x in range(256))
_OUTER_PAD: Final = bytes(x ^ 0x5C for x in range(256))
