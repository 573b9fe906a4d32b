"""Text coach accepts: identities, and strings fit for the model, the database and the room.

Pure Python, shared by every layer: the agents clean what a model passes to a tool, the
repository checks an identity before any database sees it, the chat command checks
``--user`` at start. One rule for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import unicodedata
from typing import Final, overload

from ..errors import InvalidWrite

__all__ = ["MAX_IDENTITY", "check_identity", "clean_text", "identity_keys", "is_clean"]

MAX_IDENTITY: Final = 255
"""Characters an identity may have (the ``users.identity`` column)."""

_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cs"})  # control characters, lone surrogates
_INVISIBLE: Final = "Cf"  # format characters: U+202E (right-to-left override), U+200B, ...


@overload
def clean_text(text: str) -> str: ...
@overload
def clean_text(text: None) -> None: ...
def clean_text(text: str | None) -> str | None:
    """``text`` as valid UTF-8 without NUL bytes: each NUL and lone surrogate becomes U+FFFD.

    A surrogate pair that arrived as two halves (``"\\ud83d\\ude00"``) is joined into
    its character, so a local model's emoji split over two escapes survives.
    """
    if text is None or is_clean(text):
        return text
    cleaned = text.replace("\x00", "\ufffd")
    return cleaned.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def is_clean(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 as it is and holds no NUL byte."""
    if text.isascii():
        return "\x00" not in text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def check_identity(identity: str) -> str:
    """``identity`` in its NFKC form if it may key a user; otherwise :class:`InvalidWrite`
    saying why. Callers key users by the returned form.

    An identity (a LiveKit participant identity, or ``--user`` in chat) has 1 to
    :data:`MAX_IDENTITY` characters, does not start or end with whitespace, and holds no
    control character (NUL, newline, tab, ...), no invisible format character (a
    right-to-left override, a zero-width space: two people would look identical in every
    listing) and no lone surrogate (bytes that were not UTF-8). Compatibility forms are
    folded (NFKC: a full-width ``Ａda`` is ``Ada``). The message is one line meant for the
    person who typed it.
    """
    if not isinstance(identity, str):
        raise InvalidWrite(f"An identity must be text, not {type(identity).__name__}.")
    invisible = sorted(
        {f"U+{ord(c):04X}" for c in identity if unicodedata.category(c) == _INVISIBLE}
    )
    if invisible:
        raise InvalidWrite(
            f"An identity must not hold invisible characters ({', '.join(invisible[:3])})."
        )
    if not identity.isascii():
        identity = unicodedata.normalize("NFKC", identity)
    if not identity.strip():
        raise InvalidWrite("An identity must not be empty.")
    if len(identity) > MAX_IDENTITY:
        raise InvalidWrite(
            f"An identity can have at most {MAX_IDENTITY} characters (this one has "
            f"{len(identity)})."
        )
    if identity != identity.strip():
        raise InvalidWrite("An identity must not start or end with a space.")
    if any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in identity):
        raise InvalidWrite(
            "An identity must be plain text: no control characters and nothing that is not UTF-8."
        )
    return identity


def identity_keys(identity: str) -> tuple[str, ...]:
    """The keys to look a user up by, preferred first: the checked form
    (:func:`check_identity`), then ``identity`` as spelt when that differs.

    Users stored before identities were normalised, or before invisible characters were
    refused, keep their stored spelling: a look-up (``users delete``, ``sessions list
    --user``) must still find them, or they could never be erased. Nothing is created
    under such a spelling. Raises :class:`InvalidWrite` for what no row can hold.
    """
    try:
        key = check_identity(identity)
    except InvalidWrite as refused:
        visible = "".join(c for c in identity if unicodedata.category(c) != _INVISIBLE)
        if visible == identity or len(identity) > MAX_IDENTITY:
            raise
        try:
            check_identity(visible)  # refused for its invisible characters only?
        except InvalidWrite:
            raise refused from None
        return (identity,)
    return (key,) if key == identity else (key, identity)
