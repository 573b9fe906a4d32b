from pathlib import Path

import pytest

from coach.errors import ConfigError
from coach.settings import Settings, _local_secret, load_settings


def test_local_secret_is_created_once_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "secret.key"
    first = _local_secret(path)
    assert len(first) == 64 and _local_secret(path) == first
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no temp file left


def test_a_broken_local_secret_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(b"")
    with pytest.raises(ConfigError, match="does not hold a valid key"):
        _local_secret(path)


def test_shared_database_needs_an_explicit_secret() -> None:
    settings = Settings(database_url="postgresql+asyncpg://db/coach")
    with pytest.raises(ConfigError, match="COACH_SECRET_KEY is required"):
        _ = settings.memory_secret
    with pytest.raises(ConfigError, match="at least 16"):
        _ = Settings(database_url="postgresql+asyncpg://db/coach", secret_key="short").memory_secret  # type: ignore[arg-type]


def test_invalid_setting_is_one_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_MAX_HISTORY_TOKENS", "lots")
    with pytest.raises(ConfigError, match="COACH_MAX_HISTORY_TOKENS"):
        load_settings()


def test_llm_timeout_is_generous_for_local_servers() -> None:
    assert Settings(llm_base_url="http://localhost:11434/v1").llm_read_timeout == 300
    assert Settings(openai_api_key="sk-x").llm_read_timeout == 15  # type: ignore[arg-type]
    assert Settings(llm_base_url="http://x/v1", llm_timeout=42).llm_read_timeout == 42
