"""A lean persistence core: a stored memory-step count, a conversation index that serves
every window, and compact memory steps.

* ``sessions.memory_steps``: how many steps are stored (appends claim positions there;
  a load that finds fewer rows reports a cut history). Filled from ``agent_steps``.
* ``session_conversations``: the index on ``session_id`` becomes one on
  ``(session_id, created_at, id)``, so the resume window and every page read only the
  rows they return.
* ``agent_steps.created_at`` may be NULL: a chat item carries its own time.
* ``agent_steps.message_id``: a message step written with its conversation row leaves
  its text out of the payload and points at the row instead.
* ``agent_steps``: version-1 steps (a plain pickle of the chat item) are re-encoded as
  version 2 (compact, compressed) and signed again. That needs the memory secret: the
  one handed to the migration, else the settings' key. A step that fails its check is
  left as it is (it was unreadable before too); without a key, no step is converted,
  and version 1 still loads. The downgrade re-encodes version 2 as version 1.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 23:50:00+00:00
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import context, op

from coach.errors import CoachError, CorruptBlob
from coach.persistence.codec import CODEC_VERSION, PICKLE_PROTOCOL, EncodedStep, StepCodec
from coach.settings import Settings

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")
_PAGE = 500
_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("memory_steps", sa.Integer(), server_default="0", nullable=False)
        )
    op.execute(
        "UPDATE sessions SET memory_steps = COALESCE("
        "(SELECT MAX(seq) + 1 FROM agent_steps WHERE agent_steps.session_id = sessions.id), 0)"
    )
    # agent_steps has no child table: on SQLite, copying it is safe.
    with op.batch_alter_table("agent_steps", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "message_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                nullable=True,
            )
        )
        batch_op.alter_column("created_at", existing_type=_TIME, nullable=True)
    with op.batch_alter_table("session_conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_session_conversations_session_id"))
        batch_op.create_index(
            batch_op.f("ix_session_conversations_session_id_created_at_id"),
            ["session_id", "created_at", "id"],
            unique=False,
        )
    codec = _codec()
    if codec is not None:
        _recode(codec, 1, lambda step: codec.dumps(step), CODEC_VERSION)


def downgrade() -> None:
    codec = _codec()
    if codec is not None:
        _recode(codec, CODEC_VERSION, lambda step: pickle.dumps(step, PICKLE_PROTOCOL), 1)
    with op.batch_alter_table("session_conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_session_conversations_session_id_created_at_id"))
        batch_op.create_index(
            batch_op.f("ix_session_conversations_session_id"), ["session_id"], unique=False
        )
    # Not batch operations: on SQLite those copy the table, and dropping the old one
    # with foreign keys on would cascade to every session's rows.
    op.execute("ALTER TABLE agent_steps DROP COLUMN message_id")
    op.execute("UPDATE agent_steps SET created_at = CURRENT_TIMESTAMP WHERE created_at IS NULL")
    with op.batch_alter_table("agent_steps", schema=None) as batch_op:
        batch_op.alter_column(
            "created_at", existing_type=sa.DateTime(timezone=True), nullable=False
        )
    op.execute("ALTER TABLE sessions DROP COLUMN memory_steps")


def _codec() -> StepCodec | None:
    secret = context.config.attributes.get("memory_secret")
    if secret is None:
        try:
            secret = Settings().memory_secret
        except (CoachError, ValueError) as exc:
            log.warning("memory steps not re-encoded: no memory secret (%s)", exc)
            return None
    return StepCodec(secret)


def _recode(codec: StepCodec, old: int, encode: Callable[[object], bytes], new: int) -> None:
    """Re-encode every step stored with codec version ``old`` as version ``new`` (whole:
    a step that left its text to its conversation row gets it back)."""
    steps = sa.table(
        "agent_steps",
        sa.column("session_id", sa.String),
        sa.column("seq", sa.Integer),
        sa.column("codec", sa.String),
        sa.column("version", sa.Integer),
        sa.column("signature", sa.LargeBinary),
        sa.column("payload", sa.LargeBinary),
        sa.column("message_id", sa.BigInteger),
    )
    messages = sa.table("session_conversations", sa.column("id"), sa.column("content"))
    conn = op.get_bind()
    after = ("", -1)
    converted = skipped = 0
    while True:
        page = conn.execute(
            sa.select(steps, messages.c.content)
            .outerjoin(messages, messages.c.id == steps.c.message_id)
            .where(
                steps.c.version == old,
                sa.tuple_(steps.c.session_id, steps.c.seq) > sa.tuple_(*after),
            )
            .order_by(steps.c.session_id, steps.c.seq)
            .limit(_PAGE)
        ).all()
        if not page:
            break
        after = (page[-1].session_id, page[-1].seq)
        for row in page:
            stored = EncodedStep(
                row.seq, row.codec, row.version, row.signature, row.payload, row.content
            )
            try:
                step = codec.decode(row.session_id, stored)
            except CorruptBlob:
                skipped += 1
                continue
            encoded = codec.sign(row.session_id, row.seq, encode(step), version=new)
            conn.execute(
                steps.update()
                .where(steps.c.session_id == row.session_id, steps.c.seq == row.seq)
                .values(
                    codec=encoded.codec,
                    version=encoded.version,
                    signature=encoded.signature,
                    payload=encoded.payload,
                    message_id=None,
                )
            )
            converted += 1
    log.info(
        "memory steps re-encoded as version %d: %d (%d left as they were)", new, converted, skipped
    )
