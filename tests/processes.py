"""Child processes a test starts: with SIGINT as a terminal delivers it, and always ended.

A test run started in the background (``nohup pytest &``, a CI runner) ignores SIGINT,
and every child inherits that: a child then never sees the Ctrl-C a test sends it. So
:func:`spawn` gives each child the default SIGINT handling, and :func:`running` ends the
child by its PID whatever happened — SIGINT, then SIGTERM, then SIGKILL — so that no
failed or timed-out test leaves a server listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any

GRACE = 30.0
"""Seconds a child gets to end after each signal (a hang guard, not a budget)."""


def _default_sigint() -> None:
    # Runs in the child between fork and exec: Python installs its KeyboardInterrupt
    # handler only when SIGINT is not ignored at start.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def spawn(program: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``program`` with the default SIGINT handling (see the module's doc)."""
    return await asyncio.create_subprocess_exec(
        program, *args, preexec_fn=_default_sigint, **kwargs
    )


async def stop(proc: asyncio.subprocess.Process, *, grace: float = GRACE) -> int:
    """End ``proc`` if it is still running (SIGINT, SIGTERM, then SIGKILL); its exit code."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
    return await proc.wait()


@contextlib.asynccontextmanager
async def running(
    program: str, *args: str, **kwargs: Any
) -> AsyncIterator[asyncio.subprocess.Process]:
    """:func:`spawn`, and :func:`stop` on the way out, whatever happened."""
    proc = await spawn(program, *args, **kwargs)
    try:
        yield proc
    finally:
        await stop(proc)
