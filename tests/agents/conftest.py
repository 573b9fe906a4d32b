from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coach.runtime import Runtime
from coach.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'coach.db'}",
        secret_key="test-secret-key-0123456789",  # type: ignore[arg-type]
        llm_base_url="http://127.0.0.1:9/v1",
    )


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    from coach.persistence import upgrade

    await upgrade(settings.database_url)
    rt = await Runtime.open(settings)
    yield rt
    await rt.aclose()
