"""Typed configuration: environment variables (``COACH_`` prefix) and an optional ``.env``.

``OPENAI_API_KEY`` and the ``LIVEKIT_*`` variables keep their usual names so the
LiveKit and OpenAI tooling reads the same values. A blank value (``NAME=``, as in
``.env.example``) means unset, for every setting.
"""

from __future__ import annotations

import os
import secrets
from functools import cached_property
from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError

APP_NAME = "coach"


def default_data_dir() -> Path:
    """The per-user directory that holds the embedded database and the dev secret."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def _default_database_url() -> str:
    return f"sqlite+aiosqlite:///{default_data_dir() / 'coach.db'}"


class Settings(BaseSettings):
    """Everything coach reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix="COACH_",
        env_file=".env",
        env_ignore_empty=True,  # `NAME=` in .env or the environment: the default applies
        extra="ignore",
        populate_by_name=True,
    )

    # --- storage -----------------------------------------------------------------
    database_url: str = Field(default_factory=_default_database_url)
    """SQLAlchemy async URL; the default is an embedded SQLite file."""
    secret_key: SecretStr | None = None
    """HMAC key for stored memory steps. Required (and shared) when using PostgreSQL."""
    db_pool_size: int = Field(default=5, ge=1)
    """Connections per process: the PostgreSQL pool, or SQLite's database threads."""
    db_max_overflow: int = Field(default=10, ge=0)
    db_timeout: float = Field(default=5.0, gt=0)
    """Seconds one PostgreSQL call may take, retries included; a stalled server then
    counts as unreachable (tools say so, the recorder retries)."""

    # --- models ------------------------------------------------------------------
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "COACH_OPENAI_API_KEY")
    )
    llm_base_url: str | None = None
    """Any OpenAI-compatible server (Ollama, vLLM, llama.cpp). No API key needed then."""
    llm_model: str = "gpt-4o-mini"
    llm_timeout: float = Field(default=0.0, ge=0.0)
    """Read timeout in seconds; 0 picks 15 s for OpenAI and 300 s for a local server."""
    llm_temperature: float | None = None
    stt_model: str = "gpt-4o-mini-transcribe"
    stt_base_url: str | None = None
    tts_model: str = "gpt-4o-mini-tts"
    tts_base_url: str | None = None
    tts_voice: str = "ash"

    # --- conversation ------------------------------------------------------------
    prompts_dir: Path | None = None
    """Where the prompt YAML files live; defaults to the ones shipped with coach."""
    max_history_tokens: int = Field(default=100_000, ge=1)
    max_history_lines: int = Field(default=50_000, ge=1)
    brief_max_tokens: int = Field(default=1_500, ge=100)
    """The session brief's budget in every agent's instructions (estimated tokens)."""
    resume_max_pairs: int = Field(default=25, ge=0)

    # --- recorder ----------------------------------------------------------------
    recorder_queue_size: int = Field(default=10_000, ge=1)
    recorder_commit_interval: float = Field(default=0.05, ge=0)
    """Group-commit window in seconds: writes queued within it share one transaction."""
    recorder_shutdown_timeout: float = Field(default=10.0, gt=0)

    log_level: str = "INFO"
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Serve Prometheus metrics on this port (LiveKit's ``/metrics`` endpoint; worker only)."""
    metrics_dir: Path | None = None
    """Where job processes leave their metrics for the endpoint to add up (default: a
    fresh temporary directory)."""

    # --- LiveKit (the worker commands and `token`) ------------------------------
    livekit_url: str | None = Field(default=None, validation_alias="LIVEKIT_URL")
    """The LiveKit server's WebSocket URL."""
    livekit_api_key: SecretStr | None = Field(default=None, validation_alias="LIVEKIT_API_KEY")
    livekit_api_secret: SecretStr | None = Field(
        default=None, validation_alias="LIVEKIT_API_SECRET"
    )
    public_livekit_url: str | None = None
    """The LiveKit URL browsers connect to, when it is not ``LIVEKIT_URL`` (``web`` only;
    e.g. a compose network's ``ws://livekit:7880`` is ``ws://localhost:7880`` outside)."""

    @property
    def is_embedded_sqlite(self) -> bool:
        """True for a SQLite file (the default or any other): embedded and single-worker,
        so it is migrated automatically. PostgreSQL runs ``db upgrade`` instead."""
        scheme, _, rest = self.database_url.partition("://")
        path = rest.split("?", 1)[0]
        return scheme.split("+")[0] == "sqlite" and path not in ("", "/", "/:memory:")

    @property
    def llm_read_timeout(self) -> float:
        """Seconds to wait for the LLM; generous for local servers that load models."""
        if self.llm_timeout:
            return self.llm_timeout
        return 300.0 if self.llm_base_url else 15.0

    def require_llm(self) -> None:
        """Raise :class:`ConfigError` when no LLM is configured."""
        if self.openai_api_key is None and self.llm_base_url is None:
            raise ConfigError(
                "No LLM configured: set OPENAI_API_KEY for OpenAI, or COACH_LLM_BASE_URL "
                "for a local OpenAI-compatible server (e.g. http://localhost:11434/v1 for Ollama)."
            )

    @cached_property
    def memory_secret(self) -> bytes:
        """The HMAC key for memory steps.

        With the embedded SQLite default a random key is created once in the data
        directory; any other database needs ``COACH_SECRET_KEY`` so that every worker
        of a fleet verifies what the others wrote.
        """
        if self.secret_key is not None:
            value = self.secret_key.get_secret_value()
            if len(value) < 16:
                raise ConfigError("COACH_SECRET_KEY must be at least 16 characters long.")
            return value.encode()
        if not self.database_url.startswith("sqlite"):
            scheme = self.database_url.split("://", 1)[0]
            raise ConfigError(
                f"COACH_SECRET_KEY is required with a {scheme} database (COACH_DATABASE_URL); "
                "every worker using it must have the same key. Generate one with: "
                'python -c "import secrets; print(secrets.token_hex(32))"'
            )
        return _local_secret(default_data_dir() / "secret.key")


def _local_secret(path: Path) -> bytes:
    """The embedded database's key, created once — atomically, so that two processes
    starting together agree on it and none ever reads a half-written file."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(32).encode())
        try:
            os.link(tmp, path)  # fails if another process created it first: keep theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = path.read_bytes().strip()
    if len(key) < 16:
        raise ConfigError(f"{path} does not hold a valid key: delete it to create a new one.")
    return key


def load_settings() -> Settings:
    """Read settings from the environment; invalid values become one ConfigError."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "_".join(str(p) for p in first["loc"])
        if not name.isupper():  # a field name, not an alias such as LIVEKIT_URL
            name = "COACH_" + name.upper()
        raise ConfigError(f"invalid setting {name}: {first['msg']}") from None
