from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from coach.runtime import Runtime
from coach.settings import Settings
from tests.conftest import MEMORY_SECRET

RuntimeFactory = Callable[[], Awaitable[Runtime]]


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings on a migrated database (SQLite file and PostgreSQL)."""
    return Settings(
        database_url=database_url,
        secret_key=MEMORY_SECRET.decode(),
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_shutdown_timeout=5,
    )


@pytest.fixture
async def open_runtime(settings: Settings) -> AsyncIterator[RuntimeFactory]:
    """Open runtimes on the same database (a restart = a second one); all closed after."""
    opened: list[Runtime] = []

    async def factory() -> Runtime:
        runtime = await Runtime.open(settings)
        opened.append(runtime)
        return runtime

    yield factory
    for runtime in opened:
        await runtime.aclose()


@pytest.fixture
async def runtime(open_runtime: RuntimeFactory) -> Runtime:
    return await open_runtime()
