"""Encryption's cost: coach with its cipher on, paired against the same run without it.

Each round writes a ``--turns``-turn session through ``write_batch`` into a fresh SQLite
file, resumes it ``--reads`` times (``resume_session`` plus decoding, as a live resume
does), and measures the file — once with AES-256-GCM sealing every personal field, once
with the cipher replaced by a pass-through (the same code otherwise: the same encoding of
each value, the same rows, the same statements). The two arms alternate, and each ratio is
the median of the rounds' on/off ratios of process CPU (all threads), so the machine's
load falls on both alike.

    python -m bench.encryption [--rounds 9] [--turns 500] [--reads 50]

Targets (#24): write CPU ≤ 1.15×, resume ≤ 1.2×, storage ≤ 1.1×.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import platform
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from coach.persistence.crypto import Sealer

from .backends import CoachBackend
from .measure import Ratio, sqlite_bytes, sqlite_dir, sqlite_url, table, verdict
from .text import Turn, turns

COMMAND = "python -m bench.encryption"
TARGETS = {"write CPU per turn": 1.15, "resume CPU per read": 1.2, "storage": 1.1}


@contextlib.contextmanager
def cipher(on: bool) -> Iterator[None]:
    """The cipher as shipped, or (``on`` false) replaced by a pass-through."""
    if on:
        yield
        return
    encrypt, decrypt = Sealer._encrypt, Sealer._decrypt

    def plain(self: Sealer, plain: bytes, associated_data: bytes) -> bytes:
        return plain

    def opened(self: Sealer, sealed: bytes, associated_data: bytes) -> bytes:
        return sealed

    Sealer._encrypt, Sealer._decrypt = plain, opened  # type: ignore[method-assign]
    try:
        yield
    finally:
        Sealer._encrypt, Sealer._decrypt = encrypt, decrypt  # type: ignore[method-assign]


async def one_round(directory: Path, texts: Sequence[Turn], reads: int) -> tuple[float, ...]:
    """CPU s per turn written, CPU s per resume, and the file's bytes."""
    path = directory / "coach.db"
    coach = CoachBackend(sqlite_url(path))
    await coach.open()
    try:
        handle = await coach.new_session("s")
        items = [coach.items(handle, t) for t in texts]
        gc.collect()
        cpu = time.process_time()
        for item in items:
            await coach.write_turn(handle, item)
        write = (time.process_time() - cpu) / len(texts)
        await coach.complete_phase(handle)
        gc.collect()
        cpu = time.process_time()
        for _ in range(reads):
            await coach.live_resume(handle)
        resume = (time.process_time() - cpu) / reads
    finally:
        await coach.aclose()
    return write, resume, float(sqlite_bytes(path))


async def run(rounds: int, count: int, reads: int) -> dict[str, Ratio]:
    texts = turns(7, count)
    results: dict[bool, list[tuple[float, ...]]] = {True: [], False: []}
    for n in range(rounds + 1):  # round 0 warms up (imports, statement caches)
        for on in (True, False) if n % 2 else (False, True):
            with sqlite_dir() as directory, cipher(on):
                measured = await one_round(directory, texts, reads)
            if n:
                results[on].append(measured)
        if n:
            print(f"round {n}/{rounds} done", flush=True)
    return {
        name: Ratio.of([r[i] for r in results[True]], [r[i] for r in results[False]])
        for i, name in enumerate(TARGETS)
    }


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds (9)")
    parser.add_argument("--turns", type=int, default=500, help="turns written per round")
    parser.add_argument("--reads", type=int, default=50, help="resumes per round")
    args = parser.parse_args(argv)
    print(f"{COMMAND} --rounds {args.rounds} --turns {args.turns} --reads {args.reads}")
    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    ratios = asyncio.run(run(args.rounds, args.turns, args.reads))
    rows = [
        (name, str(ratio), f"≤ {TARGETS[name]}×", verdict(ratio.median <= TARGETS[name]))
        for name, ratio in ratios.items()
    ]
    print("\n" + table(("encryption on / off", "median (range)", "target", "verdict"), rows))
    with contextlib.suppress(OSError):
        print(f"\nLoad average (1, 5, 15 min) at the end: {open('/proc/loadavg').read()[:14]}")


if __name__ == "__main__":
    main()
