"""Trials of a job's first turns in fresh processes, alternating two modes in pairs.

What ``first_reply`` and ``loop_blocks`` share: each trial is ``python -m bench.<module>
--child MODE URL DATABASE`` — a fresh Python process, as a LiveKit job process is, on its
own SQLite file — printing one JSON line; the modes alternate in pairs (ABBA...), after
one warm-up trial, so drift on a shared machine falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


def _trial(module: str, mode: str, url: str, directory: Path, n: int) -> dict[str, Any]:
    database = f"sqlite+aiosqlite:///{directory / f'{mode}-{n}.db'}"
    out = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--child", mode, url, database],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


async def paired_trials(
    module: str, modes: tuple[str, str], pairs: int, url: str
) -> dict[str, list[dict[str, Any]]]:
    """Run ``pairs`` pairs of trials of ``bench.<module>`` against the model at ``url``;
    each mode's results, in pair order."""
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        await asyncio.to_thread(_trial, module, modes[0], url, directory, -1)  # warm-up
        for n in range(pairs):
            for mode in modes if n % 2 == 0 else modes[::-1]:
                trial = await asyncio.to_thread(_trial, module, mode, url, directory, n)
                results[mode].append(trial)
    return results


def main(
    module: str,
    child: Callable[[str, str, str], None],
    serve: Callable[[int], Coroutine[Any, Any, None]],
) -> None:
    """The command line of ``bench.<module>``: ``--pairs N`` runs the trials (``serve``);
    ``--child MODE URL DATABASE`` is one trial (``child``), as :func:`paired_trials` runs it."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{module}")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "URL", "DATABASE"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
    else:
        asyncio.run(serve(args.pairs))
