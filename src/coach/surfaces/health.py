"""The worker's load as LiveKit sees it: fully loaded while the database cannot be used,
so that LiveKit dispatches new conversations to workers that can keep them.

LiveKit calls the load function every few hundred milliseconds in a thread; the database
is asked at most once per :data:`PROBE_INTERVAL`, with its own short deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from ..errors import CoachError
from ..persistence.migrate import require_current

logger = logging.getLogger("coach.worker")

PROBE_INTERVAL: Final = 5.0
"""Seconds between two looks at the database."""
PROBE_TIMEOUT: Final = 3.0
"""Seconds a look may take before the database counts as unreachable."""
FULL: Final = 1.0


class DatabaseHealth:
    """``load(server)`` for ``AgentServer(load_fnc=...)``: 1.0 (full) while the database
    at ``url`` is unreachable or not migrated, else ``base_load(server)`` (CPU)."""

    def __init__(
        self,
        url: Callable[[], str],
        base_load: Callable[[Any], float],
        *,
        interval: float = PROBE_INTERVAL,
        timeout: float = PROBE_TIMEOUT,
    ) -> None:
        self._url = url
        self._base_load = base_load
        self._interval = interval
        self._timeout = timeout
        self._lock = threading.Lock()
        self._checked_at = -float("inf")
        self.usable = True
        """What the last look found."""

    def load(self, server: Any) -> float:
        """The load to report now (called by LiveKit, in a thread)."""
        with self._lock:
            if time.monotonic() - self._checked_at >= self._interval:
                self._checked_at = time.monotonic()
                usable = self._probe()
                if usable != self.usable:
                    if usable:
                        logger.info("the database is back: taking conversations again")
                    else:
                        logger.error("the database cannot be used: reporting this worker full")
                self.usable = usable
        return self._base_load(server) if self.usable else FULL

    def _probe(self) -> bool:
        async def look() -> None:
            async with asyncio.timeout(self._timeout):
                await require_current(self._url())

        try:
            asyncio.run(look())  # this thread's own loop: LiveKit calls us in an executor
        except (CoachError, TimeoutError, OSError) as exc:
            logger.warning("database health check failed: %s", type(exc).__name__)
            return False
        return True
