"""``python -m coach dev|start|console|connect|download-files``: LiveKit's CLI running
the worker, after checking what each command needs (one line and exit 2 for each
misconfiguration, instead of a traceback, a hang or a silent exit 0).

The checks come before the worker (and so the agent framework) is imported: a
misconfiguration is reported in a fraction of the time the framework takes to load.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from ..settings import Settings
from .token import quiet_dev_key_warning

LIVEKIT_HINT = "for livekit-server --dev: ws://localhost:7880, devkey, secret"
CONNECT_TIMEOUT = 10.0
"""Seconds `connect` waits for the LiveKit server to answer before giving up."""


def run_cli(argv: Sequence[str], settings: Settings) -> int:
    """Run a LiveKit CLI command (``dev``, ``start``, ``console``, ``connect``,
    ``download-files``) and return its exit code.

    What the command needs is checked first, and a missing piece is a
    :class:`ConfigError`; so is a worker that stopped because it could not register.
    The ``LIVEKIT_*`` settings (environment or ``.env``) are what the command uses.
    """
    command, options = argv[0], list(argv[1:])
    asking_for_help = any(arg in ("-h", "--help") for arg in options)
    if not asking_for_help:
        _preflight(command, options, settings)
    from .worker import server

    for name, value in (
        ("LIVEKIT_URL", settings.livekit_url),
        ("LIVEKIT_API_KEY", _secret(settings.livekit_api_key)),
        ("LIVEKIT_API_SECRET", _secret(settings.livekit_api_secret)),
    ):
        if value:  # for the CLI's options, the job processes and the plugins
            os.environ[name] = value
    server.update_options(
        ws_url=settings.livekit_url or "",
        api_key=_secret(settings.livekit_api_key) or "",
        api_secret=_secret(settings.livekit_api_secret) or "",
    )
    if settings.metrics_port is not None:
        directory = settings.metrics_dir or Path(tempfile.mkdtemp(prefix="coach-metrics-"))
        server.serve_metrics(settings.metrics_port, str(directory))
    if command == "dev" and not any(o in ("--reload", "--no-reload") for o in options):
        options.append("--no-reload")  # livekit-agents 1.8 has no reload; not a warning
    quiet_dev_key_warning()

    from livekit.agents import cli

    sys.argv = [sys.argv[0], command, *options]  # argv[0]: how usage lines name us
    try:
        cli.run_app(server)
        code = 0
    except SystemExit as exc:  # click ends every command with one
        code = exc.code if isinstance(exc.code, int) else 1
    if server.failure is not None:
        raise ConfigError(
            f"the worker stopped: {server.failure} "
            f"(LiveKit server {settings.livekit_url}; check LIVEKIT_URL and the keys)"
        )
    return code


def _secret(value: object) -> str | None:
    get = getattr(value, "get_secret_value", None)
    return str(get()) if get is not None else None


def _option(options: Sequence[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` among the options, if given."""
    for i, arg in enumerate(options):
        if arg == name and i + 1 < len(options):
            return options[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _preflight(command: str, options: list[str], settings: Settings) -> None:
    """Raise ConfigError for what the command would otherwise find only later."""
    if command == "download-files":
        return
    settings.require_llm()
    _ = settings.memory_secret
    if command == "console":
        _check_audio(options)
    else:
        _check_livekit(command, options, settings)
    # The database after the settings: a missing one is said without loading SQLAlchemy.
    if settings.is_embedded_sqlite:
        _migrate_embedded(settings)
    room = _option(options, "--room")
    if command == "connect" and room:
        # (without --room, LiveKit's CLI says what is missing itself)
        _check_reachable(*_livekit(options, settings), room)


def _livekit(options: Sequence[str], settings: Settings) -> tuple[str, str, str]:
    """The LiveKit server's URL, API key and secret: the options', else the settings'."""
    return (
        _option(options, "--url") or settings.livekit_url or "",
        _option(options, "--api-key") or _secret(settings.livekit_api_key) or "",
        _option(options, "--api-secret") or _secret(settings.livekit_api_secret) or "",
    )


def _check_livekit(command: str, options: Sequence[str], settings: Settings) -> None:
    """Raise ConfigError naming each of the server's URL, key and secret that is missing."""
    url, key, secret = _livekit(options, settings)
    missing = [
        name
        for name, value in (
            ("LIVEKIT_URL", url),
            ("LIVEKIT_API_KEY", key),
            ("LIVEKIT_API_SECRET", secret),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            f"`{command}` needs the LiveKit server: set {', '.join(missing)} "
            f"in the environment or .env ({LIVEKIT_HINT})."
        )


def _migrate_embedded(settings: Settings) -> None:
    """Migrate an embedded SQLite file now, not at the first job: a worker reports itself
    full while its database is not migrated (:mod:`.health`), so on a new file it would
    never be given the job that migrates it."""
    from ..persistence.keystore import Vault
    from ..persistence.migrate import upgrade_sync

    try:
        vault = Vault.open(
            settings.database_url, master_keys=settings.master_keys, keys_url=settings.keys_url
        )
        upgrade_sync(settings.database_url, secret=settings.memory_secret, vault=vault)
    except Exception as exc:  # a path that cannot be written, a file that is not SQLite
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = settings.database_url
        raise ConfigError(f"cannot prepare the database {where}: {reason}") from None


def _check_reachable(url: str, key: str, secret: str, room: str) -> None:
    """Ask the server about the room once: `connect` would otherwise wait forever."""
    from livekit import api

    async def ask() -> None:
        async with api.LiveKitAPI(url, key, secret) as lk:
            await lk.room.list_rooms(api.ListRoomsRequest(names=[room]))

    quiet_dev_key_warning()
    try:
        asyncio.run(asyncio.wait_for(ask(), CONNECT_TIMEOUT))
    except TimeoutError:
        raise ConfigError(
            f"cannot reach the LiveKit server at {url}: no answer in {CONNECT_TIMEOUT:g} s."
        ) from None
    except Exception as exc:  # any transport or API error: say which, in one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"cannot reach the LiveKit server at {url}: {reason}") from None


def _check_audio(options: list[str]) -> None:
    """``console`` needs PortAudio, and in audio mode a microphone and a speaker."""
    try:
        import sounddevice
    except OSError:
        raise ConfigError(
            "console needs the PortAudio library (apt install libportaudio2), even with "
            "--text; `python -m coach chat` needs none."
        ) from None
    if "--text" in options or "--list-devices" in options:
        return
    for kind in ("input", "output"):
        given = _option(options, f"--{kind}-device")
        device: int | str | None = int(given) if given and given.isdigit() else given
        try:
            sounddevice.query_devices(device, kind=kind)
        except (ValueError, sounddevice.PortAudioError):
            which = f" {given}" if given else " (a microphone and a speaker are needed)"
            raise ConfigError(
                f"no audio {kind} device{which}; `python -m coach console --list-devices` "
                "lists them, and `console --text` or `chat` need none."
            ) from None
