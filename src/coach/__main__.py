"""``python -m coach``: the LiveKit worker commands plus chat, demo, db, keys, sessions,
users, token and web."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from .errors import CoachError, ConfigError
from .locations import default_database_path

if TYPE_CHECKING:
    from .persistence.keystore import Vault
    from .settings import Settings

LIVEKIT_COMMANDS = {
    "dev": "run the worker in development mode (no reload: restart it after a change)",
    "start": "run the worker in production mode (drains on SIGTERM, health on :8081)",
    "console": "talk to the agent through your microphone (needs PortAudio)",
    "connect": "connect the worker to an existing room",
    "download-files": "download model files the plugins need (silero VAD, turn detector)",
}


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (``coach: ...``, exit 2) like every
    other error, instead of the usage text and a second line."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    parser = _Parser(
        prog="coach" if script == "coach" else "python -m coach",
        description="coach — a LiveKit voice agent that coaches design challenges and "
        "never loses your place.",
        epilog="Settings come from the environment or ./.env (see .env.example). The "
        "database is COACH_DATABASE_URL; without it, the SQLite file "
        f"{default_database_path()}.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chat = sub.add_parser("chat", help="text chat with the agents in this terminal")
    chat.add_argument("--user", help="your identity (keeps your sessions apart from others')")
    db = sub.add_parser("db", help="database migrations")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    db_sub.add_parser("upgrade", help="apply migrations to COACH_DATABASE_URL")
    keys = sub.add_parser("keys", help="the master key and the key store")
    k_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    k_sub.add_parser("new", help="print a new random master key (for COACH_MASTER_KEY)")
    k_sub.add_parser(
        "rotate",
        help="re-wrap every data key under COACH_MASTER_KEY (the previous keys in "
        "COACH_PREVIOUS_MASTER_KEYS); the data is not touched",
    )
    sessions = sub.add_parser(
        "sessions", help="stored sessions: list, show, export, branch, delete, prune"
    )
    s_sub = sessions.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)
    s_list = s_sub.add_parser("list", help="recent sessions (of one user with --user)")
    s_list.add_argument("--user", help="the user's identity")
    s_show = s_sub.add_parser("show", help="phases, conversation, zones and deltas of a session")
    s_show.add_argument("session_id")
    s_show.add_argument("--steps", action="store_true", help="show tool calls and handoffs too")
    s_show.add_argument("--prompts", action="store_true", help="show each phase's prompts")
    s_export = s_sub.add_parser(
        "export", help="everything stored about a session (or, with --user, a person), as JSON"
    )
    s_export.add_argument("session_id", nargs="?")
    s_export.add_argument(
        "--user", metavar="IDENTITY", help="all of this person's sessions and person record"
    )
    s_branch = s_sub.add_parser(
        "branch", help="a new session from the end of a completed phase of another"
    )
    s_branch.add_argument("session_id")
    s_branch.add_argument("--from", dest="phase_id", required=True, metavar="PHASE")
    s_delete = s_sub.add_parser("delete", help="erase a session and everything stored of it")
    s_delete.add_argument("session_id")
    s_delete.add_argument("--yes", action="store_true", help="do not ask")
    s_prune = s_sub.add_parser("prune", help="erase sessions not updated for DAYS days")
    s_prune.add_argument("--older-than", dest="days", type=float, required=True, metavar="DAYS")
    s_prune.add_argument("--status", choices=["completed", "failed", "in_progress"])
    s_prune.add_argument("--dry-run", action="store_true", help="only print what would go")
    s_prune.add_argument("--yes", action="store_true", help="do not ask")
    users = sub.add_parser(
        "users", help="people: show (what is remembered), forget, delete (erase a person)"
    )
    u_sub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    u_show = u_sub.add_parser("show", help="a person: their sessions and what coach remembers")
    u_show.add_argument("identity")
    u_forget = u_sub.add_parser("forget", help="forget one remembered fact, or all")
    u_forget.add_argument("identity")
    u_forget.add_argument("fact_id", metavar="FACT_ID|all")
    u_delete = u_sub.add_parser("delete", help="erase a person: the user and all their sessions")
    u_delete.add_argument("identity")
    u_delete.add_argument("--yes", action="store_true", help="do not ask")
    token = sub.add_parser("token", help="print a LiveKit join token that dispatches coach")
    token.add_argument("--identity", required=True)
    token.add_argument("--room", default="coach")
    token.add_argument("--name")
    web = sub.add_parser("web", help="serve the browser client and the join tokens it needs")
    web.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    web.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    web.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the page may be opened as, besides localhost (repeatable)",
    )
    sub.add_parser(
        "demo",
        help="two scripted visits, the second resuming the first (no model, no network)",
        add_help=False,
    )
    for name, text in LIVEKIT_COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def _first_line_of_each_step(record: logging.LogRecord) -> bool:
    """Alembic logs each migration with its whole docstring: keep the first line."""
    message = record.getMessage()
    if "\n" in message:
        record.msg, record.args = message.splitlines()[0].rstrip(",:;") + " ...", ()
    return True


def _configure_logging(settings: Settings, *, quiet: bool) -> None:
    level = logging.WARNING if quiet else getattr(logging, settings.log_level.upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if quiet:
        # The terminal surfaces say what failed in one line of their own; the framework's
        # retry notices and tracebacks would bury it (COACH_LOG_LEVEL=DEBUG shows them).
        framework = logging.DEBUG if settings.log_level.upper() == "DEBUG" else logging.CRITICAL
        logging.getLogger("livekit").setLevel(framework)


def _livekit(argv: Sequence[str]) -> Callable[[], int]:
    # Fail fast, without a traceback, on what the worker would only find per job.
    from .prompts import load_prompts
    from .settings import load_settings

    settings = load_settings()
    load_prompts(settings.prompts_dir)
    from .surfaces.livekit_cli import run_cli

    return functools.partial(run_cli, argv, settings)


def _sessions(settings: Settings, args: argparse.Namespace) -> Callable[[], int]:
    from .persistence import open_repository
    from .prompts import load_manifest
    from .surfaces import sessions

    export = args.command == "sessions" and args.sessions_command == "export"
    if export and (args.session_id is None) == (args.user is None):
        raise ConfigError("sessions export takes a session id or --user IDENTITY (one).")
    phase_ids = load_manifest(settings.prompts_dir).ids

    async def run() -> int:
        store = await open_repository(
            settings.database_url,
            secret=settings.memory_secret,
            master_keys=settings.master_keys,
            keys_url=settings.keys_url,
            create_schema=settings.is_embedded_sqlite,
            check_schema=not settings.is_embedded_sqlite,
            phase_ids=phase_ids,
        )
        try:
            if args.command == "users" and args.users_command == "show":
                await sessions.show_user(store, args.identity, sys.stdout)
            elif args.command == "users" and args.users_command == "forget":
                await sessions.forget_fact(store, args.identity, args.fact_id, sys.stdout)
            elif args.command == "users":
                await sessions.delete_user(store, args.identity, sys.stdout, _confirm(args))
            elif args.sessions_command == "list":
                await sessions.list_sessions(
                    store, sys.stdout, user=args.user, database=settings.database_label
                )
            elif args.sessions_command == "show":
                await sessions.show_session(
                    store, args.session_id, sys.stdout, steps=args.steps, prompts=args.prompts
                )
            elif args.sessions_command == "branch":
                await sessions.branch_session(store, args.session_id, args.phase_id, sys.stdout)
            elif args.sessions_command == "delete":
                await sessions.delete_session(store, args.session_id, sys.stdout, _confirm(args))
            elif args.sessions_command == "prune":
                await sessions.prune_sessions(
                    store,
                    sys.stdout,
                    _confirm(args),
                    days=args.days,
                    status=args.status,
                    dry_run=args.dry_run,
                )
            elif args.user is not None:
                await sessions.export_user(store, args.user, sys.stdout)
            else:
                await sessions.export_session(store, args.session_id, sys.stdout)
        finally:
            await store.aclose()
        return 0

    return lambda: asyncio.run(run())


def _vault(settings: Settings) -> Vault:
    from .persistence.keystore import Vault

    return Vault.open(
        settings.database_url, master_keys=settings.master_keys, keys_url=settings.keys_url
    )


def _keys(settings: Settings, action: str) -> int:
    if action == "new":
        import secrets

        print(secrets.token_urlsafe(32))
        return 0
    vault = _vault(settings)

    async def rotate() -> tuple[int, int]:
        try:
            return await vault.store.rewrap(vault.masters)
        finally:
            await vault.aclose()

    rewrapped, current = asyncio.run(rotate())
    key_id = vault.masters.current.key_id
    print(
        f"{rewrapped} data keys re-wrapped under master key {key_id}; {current} already were. "
        "The previous master keys wrap nothing now: remove them from COACH_PREVIOUS_MASTER_KEYS."
    )
    return 0


def _confirm(args: argparse.Namespace) -> Callable[[str], bool]:
    """``--yes``, or the operator's answer on a terminal (never yes without one)."""

    def ask(question: str) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            return False
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    return ask


def _command(argv: Sequence[str]) -> Callable[[], int | None]:
    """A command's start-up: parse ``argv``, load the settings, check what can be checked
    first and import what the command runs. The call returned does the command's work and
    returns its exit code (None: 0)."""
    if argv and argv[0] in LIVEKIT_COMMANDS:
        return _livekit(argv)
    if argv and argv[0] == "demo":
        from .testing.demo import main as demo

        return functools.partial(demo, argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return parser.print_help
    from .settings import load_settings  # pydantic: not for --help

    settings = load_settings()
    if args.command == "chat":
        # What run_chat checks first, checked before the agent framework is imported.
        settings.require_llm()
        if args.user is not None:
            from .store import check_identity

            check_identity(args.user)
        from .surfaces.chat import run_chat

        _configure_logging(settings, quiet=True)
        return lambda: asyncio.run(run_chat(settings, user=args.user))
    if args.command == "db":
        from .persistence.migrate import upgrade_sync

        _configure_logging(settings, quiet=False)
        logging.getLogger("alembic.runtime.migration").addFilter(_first_line_of_each_step)

        def upgrade() -> None:
            upgrade_sync(
                settings.database_url, secret=settings.memory_secret, vault=_vault(settings)
            )
            print("database is up to date")

        return upgrade
    if args.command == "keys":
        return functools.partial(_keys, settings, args.keys_command)
    if args.command in ("sessions", "users"):
        _configure_logging(settings, quiet=True)
        return _sessions(settings, args)
    if args.command == "token":
        from .surfaces.token import make_token

        return lambda: print(make_token(settings, args.identity, args.room, name=args.name))
    if args.command == "web":
        # What run_web checks first, checked before aiohttp is imported.
        from .surfaces.web_checks import check_livekit_settings, check_port

        check_port(args.port)
        check_livekit_settings(settings)
        from .surfaces.web import run_web

        _configure_logging(settings, quiet=False)
        return functools.partial(
            run_web, settings, args.host, args.port, allowed_hosts=args.allow_host
        )
    raise AssertionError(args.command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments) and return its exit
    code: 2, after one line on stderr, for what stops it (a bad argument or setting, a
    store that cannot be used). The cyclic collector waits while the command starts
    (:func:`_started`); the process's entry point is :func:`run`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    collecting, thawed = gc.isenabled(), gc.get_freeze_count() == 0
    gc.disable()  # while the command starts (see _started)
    try:
        work = _command(argv)
        _started(collecting, freeze=thawed)
        return work() or 0
    except CoachError as exc:
        # One line, whatever the message quotes (an argument may hold a newline).
        print(f"coach: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 0
    except BrokenPipeError:
        # The reader went away (``sessions show ID | head``): stop quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:  # the collector as it was found (for a caller in the same process)
        if thawed:
            gc.unfreeze()
        if collecting:
            gc.enable()


def _started(collecting: bool, *, freeze: bool) -> None:
    """Start-up is over: what it built is frozen out of the collector, which then runs.

    A command's start-up (argparse, the settings, its imports: SQLAlchemy, pydantic, for a
    chat the agent framework) builds a few hundred thousand objects that live as long as
    the process, and the cyclic collector, left on, walks them again and again while they
    are built: ``main`` turns it off for start-up, and here moves what start-up built into
    the permanent generation (:func:`gc.freeze`), which no collection walks — not the
    conversation's, not the interpreter's last at exit (:func:`run`). What start-up left
    as garbage stays with it: about a megabyte. Measured by ``bench/startup.py``, paired:
    about 0.1 s of CPU less for a database command (of 0.5 s), 0.3 s for a chat to its
    greeting (of 2.5 s). A caller that froze objects of its own keeps them frozen, and
    start-up's objects are then left to the collector: ``freeze`` is False.
    """
    if freeze:
        gc.freeze()
    if collecting:
        gc.enable()


def run() -> NoReturn:
    """The process's entry point (``python -m coach``, the ``coach`` script): exit with
    :func:`main`'s code, with what the command built frozen first, so the interpreter's
    last collection does not walk it."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
