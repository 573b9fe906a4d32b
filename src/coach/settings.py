"""Typed configuration: environment variables (``COACH_`` prefix) and an optional ``.env``.

``OPENAI_API_KEY`` and the ``LIVEKIT_*`` variables keep their usual names so the
LiveKit and OpenAI tooling reads the same values. A blank value (``NAME=``, as in
``.env.example``) means unset, for every setting.
"""

from __future__ import annotations

import difflib
import io
import logging
import os
import secrets
import sys
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from dotenv.parser import parse_stream
from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError
from .locations import check_database_url, default_data_dir, default_database_path

if TYPE_CHECKING:
    from .persistence.crypto import MasterKeys

ENV_FILE = ".env"
PREFIX = "COACH_"
NOT_SETTINGS = ("COACH_USER", "COACH_TEST_", "COACH_BENCH_")
PLACEHOLDER_SECRET = "change-me-to-a-long-random-string"
"""docker-compose.yml's ``COACH_SECRET_KEY`` when none is set: fit to try, never to keep."""
PLACEHOLDER_MASTER_KEY = "change-me-to-a-long-random-master-key"
"""docker-compose.yml's ``COACH_MASTER_KEY`` when none is set: the same."""
"""``COACH_`` names that are not settings: make's ``COACH_USER`` and the test and bench
suites' own variables (prefixes). Any other unknown ``COACH_`` name is a typo."""


def _default_database_url() -> str:
    # The one directory coach makes itself: any other path must already exist.
    default_data_dir().mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{default_database_path()}"


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
    master_key: SecretStr | None = None
    """The master key that wraps every person's data key (at least 32 characters:
    ``python -m coach keys new``). Required (and shared) when using PostgreSQL."""
    previous_master_keys: SecretStr | None = None
    """Comma-separated master keys being rotated out: they still unwrap the data keys
    they wrapped until ``python -m coach keys rotate`` re-wraps them."""
    keys_url: str | None = None
    """The key store, a database apart from the data (default: a SQLite file beside a
    SQLite database). Required with PostgreSQL."""
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
    llm_retries: int | None = Field(default=None, ge=0)
    """Retries of a failed model request; unset: 1 for a local server (it serves one
    request at a time, and a retry waits behind the abandoned one), 3 for OpenAI."""
    llm_max_tokens: int = Field(default=400, ge=1)
    """The longest reply, in tokens, sent with every request: a spoken reply is short, and
    an uncapped local model on a CPU can talk for minutes (400 leaves room for a phase
    summary in a tool call)."""
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

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        return check_database_url(url)

    @property
    def database_label(self) -> str:
        """The database in words for a person (a URL's password hidden)."""
        from sqlalchemy.engine import make_url

        return make_url(self.database_url).render_as_string(hide_password=True)

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

    @property
    def llm_max_retry(self) -> int:
        """How often a failed model request is retried (:attr:`llm_retries`)."""
        if self.llm_retries is not None:
            return self.llm_retries
        return 1 if self.llm_base_url else 3

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
        value = self._fleet_key(
            self.secret_key,
            "COACH_SECRET_KEY",
            "secret.key",
            "every worker using it must have the same key. Generate one with: "
            'python -c "import secrets; print(secrets.token_hex(32))"',
        )
        if len(value) < 16:
            raise ConfigError("COACH_SECRET_KEY must be at least 16 characters long.")
        return value.encode()

    @cached_property
    def master_keys(self) -> MasterKeys:
        """The master keys (:class:`~coach.persistence.crypto.MasterKeys`).

        With a SQLite database and no ``COACH_MASTER_KEY``, a random one is created once
        in the data directory (beside ``secret.key``); any other database needs it set,
        the same on every worker.
        """
        from .persistence.crypto import MasterKeys

        previous = self.previous_master_keys.get_secret_value() if self.previous_master_keys else ""
        old = [key.strip() for key in previous.split(",") if key.strip()]
        current = self._fleet_key(
            self.master_key,
            "COACH_MASTER_KEY",
            "master.key",
            "every worker using it must have the same key, and it must be kept apart from "
            "the data and the key store. Make one with: python -m coach keys new",
        )
        return MasterKeys.of(current, old)

    def _fleet_key(self, setting: SecretStr | None, name: str, file: str, advice: str) -> str:
        """The key ``setting`` holds; with a SQLite database and none set, a random one made
        once in the data directory (``file``); any other database needs it set (``advice``
        says how, after the error's first words)."""
        if setting is not None:
            return setting.get_secret_value()
        if not self.database_url.startswith("sqlite"):
            scheme = self.database_url.split("://", 1)[0]
            raise ConfigError(
                f"{name} is required with a {scheme} database (COACH_DATABASE_URL); {advice}"
            )
        return _local_secret(default_data_dir() / file).decode()


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


_WARNED: set[str] = set()


def setting_names() -> frozenset[str]:
    """Every environment variable name coach reads as a setting."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice) for choice in alias.choices)
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(PREFIX + name.upper())
    return frozenset(names)


def unknown_settings(names: Iterable[str]) -> list[str]:
    """One warning per ``COACH_`` name in ``names`` that coach does not read (a typo)."""
    known = setting_names()
    warnings = []
    for name in sorted(set(names)):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known or upper.startswith(NOT_SETTINGS):
            continue
        close = difflib.get_close_matches(upper, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        warnings.append(f"unknown setting {name} is ignored{hint}")
    return warnings


def read_env_file(path: Path) -> tuple[list[str], list[str]]:
    """The variable names a ``.env`` file sets, and one line per statement it cannot parse."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path} cannot be read ({exc}); it was ignored"]
    names, problems = [], []
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            line = binding.original.line
            problems.append(f"{path}, line {line}: not NAME=value; that line was ignored")
        elif binding.key:
            names.append(binding.key)
    return names, problems


def load_settings(
    environ: Mapping[str, str] | None = None, *, warn: TextIO | None = None
) -> Settings:
    """Read settings from the environment and ``.env``; every invalid value is named in
    one ConfigError. Unknown ``COACH_`` names and ``.env`` lines that do not parse are
    warned about on ``warn`` (stderr), one line each, and ignored."""
    environ = os.environ if environ is None else environ
    warn = sys.stderr if warn is None else warn
    env_file = Path(ENV_FILE)
    file_names, problems = read_env_file(env_file)
    for line in [*problems, *unknown_settings([*environ, *file_names])]:
        if line not in _WARNED:  # once per process: the worker reads settings often
            _WARNED.add(line)
            print(f"coach: warning: {line}", file=warn)
    # python-dotenv reports a line it cannot parse without naming the file: said above.
    logging.getLogger("dotenv.main").setLevel(logging.ERROR)
    try:
        settings = Settings()
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from None
    key = settings.secret_key
    master = settings.master_key
    lines = []
    if key is not None and key.get_secret_value() == PLACEHOLDER_SECRET:
        lines.append(
            "COACH_SECRET_KEY is docker-compose.yml's placeholder: anyone with that file can "
            'forge stored memory. Set your own (python -c "import secrets; '
            'print(secrets.token_hex(32))").'
        )
    if master is not None and master.get_secret_value() == PLACEHOLDER_MASTER_KEY:
        lines.append(
            "COACH_MASTER_KEY is docker-compose.yml's placeholder: anyone with that file can "
            "read stored conversations. Set your own (python -m coach keys new) before "
            "keeping any data."
        )
    for line in lines:
        if line not in _WARNED:
            _WARNED.add(line)
            print(f"coach: warning: {line}", file=warn)
    return settings


def describe_invalid(exc: ValidationError) -> str:
    """Every invalid setting of ``exc`` named, in one line."""
    parts = []
    for error in exc.errors():
        name = "_".join(str(p) for p in error["loc"])
        if not name.isupper():  # a field name, not an alias such as LIVEKIT_URL
            name = PREFIX + name.upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {message}")
    noun = "setting" if len(parts) == 1 else "settings"
    return f"invalid {noun} " + "; ".join(parts)
