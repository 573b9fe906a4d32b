"""What ``python -m coach web`` checks before it serves: the port, and the LiveKit
settings a join token needs.

Apart from the server (:mod:`.web`) so that a misconfiguration is said without loading
aiohttp: ``__main__`` runs these checks first, and :mod:`.web` runs them again for a
program that builds the server itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..settings import Settings


def check_port(port: int) -> None:
    """Raise :class:`ConfigError` unless ``port`` is one a server can listen on."""
    if not 0 < port < 65_536:
        raise ConfigError(f"`web --port {port}`: a port is a number from 1 to 65535.")


def check_livekit_settings(settings: Settings) -> None:
    """Raise :class:`ConfigError` naming each LiveKit setting a join token needs that is
    missing."""
    missing = [
        name
        for name, value in (
            ("LIVEKIT_URL", settings.livekit_url),
            ("LIVEKIT_API_KEY", settings.livekit_api_key),
            ("LIVEKIT_API_SECRET", settings.livekit_api_secret),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            f"`web` needs {', '.join(missing)} in the environment or .env to mint join "
            "tokens (for livekit-server --dev: ws://localhost:7880, devkey, secret)."
        )
