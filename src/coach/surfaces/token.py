"""``python -m coach token``: a join token that also dispatches the coach agent."""

from __future__ import annotations

import datetime
import os

from livekit import api

from ..errors import ConfigError
from .worker import AGENT_NAME


def make_token(identity: str, room: str, *, name: str | None = None, ttl_hours: float = 6) -> str:
    """A LiveKit JWT for ``identity`` in ``room`` that dispatches the ``coach`` agent.

    Reads ``LIVEKIT_API_KEY`` and ``LIVEKIT_API_SECRET``.
    """
    key, secret = os.environ.get("LIVEKIT_API_KEY"), os.environ.get("LIVEKIT_API_SECRET")
    if not key or not secret:
        raise ConfigError(
            "Set LIVEKIT_API_KEY and LIVEKIT_API_SECRET "
            "(for livekit-server --dev: devkey / secret)."
        )
    token = (
        api.AccessToken(key, secret)
        .with_identity(identity)
        .with_name(name or identity)
        .with_ttl(datetime.timedelta(hours=ttl_hours))
        .with_grants(api.VideoGrants(room_join=True, room=room))
        .with_room_config(
            api.RoomConfiguration(agents=[api.RoomAgentDispatch(agent_name=AGENT_NAME)])
        )
    )
    return token.to_jwt()
