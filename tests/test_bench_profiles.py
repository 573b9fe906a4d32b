"""The live resume's ladder (``bench.profiles.resume_parts``) reads a full window.

No timing is asserted: the figures are the bench's. What is held here is that the
session the ladder builds gives a resume a full window (50 messages and their 50 memory
steps, read by coach and by raw alike), and that its row of C calls runs over those
rows (rows it cannot open or unpickle fail) — so the ladder does not measure an empty
or refused read. The ladder as a whole also times the peer (the ``bench`` extra's
openai-agents, which the test environment does not install): ``bench.results --quick``
runs it. Whether the C calls match coach's in number and size is the bench's own
reading, not checked here.
"""

from __future__ import annotations

from bench.measure import sqlite_dir
from bench.profiles import c_calls, resumable


async def test_the_session_gives_a_full_window_and_the_c_calls_run_over_it() -> None:
    with sqlite_dir() as directory:
        async with resumable(directory / "r.db", 40) as (handle, coach, raw):
            window, steps, stored = await raw.resume_rows()
            sealer = await coach.repo.vault.sealer(coach.user_id)
            resumed = await coach.read_window(handle)

            calls = c_calls(sealer, handle.id, window, steps)
            calls()  # a stored blob too short to reseal, or a bad pickle, raises

            assert len(window) == 50 and len(steps) == 50 and stored == 80
            assert resumed == len(window) + len(steps)
