"""The room's API for frontends: typed, owner-only RPC methods on the agent participant.

Every method is one entry of :data:`METHODS`, with a pydantic model for its request and
one for its response (:mod:`.contract`); the TypeScript types frontends use are
generated from the same models (:func:`json_schema`, ``web/src/rpc.ts``). A call goes
through :func:`invoke` (:mod:`.registry`):

1. only the session's owner — the participant whose identity the job serves — is
   answered (403 otherwise);
2. the payload is at most :data:`MAX_REQUEST_BYTES` bytes of UTF-8 (413) and must
   validate against the request model (400);
3. a session id that is unknown, malformed or another user's gets the same 404;
4. the answer fits LiveKit's payload limit: pages end early and long texts are cut,
   which the response says (``before`` cursors, ``truncated`` fields).

Errors are ``rtc.RpcError`` with the codes of :data:`ERRORS`; never a stack trace. The
methods, by concern: :mod:`.history` (the caller's stored work), :mod:`.live` (the live
conversation), :mod:`.person` (what is remembered, export, erasure).
"""

from . import history, live, person  # noqa: F401  (each registers its methods)
from .contract import CONFIRM_SECONDS, ERRORS, MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES
from .registry import METHODS, Call, Method, invoke, register_all
from .schema import json_schema

__all__ = [
    "CONFIRM_SECONDS",
    "ERRORS",
    "MAX_REQUEST_BYTES",
    "MAX_RESPONSE_BYTES",
    "METHODS",
    "Call",
    "Method",
    "invoke",
    "json_schema",
    "register_all",
]
