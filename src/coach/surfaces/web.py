"""``python -m coach web``: the browser client, and the join tokens it asks for.

Serves the built client (``web_client/``, shipped inside the package, so no Node.js is
needed to run it) at ``/``, and mints join tokens at ``POST /api/token``:

    request:  {"identity": "ada"}
    answer:   {"server_url": ..., "participant_token": ..., "room_name": ..., "identity": ...}
    refusal:  HTTP 400 / 413 with {"error": "one line"}

Each token joins a new room (``coach-`` and 12 hex digits), dispatches the ``coach``
agent there, and expires after :data:`TOKEN_TTL` (a token is needed only to join).
Anyone who can reach this server can ask for any identity: it is the development
setup. A production app mints tokens behind its own login, with the identity taken from
the login — :func:`~coach.surfaces.token.make_token` is the same code.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import secrets
import signal
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from ..errors import CoachError, ConfigError
from ..settings import Settings
from .token import make_token
from .web_checks import check_livekit_settings, check_port

logger = logging.getLogger("coach.web")

CLIENT_DIR: Final = Path(__file__).with_name("web_client")
"""The built client (``make web`` writes it; the package ships it)."""
TOKEN_TTL: Final = timedelta(minutes=15)
"""How long a minted token can be used to join."""
MAX_BODY: Final = 4_096
"""Bytes a token request may have."""
BODY_TIMEOUT: Final = 10.0
"""Seconds a token request's body may take to arrive (a short body is not waited on)."""

_SETTINGS: Final = web.AppKey("settings", Settings)
_BODY_TIMEOUT: Final = web.AppKey("body_timeout", float)


LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names every server answers to; others only when allowed (``--allow-host``)."""

_NAME = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
_PORT = re.compile(r"^[0-9]{1,5}$")


def host_name(value: str | None) -> str | None:
    """The host a ``Host`` header (or an ``Origin``'s authority) names, lower-case, or
    ``None`` unless it is exactly ``name[:port]``, ``IPv4[:port]`` or ``[IPv6][:port]``.

    Nothing else is a host: no user part (``evil.com@localhost``), no fragment or path
    (``127.0.0.1#evil.com``), no second name where the port goes (``localhost:evil.com``).
    """
    if not value:
        return None
    value = value.lower()
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and _PORT.match(rest[1:]))):
            return None
        try:
            return str(ipaddress.IPv6Address(inside))
        except ValueError:
            return None
    name, colon, port = value.partition(":")
    if colon and not _PORT.match(port):
        return None
    return name if _NAME.match(name) else None


def origin_host(origin: str) -> str | None:
    """The host of an ``Origin`` header (``http(s)://host[:port]``), or ``None``."""
    scheme, sep, authority = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return None
    return host_name(authority)


class OneLineBadRequests(logging.Filter):
    """aiohttp logs a request it cannot parse with a traceback at ERROR; a malformed
    request is the client's problem, worth one WARNING line naming what was wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            reason = " ".join(str(error.message).split())[:200]
            record.msg = f"{record.getMessage()}: malformed request (HTTP {error.code}: {reason})"
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_BAD_REQUESTS: Final = OneLineBadRequests()


def web_app(
    settings: Settings,
    client_dir: Path = CLIENT_DIR,
    *,
    allowed_hosts: Collection[str] = (),
    body_timeout: float = BODY_TIMEOUT,
) -> web.Application:
    """The server's routes: the client's files and ``POST /api/token``.

    A request naming another host (the ``Host`` header) than loopback and
    ``allowed_hosts`` is refused (403), so that a web page whose name an attacker points
    at 127.0.0.1 (DNS rebinding) cannot mint tokens from the browser of whoever runs it.

    Raises:
        ConfigError: the LiveKit settings are missing, or the client is not built.
    """
    check_livekit_settings(settings)
    index = client_dir / "index.html"
    if not index.is_file():
        raise ConfigError(f"the web client is not built ({index} is missing): run `make web`.")

    async def serve_index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(index, headers={"Cache-Control": "no-cache"})

    hosts = LOOPBACK_HOSTS | {h.lower() for h in allowed_hosts}

    @web.middleware
    async def known_hosts_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.raw_path.startswith("/"):  # absolute-form: for proxies, not us
            return _refuse(400, "Send the path only, with the host in the Host header.")
        header = request.headers.get("Host")
        name = host_name(header)
        if name is None:
            return _refuse(400, "The Host header is missing or is not a host name.")
        if name not in hosts:
            return _refuse(403, f"Host {name} is not served here (coach web --allow-host).")
        origin = request.headers.get("Origin")
        if request.method not in ("GET", "HEAD") and origin is not None:
            # A page of another site may POST here (a "simple" text/plain request needs
            # no preflight), even if it cannot read the answer: refuse it outright.
            if origin_host(origin) not in hosts:
                return _refuse(403, f"Origin {origin[:80]} is not served here.")
        return await handler(request)

    logging.getLogger("aiohttp.server").addFilter(_BAD_REQUESTS)  # once: a set
    app = web.Application(client_max_size=MAX_BODY, middlewares=[known_hosts_only])
    app[_SETTINGS] = settings
    app[_BODY_TIMEOUT] = body_timeout
    app.router.add_post("/api/token", mint_token)
    app.router.add_get("/", serve_index)
    app.router.add_static("/", client_dir)
    app.on_response_prepare.append(_no_sniffing)
    return app


async def mint_token(request: web.Request) -> web.Response:
    """``POST /api/token``: a join token for the identity in the JSON body."""
    try:
        async with asyncio.timeout(request.app[_BODY_TIMEOUT]):
            raw = await request.read()
        body: Any = json.loads(raw)
    except TimeoutError:
        logger.info("a token request's body did not arrive in time")
        late = _refuse(408, "The request body did not arrive in time.")
        late.force_close()  # the rest of the body may still come: the connection is done
        return late
    except web.HTTPRequestEntityTooLarge:
        return _refuse(413, f"The request is over {MAX_BODY} bytes.")
    except (ValueError, RecursionError):
        return _refuse(400, "The request is not JSON.")
    identity = body.get("identity") if isinstance(body, dict) else None
    if not isinstance(identity, str):
        return _refuse(400, 'Send {"identity": "your name"}.')
    room = f"coach-{secrets.token_hex(6)}"
    settings = request.app[_SETTINGS]
    try:
        token = make_token(settings, identity, room, ttl=TOKEN_TTL)
    except CoachError as exc:  # the identity rule, in its own words
        return _refuse(400, " ".join(str(exc).split()))
    logger.info("minted a join token", extra={"room": room})
    return web.json_response(
        {
            "server_url": settings.public_livekit_url or settings.livekit_url,
            "participant_token": token,
            "room_name": room,
            "identity": identity,
        }
    )


def _refuse(status: int, error: str) -> web.Response:
    return web.json_response({"error": error}, status=status)


async def _no_sniffing(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Content-Type-Options"] = "nosniff"


def run_web(
    settings: Settings, host: str, port: int, *, allowed_hosts: Collection[str] = ()
) -> int:
    """Serve the client until SIGINT or SIGTERM; the exit code (0, or a ConfigError).

    Requests may name loopback, ``host`` (unless it is a wildcard address) and
    ``allowed_hosts``."""
    check_port(port)
    named = [] if host in ("0.0.0.0", "::", "") else [host]
    app = web_app(settings, allowed_hosts=[*named, *allowed_hosts])
    livekit_url = settings.public_livekit_url or settings.livekit_url
    asyncio.run(_serve(app, host, port, livekit_url))
    return 0


async def _serve(app: web.Application, host: str, port: int, livekit_url: str | None) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(f"`web` cannot listen on {host}:{port}: {exc.strerror}.") from None
        # Printed once the socket listens: a script may wait for this line.
        print(f"coach web: open http://{host}:{port}/ (LiveKit {livekit_url})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
