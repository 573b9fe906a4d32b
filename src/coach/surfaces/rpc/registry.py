"""The registry: every method by name, the owner-only call path with its error mapping, and
what several methods share (the caller and their sessions, fitting an answer in the RPC
limit)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from livekit import rtc
from livekit.agents import AgentSession
from pydantic import BaseModel, ValidationError

from ...conversation.userdata import UserData
from ...errors import (
    BranchRefused,
    NotIdentified,
    ResumeError,
    SavingBehind,
    SessionNotFound,
    StaleWrite,
    StorageError,
)
from ...store import SessionRecord, UserRecord, clean_text
from .contract import MAX_REQUEST_BYTES, NOT_FOUND, SESSION_ID

logger = logging.getLogger("coach.rpc")

logger = logging.getLogger("coach.rpc")


# --- the registry ---------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """What a handler works with: the job's conversation and the caller."""

    userdata: UserData
    session: AgentSession[UserData] | None
    caller: str


Req = TypeVar("Req", bound=BaseModel)
Resp = TypeVar("Resp", bound=BaseModel)
Handler = Callable[[Call, Any], Awaitable[BaseModel]]


@dataclass(frozen=True)
class Method:
    """One RPC method: its name, request and response models, and handler."""

    name: str
    request: type[BaseModel]
    response: type[BaseModel]
    handler: Handler


METHODS: dict[str, Method] = {}
"""Every RPC method of the agent participant, by name."""


def method(
    name: str, request: type[Req], response: type[Resp]
) -> Callable[[Callable[[Call, Req], Awaitable[Resp]]], Callable[[Call, Req], Awaitable[Resp]]]:
    """Register the decorated handler as the method ``name``."""

    def register(
        handler: Callable[[Call, Req], Awaitable[Resp]],
    ) -> Callable[[Call, Req], Awaitable[Resp]]:
        METHODS[name] = Method(name, request, response, handler)
        return handler

    return register


def register_all(
    participant: rtc.LocalParticipant, userdata: UserData, session: AgentSession[UserData]
) -> None:
    """Register every method of :data:`METHODS` on the agent participant."""
    for name in METHODS:

        async def answer(data: rtc.RpcInvocationData, name: str = name) -> str:
            return await invoke(name, userdata, data, session=session)

        participant.register_rpc_method(name, answer)


async def invoke(
    name: str,
    userdata: UserData,
    data: rtc.RpcInvocationData,
    *,
    session: AgentSession[UserData] | None = None,
) -> str:
    """Answer one call of method ``name``: checks, the handler, errors as ``RpcError``."""
    entry = METHODS[name]
    if userdata.identity is None or data.caller_identity != userdata.identity:
        raise rtc.RpcError(403, "Only the session's owner can do this.")
    if len(data.payload.encode("utf-8", "surrogatepass")) > MAX_REQUEST_BYTES:
        raise rtc.RpcError(413, f"Payload too large (more than {MAX_REQUEST_BYTES} bytes).")
    request = _parse(entry.request, data.payload)
    call = Call(userdata, session, data.caller_identity)
    try:
        response = await entry.handler(call, request)
    except rtc.RpcError:
        raise
    except SessionNotFound:
        raise rtc.RpcError(404, NOT_FOUND) from None
    except (ResumeError, BranchRefused, StaleWrite, NotIdentified) as exc:
        raise rtc.RpcError(409, clean_text(str(exc))) from None
    except StorageError:
        raise rtc.RpcError(503, "The database is unavailable; try again.") from None
    except SavingBehind:
        raise rtc.RpcError(503, "Saving is still catching up; try again in a moment.") from None
    except Exception:
        logger.exception("RPC %s failed", name)
        raise rtc.RpcError(500, "Internal error.") from None
    return response.model_dump_json()


def _parse(model: type[Req], payload: str) -> Req:
    try:
        document = json.loads(payload or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        raise rtc.RpcError(400, "Bad request: the payload is not JSON.") from None
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise rtc.RpcError(400, f"Bad request: {where}: {first['msg']}.") from None


# --- what several methods share ---------------------------------------------------


async def caller_user_id(call: Call) -> str:
    """The caller's user id (``SessionNotFound`` for a caller without one yet)."""
    userdata = call.userdata
    if userdata.user_id is not None:
        return userdata.user_id
    user = await userdata.store.find_user(call.caller)
    if user is None:
        raise SessionNotFound("-")
    return user.id


async def owned_session(call: Call, session_id: str) -> SessionRecord:
    """The caller's session ``session_id``; unknown, malformed and foreign ids alike are
    ``SessionNotFound``."""
    user_id = await caller_user_id(call)
    if not SESSION_ID.fullmatch(session_id):
        raise SessionNotFound(session_id)
    found = await call.userdata.store.get_session(session_id, user_id=user_id)
    if found is None:
        raise SessionNotFound(session_id)
    return found


async def caller_record(call: Call) -> UserRecord:
    """The caller's user record (404 when nothing is stored about them)."""
    user = await call.userdata.store.find_user(call.caller)
    if user is None:
        raise rtc.RpcError(404, "Nothing is stored about you.")
    return user


def json_size(model: BaseModel) -> int:
    return len(model.model_dump_json().encode("utf-8"))


LONGEST_CURSOR: Final = 2**63 - 1
"""The widest ``before`` an answer can carry: its envelope is sized with it."""


def fitting(items: Sequence[BaseModel], room: int) -> int:
    """How many of ``items``, from the first, fit in ``room`` bytes as a JSON list's
    elements (each serialized once); at least one — a lone item too large is cut."""
    used = 0
    for count, item in enumerate(items):
        used += json_size(item) + (1 if count else 0)  # the comma before it
        if used > room and count:
            return count
    return len(items)
