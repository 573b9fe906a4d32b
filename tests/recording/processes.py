"""Waiting for a process to end, whoever its parent is (the writer process's, say)."""

from __future__ import annotations

import asyncio
import os
import select

LIMIT = 10.0
"""Seconds a process may take to exit."""


async def wait_until_dead(pid: int) -> None:
    """Wait until process ``pid`` has exited (its pidfd turns readable), at most LIMIT s."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone, and already reaped
    try:
        readable, _, _ = await asyncio.to_thread(select.select, [fd], [], [], LIMIT)
        assert readable, f"process {pid} is still running after {LIMIT} s"
    finally:
        os.close(fd)
