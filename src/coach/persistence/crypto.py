"""Envelope encryption of what coach stores about a person.

Three kinds of key, none of them in the data database:

* **Master keys** (``COACH_MASTER_KEY``, and ``COACH_PREVIOUS_MASTER_KEYS`` while keys
  rotate) live in the settings only. They wrap data keys. Each has a key id, a
  fingerprint stored beside every key it wraps, so a rotation knows what to re-wrap.
* **A data key per person**: 256 random bits, made with the person, kept wrapped in the
  key store (:mod:`.keystore`), a database apart from the data. Erasing a person
  destroys it first: every copy of the data — a backup, a replica — then holds nothing
  of them that anyone can read.
* **The lookup key**, random and wrapped in the key store too: a keyed hash of an
  identity finds its user, so the identity itself is stored only sealed.

A sealed field is ``0x01 | nonce (12 bytes) | AES-256-GCM(kind | value)``, where kind is
``s`` (text), ``j`` (JSON) or ``b`` (bytes). Its associated data names the table, the
column and the row (:data:`SEALED`): a ciphertext edited, or moved to another row,
column or person, fails to open (:class:`~coach.errors.CorruptBlob`). ``NULL`` stays
``NULL``: whether a phase has a prompt is no secret, what the prompt says is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ConfigError, CorruptBlob

__all__ = [
    "LOOKUP_OWNER",
    "MIN_MASTER_KEY",
    "SEALED",
    "MasterKey",
    "MasterKeys",
    "Sealed",
    "Sealer",
    "new_data_key",
]

MIN_MASTER_KEY: Final = 32
"""A master key has at least this many characters (``python -m coach keys new`` makes one)."""
LOOKUP_OWNER: Final = "coach:lookup"
"""The key store's name for the lookup key (user ids are 32 hex digits: never this)."""

_FORMAT: Final = b"\x01"
_NONCE: Final = 12
_TEXT, _JSON, _BYTES = b"s", b"j", b"b"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Sealed:
    """The personal columns of one table and the columns that name its row."""

    columns: tuple[str, ...]
    row: tuple[str, ...]


SEALED: Final[Mapping[str, Sealed]] = {
    "users": Sealed(("identity", "display_name"), ("id",)),
    "sessions": Sealed(("design_challenge",), ("id",)),
    "phase_outputs": Sealed(
        ("system_prompt", "user_input", "output", "error", "state_snapshot"),
        ("session_id", "phase_id"),
    ),
    # The database numbers a message only on insert; its time names it instead (a batch
    # stamps its messages a microsecond apart).
    "session_conversations": Sealed(("content",), ("session_id", "created_at", "role")),
    "agent_steps": Sealed(("payload",), ("session_id", "seq")),
    "session_state": Sealed(("data", "template", "view"), ("session_id",)),
    "state_deltas": Sealed(("actor_id", "action", "result"), ("session_id", "step")),
    "persons": Sealed(("value",), ("user_id",)),
    "person_deltas": Sealed(("actor_id", "action", "result"), ("user_id", "step")),
}
"""What is sealed: every personal column, by table, and the columns bound into each
value's associated data. Ids, statuses, times and counts stay clear."""
_SEALING: Final = {
    table: (tuple((column, f"{table}.{column}") for column in spec.columns), spec.row)
    for table, spec in SEALED.items()
}
"""Each table's personal columns with their associated data's head, and its naming
columns: :meth:`Sealer.seal_row` runs for every message and step written."""


def new_data_key() -> bytes:
    """A fresh random 256-bit key."""
    return AESGCM.generate_key(bit_length=256)


def associated(table: str, column: str, row: Iterable[object]) -> bytes:
    """The associated data of ``table.column`` in the row named by ``row``'s values."""
    return _associated(table, column, _named(row))


def _associated(table: str, column: str, named: str) -> bytes:
    """The associated data of ``table.column`` in a row whose naming values are
    ``named`` (:func:`_named`): one row's columns share it."""
    return (table + "." + column + named).encode()


def _named(row: Iterable[object]) -> str:
    """A row's naming values as associated data: each after a ``\x1f``."""
    text = ""
    for value in row:
        if type(value) is str:
            text += "\x1f" + value
        elif isinstance(value, datetime):  # aware: any zone, the same instant
            text += "\x1f" + str((value - _EPOCH) // _MICROSECOND)
        else:
            text += "\x1f" + str(value)
    return text


class Sealer:
    """One person's data key: seals their fields for storage and opens them again."""

    __slots__ = ("_aead", "owner_id")

    def __init__(self, owner_id: str, key: bytes) -> None:
        self.owner_id = owner_id
        self._aead = AESGCM(key)

    def seal(self, table: str, column: str, row: Iterable[object], value: Any) -> bytes | None:
        """``value`` (text, a JSON value or bytes) sealed for ``table.column`` of ``row``."""
        return None if value is None else self._sealed(value, associated(table, column, row))

    def _sealed(self, value: Any, associated_data: bytes) -> bytes:
        if type(value) is bytes:  # a memory step's payload: no copy before the cipher's
            plain = _BYTES + value
        elif isinstance(value, str):
            plain = _TEXT + value.encode("utf-8", "surrogatepass")
        elif isinstance(value, bytes | bytearray | memoryview):
            plain = _BYTES + bytes(value)
        else:
            plain = _JSON + json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        return _FORMAT + self._encrypt(plain, associated_data)

    def open(self, table: str, column: str, row: Iterable[object], blob: object) -> Any:
        """The value :meth:`seal` sealed, for the same ``table.column`` and row.

        Raises:
            CorruptBlob: ``blob`` was not sealed there with this person's key (edited,
                moved to another row, column or person), or is not sealed at all.
        """
        if blob is None:
            return None
        data = blob if type(blob) is bytes else _bytes(blob)
        if data[:1] != _FORMAT:
            raise CorruptBlob(f"{table}.{column} of user {self.owner_id} is not sealed")
        try:
            plain = self._decrypt(data[1:], associated(table, column, row))
        except InvalidTag:
            raise CorruptBlob(
                f"{table}.{column} of user {self.owner_id} fails its authentication "
                "(edited, or moved from another row or person)"
            ) from None
        kind, body = plain[:1], plain[1:]
        if kind == _TEXT:
            return body.decode("utf-8", "surrogatepass")
        if kind == _JSON:
            return json.loads(body)
        return body

    def _encrypt(self, plain: bytes, associated_data: bytes) -> bytes:
        """``nonce | ciphertext | tag`` of ``plain`` (the cipher alone: the bench measures
        its cost by replacing it)."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, plain, associated_data)

    def _decrypt(self, sealed: bytes, associated_data: bytes) -> bytes:
        """``plain`` of :meth:`_encrypt`; :class:`InvalidTag` if it does not authenticate."""
        if len(sealed) < _NONCE + 16:
            raise InvalidTag
        return self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], associated_data)

    def seal_row(self, table: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (a row to insert) with its personal columns sealed; the row's
        naming columns must be among ``values``."""
        heads, naming = _SEALING[table]
        out, named = dict(values), None
        for column, head in heads:
            value = out.get(column)
            if value is not None:
                if named is None:
                    named = _named(map(values.__getitem__, naming))
                out[column] = self._sealed(value, (head + named).encode())
        return out

    def open_row(self, table: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (a row read) with its personal columns opened."""
        return _each(table, values, self.open)


def _bytes(blob: object) -> bytes:
    """A driver's binary value as bytes; anything else as no bytes at all."""
    return bytes(blob) if isinstance(blob, bytes | bytearray | memoryview) else b""


def _each(
    table: str, values: Mapping[str, Any], change: Callable[[str, str, list[Any], Any], Any]
) -> dict[str, Any]:
    """``values`` with ``change`` applied to each personal column of ``table`` present."""
    spec = SEALED[table]
    row = [values[name] for name in spec.row]
    out = dict(values)
    for column in spec.columns:
        if column in out:
            out[column] = change(table, column, row, out[column])
    return out


def _derive(material: str) -> bytes:
    return hashlib.sha256(b"coach.master_key\x00" + material.encode()).digest()


class MasterKey:
    """A master key from the settings: wraps and unwraps data keys.

    Raises:
        ConfigError: ``material`` is shorter than :data:`MIN_MASTER_KEY` characters.
    """

    __slots__ = ("_aead", "key_id")

    def __init__(self, material: str, *, setting: str = "COACH_MASTER_KEY") -> None:
        if len(material) < MIN_MASTER_KEY:
            raise ConfigError(
                f"{setting} must be at least {MIN_MASTER_KEY} characters long; make one with: "
                "python -m coach keys new"
            )
        key = _derive(material)
        self.key_id = hmac.new(key, b"coach.key_id", hashlib.sha256).hexdigest()[:16]
        """A fingerprint of the key, stored beside what it wraps (it reveals nothing)."""
        self._aead = AESGCM(key)

    def wrap(self, owner_id: str, data_key: bytes) -> bytes:
        """``data_key`` of ``owner_id``, wrapped for the key store."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, data_key, self._bound(owner_id))

    def unwrap(self, owner_id: str, wrapped: bytes) -> bytes:
        """The data key :meth:`wrap` wrapped for ``owner_id``.

        Raises:
            CorruptBlob: ``wrapped`` is not ``owner_id``'s key under this master key.
        """
        try:
            return self._aead.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], self._bound(owner_id))
        except InvalidTag:
            raise CorruptBlob(
                f"the data key of {owner_id} fails its authentication under master key "
                f"{self.key_id}"
            ) from None

    def _bound(self, owner_id: str) -> bytes:
        return f"coach.data_key\x1f{owner_id}\x1f{self.key_id}".encode()


class MasterKeys:
    """The current master key, which wraps every new key, and the previous ones, which
    still unwrap what they wrapped until ``python -m coach keys rotate`` re-wraps it."""

    def __init__(self, current: MasterKey, previous: Iterable[MasterKey] = ()) -> None:
        self.current = current
        self._by_id = {key.key_id: key for key in (*previous, current)}

    @classmethod
    def of(cls, current: str, previous: Iterable[str] = ()) -> MasterKeys:
        """From the settings' text (``COACH_MASTER_KEY``, ``COACH_PREVIOUS_MASTER_KEYS``)."""
        return cls(
            MasterKey(current),
            [MasterKey(text, setting="COACH_PREVIOUS_MASTER_KEYS") for text in previous],
        )

    def unwrap(self, owner_id: str, key_id: str, wrapped: bytes) -> bytes:
        """The data key of ``owner_id``, wrapped under master key ``key_id``.

        Raises:
            ConfigError: No configured master key has that id.
        """
        master = self._by_id.get(key_id)
        if master is None:
            raise ConfigError(
                f"A data key is wrapped by master key {key_id}, which is not configured: "
                "set that key in COACH_MASTER_KEY or COACH_PREVIOUS_MASTER_KEYS (and run "
                "python -m coach keys rotate once the current one is set)."
            )
        return master.unwrap(owner_id, wrapped)
