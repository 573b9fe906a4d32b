"""Instructions a turn's write costs, counted by valgrind: the same figure on a busy
machine as on an idle one.

Run from the repository root (needs Debian's ``valgrind`` and a C compiler)::

    python -m bench.instructions                    # every workload, 200 turns each
    python -m bench.instructions --turns 50 coach   # one workload

Process CPU on a shared machine moves by more than a small change to coach saves (the
passes' paired runs of a change of a few percent were "inside the noise"); the
instructions executed do not. Each workload runs in a fresh ``python`` under
``valgrind --tool=callgrind``, uninstrumented until its timed loop starts: a helper
built here (``callgrind.h``'s client requests) starts the count after the warm-up and
stops it after the loop, counting **every thread** — the loop's and the database's.
Only user-space instructions count: the kernel's share of a thread hand-off (a futex, a
write to the loop's pipe), which every store pays once a turn, does not, so the ratio of
two stores' instructions is wider than the ratio of their CPU time.

Workloads (``--turns`` each, after 50 of warm-up, one session in a fresh SQLite file):

* ``coach``: ``write_batch`` of a turn (two messages, their two memory steps);
* ``seed``: the seed API's turn (``add_session_message`` twice, ``save_agent_state``
  with every step so far: three units of work);
* ``peer``: openai-agents' ``SQLiteSession.add_items`` of the turn's two items;
* ``unit``: coach's empty unit of work (``Database.run`` of nothing: the hand-off,
  ``BEGIN IMMEDIATE``, ``COMMIT``);
* ``to_thread``: ``asyncio.to_thread`` of nothing (the standard hand-off).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

COMMAND = "python -m bench.instructions"
WORKLOADS = ("coach", "seed", "peer", "unit", "to_thread")
_HELPER = """#include <valgrind/callgrind.h>
void count_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void count_stop(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
"""
_WARM_UP = 50


def build_helper(directory: Path) -> Path:
    """The shared library whose two calls start and stop callgrind's count."""
    source, library = directory / "count.c", directory / "libcount.so"
    source.write_text(_HELPER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def count(workload: str, turns: int, directory: Path, helper: Path) -> int:
    """Instructions of ``turns`` turns of ``workload``, in a fresh process."""
    out = directory / f"{workload}.out"
    subprocess.run(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable, "-m", "bench.instructions",
            "--child", str(helper), "--turns", str(turns), workload,
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=1800,  # a hang guard only: valgrind runs a turn ~50 times slower
    )  # fmt: skip
    dump = out.with_name(out.name + ".1")  # the count between start and stop
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no summary for {workload}")


async def _child(workload: str, turns: int, helper: Path) -> None:
    """One workload, counted between its warm-up and its end."""
    from coach.persistence import open_repository

    from .backends import SECRET, AgentsSQLiteBackend, chat_items, turn_ops
    from .measure import coach_keys, sqlite_url
    from .text import turns as texts

    library = ctypes.CDLL(str(helper))
    written = texts(1, _WARM_UP + turns)
    with tempfile.TemporaryDirectory() as tmp:
        one: Callable[[int], Awaitable[object]]
        if workload == "peer":
            peer = AgentsSQLiteBackend(Path(tmp) / "a.db")
            await peer.open()
            session = await peer.new_session("s")
            items = [peer.items(session, turn) for turn in written]
            one, closing = (lambda n: peer.write_turn(session, items[n])), peer.aclose
        else:
            url = sqlite_url(Path(tmp) / "c.db")
            repo = await open_repository(url, **coach_keys(url), secret=SECRET, create_schema=True)
            user = await repo.get_or_create_user("bench")
            sid = (await repo.create_session(user.id, "challenge")).id
            ops = [turn_ops(sid, 2 * n, turn, chat_items(turn)) for n, turn in enumerate(written)]
            steps = [step for op in ops for step in getattr(op, "steps", ())]

            async def seed(n: int) -> None:
                await repo.add_session_message(sid, "user", written[n].user)
                await repo.add_session_message(sid, "assistant", written[n].assistant)
                await repo.save_agent_state(sid, steps[: 2 * (n + 1)])

            one = {
                "coach": lambda n: repo.write_batch(ops[n]),
                "seed": seed,
                "unit": lambda _n: repo._db.run(lambda _c: None, write=True, what="nothing"),  # noqa: SLF001
                "to_thread": lambda _n: asyncio.to_thread(lambda: None),
            }[workload]
            closing = repo.aclose
        for n in range(_WARM_UP):
            await one(n)
        library.count_start()
        for n in range(_WARM_UP, _WARM_UP + turns):
            await one(n)
        library.count_stop()
        await closing()


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns counted (200)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("workloads", nargs="*", help=f"of {', '.join(WORKLOADS)} (all)")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.workloads) - set(WORKLOADS)):
        parser.error(f"no such workload: {', '.join(unknown)}")
    args.workloads = args.workloads or list(WORKLOADS)
    if args.child is not None:
        asyncio.run(_child(args.workloads[0], args.turns, args.child))
        return
    with tempfile.TemporaryDirectory() as tmp:
        helper = build_helper(Path(tmp))
        print(f"{COMMAND} --turns {args.turns}: instructions per turn (valgrind, every thread)")
        for workload in args.workloads:
            per_turn = count(workload, args.turns, Path(tmp), helper) / args.turns
            print(f"  {workload}: {per_turn:,.0f}")


if __name__ == "__main__":
    main()
