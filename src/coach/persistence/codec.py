"""The signed, allow-listed pickle codec for agent memory steps (SPEC §4.4).

Pickle is an explicit choice here: memory steps are LiveKit chat items (pydantic models)
that must come back as the very same objects. Pickle is only ever loaded from bytes this
service wrote, so every blob carries an HMAC-SHA256 under the service secret, bound to
``(codec, version, session_id, seq, payload)``: a blob edited in place, or copied to
another session or position, fails the check. The signature is compared with
:func:`hmac.compare_digest` *before* any unpickling, and unpickling then resolves only
the classes of :data:`ALLOWED_GLOBALS` — a foreign pickle with a ``__reduce__`` payload
can neither pass the signature nor name ``os.system``.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ..errors import CorruptBlob

__all__ = ["ALLOWED_GLOBALS", "CODEC_NAME", "CODEC_VERSION", "EncodedStep", "StepCodec"]

CODEC_NAME: Final = "pickle-hmac-sha256"
CODEC_VERSION: Final = 1
PICKLE_PROTOCOL: Final = 5
_DOMAIN: Final = b"coach.agent_step"

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
    """One step as stored: codec name, codec version, HMAC signature and pickle bytes."""

    seq: int
    codec: str
    version: int
    signature: bytes
    payload: bytes


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
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
        self._secret = secret
        self._allowed = ALLOWED_GLOBALS | frozenset(extra_allowed)

    @staticmethod
    def dumps(step: object) -> bytes:
        """Pickle one step (unsigned; :meth:`sign` binds it to a position)."""
        return pickle.dumps(step, protocol=PICKLE_PROTOCOL)

    def signature(
        self, session_id: str, seq: int, payload: bytes, *, codec: str, version: int
    ) -> bytes:
        """Return the HMAC-SHA256 of a payload bound to its session, position and codec."""
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        for part in (_DOMAIN, codec.encode(), str(version).encode(), session_id.encode()):
            mac.update(len(part).to_bytes(4, "big"))
            mac.update(part)
        mac.update(seq.to_bytes(8, "big", signed=True))
        mac.update(payload)
        return mac.digest()

    def sign(self, session_id: str, seq: int, payload: bytes) -> EncodedStep:
        """Wrap an already pickled payload as the step at ``seq`` of ``session_id``."""
        signature = self.signature(
            session_id, seq, payload, codec=CODEC_NAME, version=CODEC_VERSION
        )
        return EncodedStep(seq, CODEC_NAME, CODEC_VERSION, signature, payload)

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
        where = f"step {stored.seq} of session {session_id}"
        if stored.codec != CODEC_NAME or stored.version != CODEC_VERSION:
            raise CorruptBlob(f"{where}: unknown codec {stored.codec!r} v{stored.version}")
        expected = self.signature(
            session_id, stored.seq, stored.payload, codec=stored.codec, version=stored.version
        )
        if not hmac.compare_digest(expected, bytes(stored.signature)):
            raise CorruptBlob(f"{where}: signature mismatch")
        try:
            return _AllowListUnpickler(bytes(stored.payload), self._allowed).load()
        except Exception as exc:  # any unpickling failure means a corrupt blob
            raise CorruptBlob(f"{where}: {type(exc).__name__}: {exc}") from exc
