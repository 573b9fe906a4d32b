import io
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from coach.errors import ConfigError
from coach.locations import DATABASE_DRIVERS, check_database_url
from coach.persistence.crypto import MasterKeys
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
        _ = Settings(database_url="postgresql+asyncpg://db/coach", secret_key="short").memory_secret


def test_shared_database_needs_an_explicit_master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COACH_MASTER_KEY")
    settings = Settings(database_url="postgresql+asyncpg://db/coach")
    with pytest.raises(ConfigError, match="COACH_MASTER_KEY is required.*python -m coach keys new"):
        _ = settings.master_keys
    rotating = Settings(
        database_url="postgresql+asyncpg://db/coach",
        master_key="n" * 32,
        previous_master_keys=" " + "o" * 32 + ", " + "p" * 32,
    ).master_keys
    assert rotating.current.key_id == MasterKeys.of("n" * 32).current.key_id
    wrapped = MasterKeys.of("p" * 32).current.wrap("u", b"k" * 32)
    assert rotating.unwrap("u", MasterKeys.of("p" * 32).current.key_id, wrapped) == b"k" * 32


def test_invalid_setting_is_one_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_MAX_HISTORY_TOKENS", "lots")
    with pytest.raises(ConfigError, match="COACH_MAX_HISTORY_TOKENS"):
        load_settings()


def test_llm_timeout_is_generous_for_local_servers() -> None:
    assert Settings(llm_base_url="http://localhost:11434/v1").llm_read_timeout == 300
    assert Settings(openai_api_key="sk-x").llm_read_timeout == 15
    assert Settings(llm_base_url="http://x/v1", llm_timeout=42).llm_read_timeout == 42


def test_a_local_server_is_retried_once_and_openai_three_times() -> None:
    # A local server answers one request at a time: each retry waits behind the last.
    assert Settings(llm_base_url="http://localhost:11434/v1").llm_max_retry == 1
    assert Settings(openai_api_key="sk-x").llm_max_retry == 3
    assert Settings(llm_base_url="http://x/v1", llm_retries=0).llm_max_retry == 0


BLANKABLE = [
    "OPENAI_API_KEY",
    "COACH_LLM_BASE_URL",
    "COACH_LLM_TEMPERATURE",
    "COACH_LLM_TIMEOUT",
    "COACH_LLM_RETRIES",
    "COACH_DATABASE_URL",
    "COACH_SECRET_KEY",
    "COACH_PROMPTS_DIR",
    "COACH_DB_POOL_SIZE",
    "LIVEKIT_URL",
]


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Run in an empty directory without any of BLANKABLE set; return those settings."""
    monkeypatch.chdir(tmp_path)
    for var in BLANKABLE:
        monkeypatch.delenv(var, raising=False)
    return load_settings()


@pytest.mark.parametrize("name", BLANKABLE)
def test_a_blank_value_in_dotenv_means_unset(
    name: str, tmp_path: Path, clean_env: Settings
) -> None:
    (tmp_path / ".env").write_text(f"{name}=\n")
    assert load_settings() == clean_env


@pytest.mark.parametrize("name", BLANKABLE)
def test_a_blank_environment_variable_means_unset(
    name: str, clean_env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "")
    assert load_settings() == clean_env


def test_blank_settings_give_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in BLANKABLE:
        monkeypatch.setenv(var, "")
    settings = load_settings()
    assert settings.openai_api_key is None and settings.llm_base_url is None
    assert settings.llm_temperature is None and settings.prompts_dir is None
    assert settings.secret_key is None and settings.livekit_url is None
    assert settings.is_embedded_sqlite and settings.database_url.endswith("coach.db")


def test_livekit_variables_are_read_from_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / ".env").write_text(
        "LIVEKIT_URL=ws://lk.example:7880\nLIVEKIT_API_KEY=k\nLIVEKIT_API_SECRET=s\n"
    )
    settings = load_settings()
    assert settings.livekit_url == "ws://lk.example:7880"
    assert settings.livekit_api_key is not None
    assert settings.livekit_api_key.get_secret_value() == "k"
    assert settings.livekit_api_secret is not None
    assert settings.livekit_api_secret.get_secret_value() == "s"


def test_a_missing_secret_names_the_database_not_a_shared_one() -> None:
    settings = Settings(database_url="postgresql+asyncpg://db/coach")
    with pytest.raises(ConfigError, match="COACH_SECRET_KEY is required") as info:
        _ = settings.memory_secret
    assert "postgresql" in str(info.value) and "shared" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql+asyncpq://db/coach", "did you mean postgresql+asyncpg?"),
        ("postgersql://db/coach", "unknown database driver 'postgersql'"),
        ("coach.db", "has no scheme"),
        ("sqlite+aiosqlite//x.db", "has no scheme"),
    ],
)
def test_a_malformed_database_url_is_named_in_one_line_before_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, said: str
) -> None:
    # No secret key set: the URL's own problem is what the person reads first.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COACH_SECRET_KEY", raising=False)
    monkeypatch.setenv("COACH_DATABASE_URL", url)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    message = str(refused.value)
    assert message.startswith("invalid setting COACH_DATABASE_URL: ") and said in message
    assert "\n" not in message and "Value error" not in message


def test_every_invalid_value_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COACH_DB_TIMEOUT", "-1")
    monkeypatch.setenv("COACH_MAX_HISTORY_TOKENS", "lots")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    message = str(refused.value)
    assert message.startswith("invalid settings ")
    assert "COACH_DB_TIMEOUT" in message and "COACH_MAX_HISTORY_TOKENS" in message


def test_a_misspelt_setting_is_warned_about_once_with_a_suggestion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("COACH_RECORDER_QUEUE_SIZ=5\nCOACH_USER=ada\n")
    environ = {"COACH_LLM_MODLE": "x", "COACH_TEST_POSTGRES_URL": "y", "PATH": "/bin"}
    warned = io.StringIO()
    settings = load_settings(environ, warn=warned)
    assert settings.llm_model == "gpt-4o-mini"  # ignored, as before
    lines = warned.getvalue().splitlines()
    assert lines == [
        "coach: warning: unknown setting COACH_LLM_MODLE is ignored "
        "(did you mean COACH_LLM_MODEL?)",
        "coach: warning: unknown setting COACH_RECORDER_QUEUE_SIZ is ignored "
        "(did you mean COACH_RECORDER_QUEUE_SIZE?)",
    ]
    again = io.StringIO()
    load_settings(environ, warn=again)
    assert again.getvalue() == ""  # once per process


def test_a_dotenv_line_that_does_not_parse_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("COACH_LLM_MODEL=good\nthis is not a setting\n")
    warned = io.StringIO()
    settings = load_settings({}, warn=warned)
    assert settings.llm_model == "good"
    assert warned.getvalue() == (
        "coach: warning: .env, line 2: not NAME=value; that line was ignored\n"
    )
    assert "Python-dotenv" not in capfd.readouterr().err  # said once, by coach


def _judged_by_make_url(url: str) -> str:
    """The verdict on ``url`` of SQLAlchemy's ``make_url`` and coach's list of drivers."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        driver = make_url(url).drivername
    except ArgumentError:
        return "not a URL"
    except ValueError as exc:  # a port that is not a number
        return f"ValueError: {exc}"
    return "opened" if driver in DATABASE_DRIVERS else f"unknown driver {driver!r}"


def _judged_by_coach(url: str) -> str:
    try:
        assert check_database_url(url) == url
    except ValueError as exc:
        message = str(exc)
        if "is not a valid URL scheme" in message:
            return "not a URL"
        if message.startswith("unknown database driver "):
            return "unknown driver " + message.split()[3]
        return f"ValueError: {message}"
    return "opened"


URL_PARTS = st.sampled_from(
    ["sqlite", "postgresql", "+", "asyncpg", "aiosqlite", "://", ":", "/", "//", "@", "[",
     "]", "?", "=", "&", "%20", "x", "5432", "-1", " 1", "1_0", "٣", "é", "\n", "coach.db",
     "user", "pa:ss", "::1", ""]
)  # fmt: skip


@given(st.lists(URL_PARTS, max_size=12).map("".join))
@example("sqlite+aiosqlite:///coach.db")
@example("postgresql+asyncpg://user:pw@[::1]:5432/coach?ssl=require")
@example("postgresql://host:port/coach")
@example("sqlite://host:/coach.db")
@example("bogus://host:port/x")
@example("bogus://x")
@example("-://x")
def test_a_database_url_is_judged_as_sqlalchemy_will_read_it(url: str) -> None:
    # COACH_DATABASE_URL is checked with SQLAlchemy's pattern, without importing it.
    if "://" in url:
        assert _judged_by_coach(url) == _judged_by_make_url(url)
    else:
        with pytest.raises(ValueError, match="has no scheme"):
            check_database_url(url)
