"""``python -m coach token``: a join token that also dispatches the coach agent.

Light on purpose: ``token``, ``web`` and the worker commands' checks import it, and none
of them runs an agent, so it loads no agent framework (the worker imports
:data:`AGENT_NAME` from here, not the other way round); LiveKit's server API (aiohttp
and every protobuf service, 0.3-0.5 s of CPU) only once a token is signed.
"""

from __future__ import annotations

import datetime
import warnings

from ..errors import ConfigError
from ..settings import Settings
from ..store import check_identity

AGENT_NAME = "coach"
"""The name the worker registers its agent under, and the one a join token dispatches."""


def quiet_dev_key_warning() -> None:
    """Silence PyJWT's key-length warning: the key is the LiveKit server's (``secret``
    for ``livekit-server --dev``), not coach's to choose, and it printed at every start."""
    warnings.filterwarnings("ignore", message="The HMAC key is", module=r"jwt\.")


def make_token(
    settings: Settings,
    identity: str,
    room: str,
    *,
    name: str | None = None,
    ttl: datetime.timedelta = datetime.timedelta(hours=6),
) -> str:
    """A LiveKit JWT for ``identity`` in ``room`` that dispatches the ``coach`` agent.

    Signs with ``LIVEKIT_API_KEY`` and ``LIVEKIT_API_SECRET`` (environment or ``.env``).
    An identity no user can have (:func:`~coach.store.check_identity`) is refused here,
    not when the agent meets it in the room.
    """
    identity = check_identity(identity)
    if settings.livekit_api_key is None or settings.livekit_api_secret is None:
        raise ConfigError(
            "`token` needs LIVEKIT_API_KEY and LIVEKIT_API_SECRET in the environment or .env "
            "(for livekit-server --dev: devkey / secret)."
        )
    key = settings.livekit_api_key.get_secret_value()
    secret = settings.livekit_api_secret.get_secret_value()
    quiet_dev_key_warning()
    from livekit import api

    token = (
        api.AccessToken(key, secret)
        .with_identity(identity)
        .with_name(name or identity)
        .with_ttl(ttl)
        .with_grants(api.VideoGrants(room_join=True, room=room))
        .with_room_config(
            api.RoomConfiguration(agents=[api.RoomAgentDispatch(agent_name=AGENT_NAME)])
        )
    )
    return token.to_jwt()
