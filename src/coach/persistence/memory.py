"""Agent memory steps: signed pickles, one row per step, append-only (SPEC §4.4).

``sessions.memory_steps`` is the stored count: an append claims its positions there (the
claim is the conflict check), and a load checks that the rows it read are exactly the
positions it asked for, so a cut history — first or last rows deleted — is reported as
corrupt instead of silently loading a shorter one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Connection

from ..errors import CorruptBlob, InvalidWrite
from .codec import CODEC_NAME, CODEC_VERSION, StepCodec
from .conversation import open_content
from .crypto import Sealer
from .driver import DriverQuery, utc
from .schema import AGENT_STEPS, CONVERSATIONS, SESSIONS
from .sql import AnyRow

__all__ = [
    "StepLinks",
    "decode_or_empty",
    "encode_rows",
    "message_text",
    "opened_steps",
    "read_steps",
    "fetch_steps",
    "fetch_steps_from_message",
    "step_links",
    "step_window",
    "stored_count",
]

log = logging.getLogger("coach.persistence")

_COLUMNS: Final = (
    AGENT_STEPS.c.seq,
    AGENT_STEPS.c.codec,
    AGENT_STEPS.c.version,
    AGENT_STEPS.c.signature,
    AGENT_STEPS.c.payload,
)


def message_text(step: object) -> tuple[str, str] | None:
    """``(role, text)`` of a chat message whose content is one string (its text can live
    in the conversation row alone), else ``None``."""
    content = getattr(step, "content", None)
    role = getattr(step, "role", None)
    if isinstance(role, str) and isinstance(content, list) and len(content) == 1:
        if isinstance(content[0], str):
            return role, content[0]
    return None


_OLDER: Final = AGENT_STEPS.alias("older")
_COUNT_OF: Final = select(SESSIONS.c.memory_steps).where(SESSIONS.c.id == bindparam("b_id"))
_COUNT: Final = DriverQuery(_COUNT_OF)
_COUNT_LOCKED: Final = DriverQuery(_COUNT_OF.with_for_update(key_share=True))


def encode_rows(
    codec: StepCodec,
    session_id: str,
    start: int,
    steps: Sequence[object],
    *,
    shared: Sequence[str | None] = (),
) -> list[dict[str, Any]]:
    """Encode and sign ``steps`` as the rows at ``start, start + 1, ...``.

    ``shared[i]``, when not ``None``, is the text of message step ``i`` that a
    conversation row written in the same transaction holds: its payload leaves the text
    out, the signature binds it, and the caller sets the row's ``message_id``.

    Raises:
        InvalidWrite: A step cannot be pickled (nothing is written).
    """
    rows = []
    sign, dumps = codec.signer(session_id), codec.dumps
    for index, step in enumerate(steps):
        seq = start + index
        text = shared[index] if index < len(shared) else None
        try:
            payload = dumps(step, elide_text=text is not None)
        except Exception as exc:  # pickle raises PicklingError, TypeError, AttributeError
            raise InvalidWrite(f"memory step {seq} cannot be pickled: {exc}") from exc
        rows.append(
            {
                "session_id": session_id,
                "seq": seq,
                "codec": CODEC_NAME,
                "version": CODEC_VERSION,
                "signature": sign(seq, payload, text),
                "payload": payload,
                "message_id": None,
            }
        )
    return rows


def stored_count(conn: Connection, session_id: str, *, lock: bool = False) -> int | None:
    """The session's stored step count (``None``: no such session); ``lock`` holds the
    session row until the transaction ends."""
    rows = (_COUNT_LOCKED if lock else _COUNT).rows(conn, {"b_id": session_id})
    return int(rows[0][0]) if rows else None


def step_window(
    count: int, *, newest: int | None = None, since: int | None = None, limit: int | None = None
) -> tuple[int, int]:
    """The positions ``[first, end)`` to load of ``count`` stored: all, the newest N, or
    from ``since`` on — at most ``limit`` of them (a page)."""
    first = 0
    if newest is not None:
        first = max(first, count - max(newest, 0))
    if since is not None:
        first = max(first, min(max(since, 0), count))
    end = count if limit is None else min(count, first + max(limit, 0))
    return first, end


_TEXT: Final = (
    CONVERSATIONS.c.id.label("message_id"),
    CONVERSATIONS.c.content,
    CONVERSATIONS.c.created_at.label("message_at"),
    CONVERSATIONS.c.role.label("message_role"),
)
_IN_RANGE: Final = (
    AGENT_STEPS.c.session_id == bindparam("b_id"),
    AGENT_STEPS.c.seq >= bindparam("b_first"),
    AGENT_STEPS.c.seq < bindparam("b_end"),
)
"""A session's steps at positions ``b_first`` up to ``b_end``."""
_STEPS: Final = (
    select(*_COLUMNS, *_TEXT)
    .outerjoin(CONVERSATIONS, CONVERSATIONS.c.id == AGENT_STEPS.c.message_id)
    .where(*_IN_RANGE)
    .order_by(AGENT_STEPS.c.seq)
)


def fetch_steps(conn: Connection, session_id: str, first: int, end: int) -> list[AnyRow]:
    """The rows at positions ``first .. end - 1`` in order (served by the primary key),
    each with the text of its conversation row when it has one."""
    if end <= first:
        return []
    params = {"b_id": session_id, "b_first": first, "b_end": end}
    return list(conn.execute(_STEPS, params).all())


_FROM_MESSAGE: Final = func.coalesce(
    select(func.min(_OLDER.c.seq))
    .where(
        _OLDER.c.session_id == bindparam("b_id"),
        _OLDER.c.seq >= bindparam("b_first"),
        _OLDER.c.seq < bindparam("b_end"),
        _OLDER.c.message_id >= bindparam("b_message"),
    )
    .scalar_subquery(),
    bindparam("b_first"),
)
_STEPS_FROM_MESSAGE: Final = DriverQuery(
    select(*_COLUMNS, *_TEXT, _FROM_MESSAGE.label("start"))
    .outerjoin(CONVERSATIONS, CONVERSATIONS.c.id == AGENT_STEPS.c.message_id)
    .where(
        AGENT_STEPS.c.session_id == bindparam("b_id"),
        AGENT_STEPS.c.seq >= _FROM_MESSAGE,
        AGENT_STEPS.c.seq < bindparam("b_end"),
    )
    .order_by(AGENT_STEPS.c.seq)
)


def fetch_steps_from_message(
    conn: Connection, session_id: str, first: int, end: int, message_id: int | None
) -> tuple[int, list[AnyRow]]:
    """The rows of :func:`fetch_steps`, but from the first step (of ``first .. end - 1``)
    that carries message ``message_id`` or a later one — the steps of the exchanges since
    that message. No such step (or ``message_id`` ``None``): from ``first``. Returns the
    position the rows start at, and the rows."""
    if end <= first:
        return first, []
    params = {"b_id": session_id, "b_first": first, "b_end": end, "b_message": message_id}
    rows = _STEPS_FROM_MESSAGE.rows(conn, params)
    return (int(rows[0].start) if rows else first), rows


def read_steps(
    conn: Connection,
    session_id: str,
    *,
    newest: int | None = None,
    since: int | None = None,
    limit: int | None = None,
) -> tuple[int, int, list[AnyRow]]:
    """The stored rows of the window (see :func:`step_window`): ``(first, end, rows)``."""
    count = stored_count(conn, session_id) or 0
    first, end = step_window(count, newest=newest, since=since, limit=limit)
    return first, end, fetch_steps(conn, session_id, first, end)


def opened_steps(
    sealer: Sealer,
    session_id: str,
    rows: Sequence[AnyRow],
    known: Mapping[int, str] | None = None,
) -> list[tuple[Any, ...]]:
    """Rows of :func:`fetch_steps` as the codec reads them — ``(seq, codec, version,
    signature, payload, text)`` — their payload and message text opened. ``known``:
    messages already opened, by id (a resume's window), whose text is not opened again.

    Raises:
        CorruptBlob: A sealed value fails its authentication.
    """
    opened = []
    for row in rows:
        payload = sealer.open("agent_steps", "payload", (session_id, row.seq), row.payload)
        text = row.content
        if text is not None:
            text = known.get(row.message_id) if known else None
            if text is None:
                text = open_content(
                    sealer, session_id, utc(row.message_at), row.message_role, row.content
                )
        opened.append((row.seq, row.codec, row.version, row.signature, payload, text))
    return opened


def _decode_all(
    codec: StepCodec,
    sealer: Sealer,
    session_id: str,
    rows: Sequence[AnyRow],
    first: int,
    end: int,
    known: Mapping[int, str] | None = None,
) -> list[object]:
    if len(rows) != end - first:
        present = {row.seq for row in rows}
        missing = next(seq for seq in range(first, end) if seq not in present)
        raise CorruptBlob(
            f"session {session_id}: memory step {missing} is missing "
            f"({len(rows)} of steps {first}..{end - 1} stored)"
        )
    return codec.decode_rows(session_id, opened_steps(sealer, session_id, rows, known))


def decode_or_empty(
    codec: StepCodec,
    sealer: Sealer,
    session_id: str,
    rows: Sequence[AnyRow],
    first: int,
    end: int,
    known: Mapping[int, str] | None = None,
) -> list[object]:
    """The decoded steps ``first .. end - 1``; ``[]`` (logged) if any is missing, corrupt,
    tampered with or foreign. Nothing of a rejected blob is ever executed. ``known``: see
    :func:`opened_steps`."""
    try:
        return _decode_all(codec, sealer, session_id, rows, first, end, known)
    except CorruptBlob as exc:
        log.error(
            "stored memory steps cannot be loaded; falling back to reconstruction: %s",
            exc,
            extra={"session_id": session_id},
        )
        return []


_LINKS: Final = (
    select(AGENT_STEPS.c.seq, CONVERSATIONS.c.id, CONVERSATIONS.c.phase_id)
    .join(CONVERSATIONS, CONVERSATIONS.c.id == AGENT_STEPS.c.message_id)
    .where(*_IN_RANGE)
    .order_by(AGENT_STEPS.c.seq)
)
_LINK_BEFORE: Final = (
    select(CONVERSATIONS.c.phase_id)
    .join(AGENT_STEPS, CONVERSATIONS.c.id == AGENT_STEPS.c.message_id)
    .where(AGENT_STEPS.c.session_id == bindparam("b_id"), AGENT_STEPS.c.seq < bindparam("b_first"))
    .order_by(AGENT_STEPS.c.seq.desc())
    .limit(1)
)


StepLinks = tuple[list[int | None], list[str | None]]
"""Per step of a window: the id of the conversation message it carries, and its phase."""


def step_links(conn: Connection, session_id: str, first: int, end: int) -> StepLinks:
    """For steps ``first .. end - 1``: the message each message step carries, and the
    phase of every step — its message's, or (a tool call, an output, a handoff) that of
    the nearest message step before it."""
    params = {"b_id": session_id, "b_first": first, "b_end": end}
    linked = {row.seq: (row.id, row.phase_id) for row in conn.execute(_LINKS, params)}
    phase = conn.execute(_LINK_BEFORE, params).scalar() if first not in linked else None
    messages: list[int | None] = []
    phases: list[str | None] = []
    for seq in range(first, end):
        message_id, phase = linked.get(seq, (None, phase))
        messages.append(message_id)
        phases.append(phase)
    return messages, phases
