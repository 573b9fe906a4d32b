"""Waiting for every process of a process group to end (Linux: ``/proc`` and pidfds).

A test that SIGKILLs a command it started in a session of its own
(``start_new_session=True``) uses this to know that nothing the command started — a
helper process it spawned, say — is still running (and writing) before it looks at the
results, and to clean up whatever is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
from pathlib import Path

LIMIT = 10.0
"""Seconds each process may take to exit."""


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (a zombie has exited: it does not count)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _wait_until_dead(pid: int, limit: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # gone, and already reaped
    try:
        readable, _, _ = select.select([fd], [], [], limit)  # readable once it has exited
        return bool(readable)
    finally:
        os.close(fd)


async def wait_for_group(pgid: int, limit: float = LIMIT) -> None:
    """Wait until every process of group ``pgid`` has exited, at most ``limit`` s each."""
    for pid in await asyncio.to_thread(group_members, pgid):
        exited = await asyncio.to_thread(_wait_until_dead, pid, limit)
        assert exited, f"process {pid} of group {pgid} is still running after {limit} s"


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of process group ``pgid`` (one this test started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
