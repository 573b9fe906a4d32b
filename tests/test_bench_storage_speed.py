"""Every reader of a resume in ``bench.storage_speed`` decodes a full window.

No timing is asserted: the figures are the bench's. What is held here is that the
reference read in SQLAlchemy's connection and transaction (``HAND_STACK``, on one
connection kept between reads as coach keeps its units') decodes as
many items as the reference on raw sqlite3 (``HAND``), the floor and coach's own decode
— a full window of 50 messages and their 50 memory steps —, so no row times an empty or
a short read.
"""

from __future__ import annotations

from bench.measure import sqlite_dir
from bench.profiles import resumable
from bench.storage_speed import decoding
from sqlalchemy import event


async def test_every_reader_of_the_resume_decodes_the_same_full_window() -> None:
    with sqlite_dir() as directory:
        async with resumable(directory / "r.db", 40) as (_handle, coach, raw):
            pool: list[str] = []
            engine = coach.repo.database.sync_engine
            event.listen(engine, "checkout", lambda *_: pool.append("out"))
            event.listen(engine, "checkin", lambda *_: pool.append("in"))
            async with decoding(coach, raw) as decode:
                found = {
                    "coach, no database": await decode(),
                    "floor": await decode(read=True),
                    "by hand": await decode(read=True, by_hand=True),
                    **{
                        f"by hand in SQLAlchemy, read {n}": await decode(
                            read=True, by_hand=True, stack=True
                        )
                        for n in range(3)
                    },
                }

            assert set(found.values()) == {100}, found
            # The reads in SQLAlchemy share one connection, as coach's units keep theirs,
            # and give it back when the decode is left.
            assert pool == ["out", "in"]
