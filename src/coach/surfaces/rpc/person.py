"""The person: what coach remembers, their data to take away, and erasing them."""

from __future__ import annotations

import secrets
import time
from io import StringIO
from typing import Final

from livekit import rtc
from pydantic import TypeAdapter

from ...agents.base import CoachAgentBase
from ...conversation.userdata import UserData
from ...errors import SavingBehind
from ...state.person import PersonError, forget, forget_all
from ...state.shapes import Fact
from ...state.zones import Action
from ...store import clean_text
from ..sessions import export_person
from .contract import (
    CONFIRM_SECONDS,
    MAX_RESPONSE_BYTES,
    ExportMyDataRequest,
    ExportMyDataResponse,
    ForgetMeRequest,
    ForgetMeResponse,
    ForgetRequest,
    ForgetResponse,
    GetProfileRequest,
    GetProfileResponse,
)
from .registry import LONGEST_CURSOR, Call, caller_record, json_size, method


async def _known(call: Call) -> UserData:
    """The conversation's user data, with the caller's person record as stored."""
    userdata = call.userdata
    if userdata.user_id is None:
        raise rtc.RpcError(409, "This conversation has not identified you yet.")
    await userdata.load_person()
    return userdata


def _facts(userdata: UserData) -> list[Fact]:
    return list(userdata.person["facts"])


@method("coach.get_profile", GetProfileRequest, GetProfileResponse)
async def get_profile(call: Call, request: GetProfileRequest) -> GetProfileResponse:
    """What coach remembers about the caller, as stored."""
    userdata = await _known(call)
    return GetProfileResponse(facts=_facts(userdata))


@method("coach.forget", ForgetRequest, ForgetResponse)
async def forget_fact(call: Call, request: ForgetRequest) -> ForgetResponse:
    """Forget one fact (or all): stored with its delta, and the active agent's
    instructions renewed so the model no longer sees it."""
    userdata = await _known(call)
    fact_id = clean_text(request.fact_id).strip()
    try:
        if fact_id.lower() == "all":
            value, change = forget_all(userdata.person)
        else:
            value, change = forget(userdata.person, fact_id)
    except PersonError as exc:
        raise rtc.RpcError(404, str(exc)) from None
    if not change.count:  # "all" with nothing remembered: nothing to store
        return ForgetResponse(facts=[])
    await userdata.change_person(
        value,
        change,
        Action(type="forget", params={"fact_id": fact_id}),
        trigger="user_action",
        source="user",
        actor_id=call.caller,
    )
    agent = call.session.current_agent if call.session is not None else None
    if isinstance(agent, CoachAgentBase):
        await agent.refresh_instructions()
    return ForgetResponse(facts=_facts(userdata))


@method("coach.export_my_data", ExportMyDataRequest, ExportMyDataResponse)
async def export_my_data(call: Call, request: ExportMyDataRequest) -> ExportMyDataResponse:
    """The caller's export, one chunk per call. The first call reads the whole document
    (``sessions export --user``) and keeps its chunks in this job's memory, so every
    chunk is of the same read; a new first call replaces it."""
    userdata = call.userdata
    if request.cursor is None:
        user = await caller_record(call)
        if userdata.session_id is not None:
            await userdata.catch_up()  # what was said so far is in it
        text = StringIO()
        await export_person(userdata.store, user, text)
        export = userdata.export = (secrets.token_urlsafe(12), _chunks(text.getvalue()))
        index = 0
    else:
        export, index = _cursor(userdata, request.cursor)
    export_id, chunks = export
    last = index + 1 == len(chunks)
    return ExportMyDataResponse(
        chunk=chunks[index],
        next_cursor=None if last else f"{export_id}.{index + 1}",
        index=index,
        total_chunks=len(chunks),
    )


def _cursor(userdata: UserData, cursor: str) -> tuple[tuple[str, tuple[str, ...]], int]:
    """The export ``cursor`` is of (this conversation's current one) and its chunk index."""
    export_id, _, index = cursor.rpartition(".")
    export = userdata.export
    if (
        export is None
        or not secrets.compare_digest(export_id, export[0])
        or not (index.isascii() and index.isdigit())
        or not 0 < int(index) < len(export[1])
    ):
        raise rtc.RpcError(404, "No such export chunk; start the export again without a cursor.")
    return export, int(index)


def _chunks(text: str) -> tuple[str, ...]:
    """``text`` cut into parts each of which fits an answer (escaped as a JSON string)."""
    envelope = ExportMyDataResponse(
        chunk="", next_cursor="x" * 40, index=LONGEST_CURSOR, total_chunks=LONGEST_CURSOR
    )
    room = MAX_RESPONSE_BYTES - json_size(envelope)
    chunks: list[str] = []
    start = 0
    while start < len(text) or not chunks:
        length = room
        while (size := _escaped(text[start : start + length])) > room:
            length = max(1, length * room // size - 1)
        chunks.append(text[start : start + length])
        start += length
    return tuple(chunks)


def _escaped(text: str) -> int:
    """Bytes of ``text`` as a JSON string's contents in an answer."""
    return len(_JSON_STRING.dump_json(text)) - 2


_JSON_STRING: Final = TypeAdapter(str)


@method("coach.forget_me", ForgetMeRequest, ForgetMeResponse)
async def forget_me(call: Call, request: ForgetMeRequest) -> ForgetMeResponse:
    """Erase the caller as ``users delete`` does, in two calls: the first gets a token
    (random, kept in this job's memory with the caller and an expiry), the second erases
    with it. The live conversation is closed first, so nothing more is written of them."""
    userdata = call.userdata
    user = await caller_record(call)
    count = await userdata.store.count_user_sessions(user.id)
    if request.confirm_token is None:
        token = secrets.token_urlsafe(24)
        userdata.forget_token = (token, call.caller, time.monotonic() + CONFIRM_SECONDS)
        return ForgetMeResponse(
            erased=False, sessions=count, confirm_token=token, expires_in=CONFIRM_SECONDS
        )
    pending, userdata.forget_token = userdata.forget_token, None
    if (
        pending is None
        or pending[1] != call.caller
        or time.monotonic() >= pending[2]
        or not secrets.compare_digest(pending[0], request.confirm_token)
    ):
        raise rtc.RpcError(
            409, "That confirmation is wrong or has expired; nothing was erased. Ask again."
        )
    try:
        await userdata.catch_up()  # saving behind: 503 before anything ends
    except SavingBehind:
        userdata.forget_token = pending  # the same confirmation works once it has caught up
        raise
    if call.session is not None:
        await call.session.aclose()  # the conversation ends: nothing more is said or stored
    await userdata.catch_up()  # what its closing queued lands, and goes with the rest
    erased = await userdata.store.delete_user(user.identity)
    userdata.clear_person()
    return ForgetMeResponse(erased=True, sessions=erased or 0, confirm_token=None, expires_in=None)
