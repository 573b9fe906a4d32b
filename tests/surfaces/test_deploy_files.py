"""The files an operator deploys with: compose, .env.example, `db upgrade` on PostgreSQL."""

import io
import re
from pathlib import Path

import pytest
import yaml
from pydantic import AliasChoices

from coach.persistence import current_revision
from coach.persistence.migrate import head_revision
from coach.settings import Settings, load_settings
from coach.testing import FakeOpenAIServer, say

from .test_chat_cli import coach, coach_env

ROOT = Path(__file__).resolve().parents[2]


def env_name(field: str) -> str:
    """The variable a setting is read from: its alias, or COACH_ and its name."""
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices):  # AliasChoices: the first choice is the documented name
        return str(alias.choices[0])
    return f"COACH_{field.upper()}"


def test_compose_describes_livekit_postgres_migrate_and_a_scalable_worker() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "--dev" in services["livekit"]["command"]
    assert services["livekit"]["image"].startswith("livekit/livekit-server")
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    worker = services["worker"]
    assert worker["command"] == ["start"]
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N works
    env = worker["environment"]
    assert env["COACH_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert "COACH_SECRET_KEY" in env and "LIVEKIT_URL" in env
    web = services["web"]
    assert web["command"][0] == "web" and "0.0.0.0" in web["command"]
    assert web["environment"]["COACH_PUBLIC_LIVEKIT_URL"].startswith("ws://localhost:")


def test_env_example_lists_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    names = {line.split("=", 1)[0].lstrip("# ") for line in text.splitlines() if "=" in line}
    for name, field in Settings.model_fields.items():
        env = env_name(name)
        assert env in names, f"{env} ({field.description or name}) is missing from .env.example"


async def test_db_upgrade_on_postgresql(blank_postgres_url: str, tmp_path: Path) -> None:
    env = coach_env(tmp_path, COACH_DATABASE_URL=blank_postgres_url)
    code, out, err = await coach("db", "upgrade", env=env)
    assert code == 0, err
    assert out == "database is up to date\n"
    assert await current_revision(blank_postgres_url) == head_revision()
    code, _, err = await coach("db", "upgrade", env=env)  # idempotent
    assert code == 0, err


async def test_a_copied_env_example_with_only_an_llm_url_starts_chat(tmp_path: Path) -> None:
    # What the first line of .env.example says to do, and the one value a user fills in.
    text = (ROOT / ".env.example").read_text()
    async with FakeOpenAIServer([say("Hi! I'm your design coach. What's your name?")]) as server:
        text, filled = re.subn(
            r"^COACH_LLM_BASE_URL=$", f"COACH_LLM_BASE_URL={server.base_url}", text, flags=re.M
        )
        assert filled == 1
        env = coach_env(tmp_path)
        del env["COACH_DATABASE_URL"], env["COACH_SECRET_KEY"]  # only what .env says
        (Path(env["HOME"]) / ".env").write_text(text)
        code, out, err = await coach("chat", "--user", "ada", env=env, stdin="")
        assert server.script.remaining == 0
    assert (code, out) == (0, "coach> Hi! I'm your design coach. What's your name?\n"), err
    # The default database: a SQLite file in the user data directory, created on first use.
    assert (tmp_path / "data" / "coach" / "coach.db").exists()


def test_compose_passes_no_blank_values() -> None:
    # A blank OPENAI_API_KEY or COACH_LLM_BASE_URL once defeated the no-LLM check.
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for service in ("migrate", "worker"):
        env = compose["services"][service]["environment"]
        for name, value in env.items():
            assert value is None or ":-}" not in str(value), (service, name, value)
            assert value != "", (service, name)


def test_compose_pins_livekit_and_its_placeholder_secret_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image = compose["services"]["livekit"]["image"]
    tag = image.rpartition(":")[2]
    assert ":" in image and tag != "latest" and tag[:2] == "v1", image
    # What compose passes when COACH_SECRET_KEY is not set in the shell.
    default = compose["x-coach-env"]["COACH_SECRET_KEY"].split(":-", 1)[1].rstrip("}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COACH_SECRET_KEY", default)
    said = io.StringIO()
    load_settings(warn=said)
    (line,) = [line for line in said.getvalue().splitlines() if "COACH_SECRET_KEY" in line]
    assert "placeholder" in line and default not in line
    monkeypatch.setenv("COACH_SECRET_KEY", "a-real-key-0123456789abcdef")
    said = io.StringIO()
    load_settings(warn=said)
    assert "COACH_SECRET_KEY" not in said.getvalue()
