"""Every reader of a resume in ``bench.storage_speed`` decodes a full window.

No timing is asserted: the figures are the bench's. What is held here is that the
reference read in SQLAlchemy's connection and transaction (``HAND_STACK``) decodes as
many items as the reference on raw sqlite3 (``HAND``), the floor and coach's own decode
— a full window of 50 messages and their 50 memory steps —, so no row times an empty or
a short read.
"""

from __future__ import annotations

from bench.measure import sqlite_dir
from bench.profiles import resumable
from bench.storage_speed import decoding


async def test_every_reader_of_the_resume_decodes_the_same_full_window() -> None:
    with sqlite_dir() as directory:
        async with resumable(directory / "r.db", 40) as (_handle, coach, raw):
            decode = await decoding(coach, raw)

            found = {
                "coach, no database": await decode(),
                "floor": await decode(read=True),
                "by hand": await decode(read=True, by_hand=True),
                "by hand in SQLAlchemy": await decode(read=True, by_hand=True, stack=True),
            }

            assert set(found.values()) == {100}, found
