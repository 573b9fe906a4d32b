"""The files an operator deploys with: compose, .env.example, `db upgrade` on PostgreSQL."""

from pathlib import Path

import yaml

from coach.persistence import current_revision
from coach.persistence.migrate import head_revision
from coach.settings import Settings

from .test_chat_cli import coach, coach_env

ROOT = Path(__file__).resolve().parents[2]


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


def test_env_example_lists_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    names = {line.split("=", 1)[0].lstrip("# ") for line in text.splitlines() if "=" in line}
    for name, field in Settings.model_fields.items():
        env = "OPENAI_API_KEY" if name == "openai_api_key" else f"COACH_{name.upper()}"
        assert env in names, f"{env} ({field.description or name}) is missing from .env.example"


async def test_db_upgrade_on_postgresql(blank_postgres_url: str, tmp_path: Path) -> None:
    env = coach_env(tmp_path, COACH_DATABASE_URL=blank_postgres_url)
    code, out, err = await coach("db", "upgrade", env=env)
    assert code == 0, err
    assert out == "database is up to date\n"
    assert await current_revision(blank_postgres_url) == head_revision()
    code, _, err = await coach("db", "upgrade", env=env)  # idempotent
    assert code == 0, err
