"""What test modules share besides the fixtures of ``conftest.py`` (which no test
imports): the memory secret every test repository signs with, and the runtime factory's
type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from coach.runtime import Runtime

MEMORY_SECRET = b"coach-test-secret-0123456789abcdef"
"""The HMAC key of every test repository's memory steps."""

RuntimeFactory = Callable[[], Awaitable[Runtime]]
"""``open_runtime``: opens another runtime on the test's database."""
