"""The room's API for frontends: typed, owner-only RPC methods on the agent participant.

Every method is one entry of :data:`METHODS`, with a pydantic model for its request and
one for its response; the TypeScript types frontends use are generated from the same
models (:func:`json_schema`, ``web/src/rpc.ts``). A call goes through :func:`invoke`:

1. only the session's owner — the participant whose identity the job serves — is
   answered (403 otherwise);
2. the payload is at most :data:`MAX_REQUEST_BYTES` bytes of UTF-8 (413) and must
   validate against the request model (400);
3. a session id that is unknown, malformed or another user's gets the same 404;
4. the answer fits LiveKit's payload limit: pages end early and long texts are cut,
   which the response says (``before`` cursors, ``truncated`` fields).

Errors are ``rtc.RpcError`` with the codes of :data:`ERRORS`; never a stack trace.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from io import StringIO
from typing import Any, Final, Literal, TypeVar

from livekit import rtc
from livekit.agents import AgentSession, llm
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.json_schema import JsonSchemaMode

from ..agents.base import CoachAgentBase
from ..agents.restore import resumed_agent
from ..errors import (
    BranchRefused,
    InvalidWrite,
    ResumeError,
    SessionNotFound,
    StaleWrite,
    StorageError,
)
from ..live_state import action_id
from ..state.design import DesignError
from ..state.person import PersonError, forget, forget_all
from ..state.view import focus
from ..state.zones import Action, Zone
from ..store import MessageRecord, SessionRecord, UserRecord, clean_text
from ..userdata import UserData
from .room import StateMessage, StepMessage
from .sessions import export_person

logger = logging.getLogger("coach.rpc")

MAX_REQUEST_BYTES: Final = 4_096
"""Bytes (UTF-8) a request payload may have; a larger one is refused with 413."""
MAX_RESPONSE_BYTES: Final = 15_000
"""Bytes an answer may have (LiveKit refuses RPC payloads over 15 KiB)."""
CONFIRM_SECONDS: Final = 120
"""How long a ``coach.forget_me`` confirmation token is valid."""

ERRORS: Final = {
    400: "the payload is not JSON or does not match the method's request type",
    403: "the caller is not the session's owner (the participant this agent serves)",
    404: "no such session of this user (unknown, malformed, foreign ids alike), or no such item",
    409: "the request conflicts with the session's state (e.g. resuming a completed session)",
    413: f"the payload is larger than {MAX_REQUEST_BYTES} bytes",
    503: "the database is unavailable; try again",
}
"""The error codes every method may answer with, and what each means."""

NOT_FOUND: Final = "No such session."
_SESSION_ID: Final = re.compile(r"[0-9a-f]{32}")


# --- the contract: request and response models ------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Response(BaseModel):
    # Every field is always sent: the schema (and TypeScript) says so, defaults included.
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


SessionId = Field(min_length=1, max_length=64, description="A session id (32 hex digits).")


class ListSessionsRequest(_Request):
    """``coach.list_sessions``: the caller's sessions, newest first (a branch names its
    parent, so a client can draw the tree)."""

    limit: int = Field(default=20, ge=1, le=100, description="Sessions at most.")


class SessionSummary(_Response):
    """One of the caller's sessions."""

    id: str
    challenge: str | None
    status: Literal["in_progress", "completed", "failed"]
    created_at: datetime
    updated_at: datetime
    phases_done: int
    phases_total: int
    current_agent: str | None
    current_phase_id: str | None
    parent_session_id: str | None = Field(description="A branch's parent session.")
    branched_from_phase: str | None = Field(description="The parent's phase it starts after.")


class ListSessionsResponse(_Response):
    sessions: list[SessionSummary]
    more: bool = Field(description="Older sessions were left out (by `limit`, or to fit).")


class GetPhaseOutputsRequest(_Request):
    """``coach.get_phase_outputs``: a session's phases, in order."""

    session_id: str = SessionId
    include_prompts: bool = Field(
        default=False, description="Add each phase's system prompt and user input."
    )


class PhaseOutputView(_Response):
    phase_id: str
    phase_name: str
    status: Literal["pending", "running", "completed", "failed"]
    output: str | None
    error: str | None
    system_prompt: str | None = Field(description="Only with include_prompts.")
    user_input: str | None = Field(description="Only with include_prompts.")
    created_at: datetime
    updated_at: datetime
    truncated: list[str] = Field(
        default_factory=list, description="Fields cut to fit the answer (`sessions show`)."
    )


class GetPhaseOutputsResponse(_Response):
    session_id: str
    phases: list[PhaseOutputView]


class GetSessionConversationRequest(_Request):
    """``coach.get_session_conversation``: a page of the conversation, oldest first,
    ending just before ``before`` (the newest page without it)."""

    session_id: str = SessionId
    phase_id: str | None = Field(default=None, max_length=64, description="One phase only.")
    include_steps: bool = Field(
        default=False, description="Interleave tool calls, tool outputs and handoffs."
    )
    limit: int = Field(default=50, ge=1, le=200, description="Entries at most.")
    before: int | None = Field(
        default=None, ge=0, description="The `before` of the previous answer (older page)."
    )


class ConversationEntry(_Response):
    """A message, or (with include_steps) a step between messages."""

    kind: Literal["message", "tool_call", "tool_output", "handoff"]
    role: Literal["user", "assistant", "system"] | None = None
    text: str | None = Field(
        default=None, description="A message's text, a call's JSON arguments, an output."
    )
    tool: str | None = Field(default=None, description="The tool of a call or an output.")
    is_error: bool | None = Field(default=None, description="A tool output that failed.")
    from_agent: str | None = None
    to_agent: str | None = None
    interrupted: bool = False
    phase_id: str | None = None
    message_id: int | None = None
    step: int | None = Field(default=None, description="Memory position (include_steps).")
    created_at: datetime | None = Field(default=None, description="Messages only.")
    truncated: bool = Field(default=False, description="The text was cut to fit the answer.")


class GetSessionConversationResponse(_Response):
    session_id: str
    entries: list[ConversationEntry]
    before: int | None = Field(description="Pass as `before` for the older page; null: no more.")


class ResumeSessionRequest(_Request):
    """``coach.resume_session``: continue a session in this conversation."""

    session_id: str = SessionId


class ResumeSessionResponse(_Response):
    session_id: str
    agent: Literal["coach", "strategist", "evaluator"]
    next_phase_id: str
    challenge: str | None


class BranchSessionRequest(_Request):
    """``coach.branch_session``: a new line of work from the end of a completed phase."""

    session_id: str = SessionId
    phase_id: str = Field(min_length=1, max_length=64, description="A completed phase's id.")


class BranchSessionResponse(_Response):
    session_id: str = Field(description="The new branch, now open in this conversation.")
    parent_session_id: str
    branched_from_phase: str
    agent: Literal["coach", "strategist", "evaluator"]
    next_phase_id: str


class DeleteSessionRequest(_Request):
    """``coach.delete_session``: erase one of the caller's sessions for good."""

    session_id: str = SessionId


class DeleteSessionResponse(_Response):
    session_id: str
    deleted: Literal[True] = True


class FocusRequest(_Request):
    """``coach.focus``: show one insight or idea (a view change only)."""

    item: str = Field(min_length=1, description="An insight or idea id from the board.")


class FocusResponse(_Response):
    ok: Literal[True] = True
    step: int | None = Field(description="The state step of the view change.")


class GetStateRequest(_Request):
    """``coach.get_state``: a fresh read of the board. The zones come on topic
    ``coach.state`` as a ``StateSnapshot``, queued behind the deltas already sent, so
    they are never a mix (and no answer has to fit the RPC limit)."""


class GetStateResponse(_Response):
    session_id: str | None = Field(description="The session the snapshot is of.")
    step: int = Field(description="The snapshot's step.")


class InterruptRequest(_Request):
    """``coach.interrupt``: stop what the agent is saying or generating now (a stop
    button). The reply is stored as interrupted, with only what was played."""


class InterruptResponse(_Response):
    interrupted: bool = Field(
        description="False: nothing was being said, or the reply cannot be interrupted."
    )


class Fact(_Response):
    """One thing the person agreed coach may remember."""

    id: str
    topic: str
    text: str


class GetProfileRequest(_Request):
    """``coach.get_profile``: what coach remembers about the caller (SPEC §4.6)."""


class GetProfileResponse(_Response):
    facts: list[Fact]


class ForgetRequest(_Request):
    """``coach.forget``: forget one remembered fact, or everything (``"all"``)."""

    fact_id: str = Field(min_length=1, max_length=64, description='A fact id, or "all".')


class ForgetResponse(_Response):
    facts: list[Fact] = Field(description="What is still remembered.")


class ExportMyDataRequest(_Request):
    """``coach.export_my_data``: everything stored about the caller (every session, as
    ``sessions export`` gives it, and what coach remembers), as one JSON document sent in
    chunks: call without ``cursor`` to start, then with each answer's ``next_cursor``."""

    cursor: str | None = Field(
        default=None, max_length=128, description="The previous answer's `next_cursor`."
    )


class ExportMyDataResponse(_Response):
    chunk: str = Field(description="The next part of the document's text.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next chunk; null: done.")
    index: int = Field(description="This chunk's place, from 0.")
    total_chunks: int


class ForgetMeRequest(_Request):
    """``coach.forget_me``: erase the caller, with every session and what coach remembers.
    Call without ``confirm_token`` to be told what would go and get a token, then with the
    token (within :data:`CONFIRM_SECONDS`) to erase."""

    confirm_token: str | None = Field(default=None, min_length=1, max_length=128)


class ForgetMeResponse(_Response):
    erased: bool = Field(description="False: nothing was erased yet; confirm with the token.")
    sessions: int = Field(description="The sessions that would be (or were) erased.")
    confirm_token: str | None = Field(description="The token to confirm with (null once erased).")
    expires_in: int | None = Field(description="Seconds the token is valid for.")


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
    except (ResumeError, StaleWrite) as exc:
        raise rtc.RpcError(409, clean_text(str(exc))) from None
    except StorageError:
        raise rtc.RpcError(503, "The database is unavailable; try again.") from None
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


def json_schema() -> dict[str, Any]:
    """One JSON Schema for every method's request and response (what ``web/src/rpc.ts``
    is generated from): ``CoachRpc`` maps each method name to its two types."""
    models = sorted(
        {m for entry in METHODS.values() for m in (entry.request, entry.response)},
        key=lambda m: m.__name__,
    )
    defs: dict[str, Any] = {}
    for model in models:
        mode: JsonSchemaMode = "validation" if issubclass(model, _Request) else "serialization"
        schema = model.model_json_schema(ref_template="#/$defs/{model}", mode=mode)
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
    streams: tuple[tuple[str, str, TypeAdapter[Any]], ...] = (
        ("StateMessage", "coach.state", TypeAdapter(StateMessage)),
        ("StepMessage", "coach.steps", TypeAdapter(StepMessage)),
    )
    for name, topic, adapter in streams:
        stream = adapter.json_schema(ref_template="#/$defs/{model}", mode="serialization")
        defs.update(stream.pop("$defs", {}))
        defs[name] = {
            "title": name,
            "description": f"A message on the text stream topic `{topic}`.",
            **stream,
        }
    for schema in defs.values():
        for field in schema.get("properties", {}).values():
            _untitled(field)
    defs["RpcErrorCode"] = {
        "title": "RpcErrorCode",
        "description": "The code of an RpcError: "
        + "; ".join(f"{code} {meaning}" for code, meaning in ERRORS.items())
        + ".",
        "enum": sorted(ERRORS),
    }
    methods = {
        name: {
            "type": "object",
            "properties": {
                "request": {"$ref": f"#/$defs/{entry.request.__name__}"},
                "response": {"$ref": f"#/$defs/{entry.response.__name__}"},
            },
            "required": ["request", "response"],
            "additionalProperties": False,
        }
        for name, entry in sorted(METHODS.items())
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "CoachRpc",
        "description": "The RPC methods of the coach agent participant (generated).",
        "type": "object",
        "properties": methods,
        "required": sorted(methods),
        "additionalProperties": False,
        "$defs": defs,
    }


def _untitled(schema: dict[str, Any]) -> None:
    """Drop pydantic's per-field titles: TypeScript then inlines each field's type
    instead of naming an alias after it (``SessionId1``, ``SessionId2``, ...)."""
    schema.pop("title", None)
    for part in schema.get("anyOf", []):
        _untitled(part)
    if isinstance(schema.get("items"), dict):
        _untitled(schema["items"])


# --- the methods ----------------------------------------------------------------------


async def _user_id(call: Call) -> str:
    """The caller's user id (``SessionNotFound`` for a caller without one yet)."""
    userdata = call.userdata
    if userdata.user_id is not None:
        return userdata.user_id
    user = await userdata.store.find_user(call.caller)
    if user is None:
        raise SessionNotFound("-")
    return user.id


async def _owned(call: Call, session_id: str) -> SessionRecord:
    """The caller's session ``session_id``; unknown, malformed and foreign ids alike are
    ``SessionNotFound``."""
    user_id = await _user_id(call)
    if not _SESSION_ID.fullmatch(session_id):
        raise SessionNotFound(session_id)
    found = await call.userdata.store.get_session(session_id, user_id=user_id)
    if found is None:
        raise SessionNotFound(session_id)
    return found


@method("coach.list_sessions", ListSessionsRequest, ListSessionsResponse)
async def list_sessions(call: Call, request: ListSessionsRequest) -> ListSessionsResponse:
    try:
        user_id = await _user_id(call)
    except SessionNotFound:
        return ListSessionsResponse(sessions=[], more=False)
    # One more than asked: whether there are more is known without reading them all.
    found = await call.userdata.store.get_user_sessions(user_id, limit=request.limit + 1)
    total = len(call.userdata.prompts.manifest.ids)
    summaries = [
        SessionSummary(
            id=s.id,
            challenge=s.design_challenge,
            status=s.status,
            created_at=s.created_at,
            updated_at=s.updated_at,
            phases_done=s.completed_phases,
            phases_total=total,
            current_agent=s.current_agent,
            current_phase_id=s.current_phase_id,
            parent_session_id=s.parent_session_id,
            branched_from_phase=s.branched_from_phase,
        )
        for s in found[: request.limit]
    ]
    room = MAX_RESPONSE_BYTES - _size(ListSessionsResponse(sessions=[], more=True))
    kept = _fitting(summaries, room)
    more = len(found) > kept
    return ListSessionsResponse(sessions=summaries[:kept], more=more)


@method("coach.get_phase_outputs", GetPhaseOutputsRequest, GetPhaseOutputsResponse)
async def get_phase_outputs(call: Call, request: GetPhaseOutputsRequest) -> GetPhaseOutputsResponse:
    await _owned(call, request.session_id)
    outputs = await call.userdata.store.get_phase_outputs(
        request.session_id, include_prompts=request.include_prompts
    )
    phases = [PhaseOutputView.model_validate(o, from_attributes=True) for o in outputs]
    answer = GetPhaseOutputsResponse(session_id=request.session_id, phases=phases)
    while _size(answer) > MAX_RESPONSE_BYTES:
        answer = answer.model_copy(update={"phases": _cut_longest(answer.phases)})
    return answer


_CUTTABLE: Final = ("system_prompt", "user_input", "output", "error")


def _cut_longest(phases: list[PhaseOutputView]) -> list[PhaseOutputView]:
    """Halve the longest text of all phases, naming the field as truncated."""
    index, field = max(
        ((i, f) for i, p in enumerate(phases) for f in _CUTTABLE if getattr(p, f)),
        key=lambda at: len(getattr(phases[at[0]], at[1])),
    )
    phase = phases[index]
    text: str = getattr(phase, field)
    truncated = phase.truncated if field in phase.truncated else [*phase.truncated, field]
    cut = phase.model_copy(update={field: text[: len(text) // 2], "truncated": truncated})
    return [*phases[:index], cut, *phases[index + 1 :]]


@method(
    "coach.get_session_conversation", GetSessionConversationRequest, GetSessionConversationResponse
)
async def get_session_conversation(
    call: Call, request: GetSessionConversationRequest
) -> GetSessionConversationResponse:
    await _owned(call, request.session_id)
    if request.include_steps:
        entries, before = await _step_entries(call, request)
    else:
        entries, before = await _message_entries(call, request)
    room = MAX_RESPONSE_BYTES - _size(_page(request, [], _LONGEST_CURSOR))
    kept = _fitting(entries[::-1], room)  # the newest; the rest go to the older page,
    if kept < len(entries):  # which ends before the oldest kept
        entries = entries[-kept:]
        before = entries[0].step if request.include_steps else entries[0].message_id
    if entries and _size(_page(request, entries, before)) > MAX_RESPONSE_BYTES:
        (only,) = entries
        budget = MAX_RESPONSE_BYTES - _size(_page(request, [], before)) - 1_000
        text = (only.text or "").encode("utf-8")[:budget].decode("utf-8", "ignore")
        entries = [only.model_copy(update={"text": text, "truncated": True})]
    return _page(request, entries, before)


def _page(
    request: GetSessionConversationRequest, entries: list[ConversationEntry], before: int | None
) -> GetSessionConversationResponse:
    return GetSessionConversationResponse(
        session_id=request.session_id, entries=entries, before=before
    )


async def _message_entries(
    call: Call, request: GetSessionConversationRequest
) -> tuple[list[ConversationEntry], int | None]:
    page = await call.userdata.store.get_session_conversation(
        request.session_id,
        phase_id=request.phase_id,
        before_id=request.before,
        from_end=True,
        limit=request.limit + 1,  # one more: is there an older page?
    )
    older = len(page) > request.limit
    page = page[1:] if older else page
    entries = [_message_entry(m) for m in page]
    return entries, (page[0].id if older and page else None)


def _message_entry(message: MessageRecord) -> ConversationEntry:
    return ConversationEntry(
        kind="message",
        role=message.role,
        text=message.content,
        interrupted=message.interrupted,
        phase_id=message.phase_id,
        message_id=message.id,
        created_at=message.created_at,
    )


async def _step_entries(
    call: Call, request: GetSessionConversationRequest
) -> tuple[list[ConversationEntry], int | None]:
    page = await call.userdata.store.get_step_page(
        request.session_id, before=request.before, limit=request.limit
    )
    entries = []
    for offset, step in enumerate(page.steps):
        phase = page.phase_ids[offset]
        if request.phase_id is not None and phase != request.phase_id:
            continue
        entry = _step_entry(step)
        if entry is not None:
            update = {"step": page.first + offset, "phase_id": phase}
            update["message_id"] = page.message_ids[offset]
            entries.append(entry.model_copy(update=update))
    return entries, (page.first if page.first > 0 and page.steps else None)


def _step_entry(step: object) -> ConversationEntry | None:
    """One memory step as an entry (``None`` for steps a reader never sees)."""
    if isinstance(step, llm.ChatMessage):
        if step.role not in ("user", "assistant"):
            return None  # system and developer prompts are in the phase outputs
        return ConversationEntry(
            kind="message",
            role=step.role,
            text=step.text_content or "",
            interrupted=step.interrupted,
        )
    if isinstance(step, llm.FunctionCall):
        return ConversationEntry(kind="tool_call", tool=step.name, text=step.arguments)
    if isinstance(step, llm.FunctionCallOutput):
        return ConversationEntry(
            kind="tool_output", tool=step.name, text=step.output, is_error=step.is_error
        )
    if isinstance(step, llm.AgentHandoff) and step.old_agent_id is not None:
        return ConversationEntry(
            kind="handoff", from_agent=step.old_agent_id, to_agent=step.new_agent_id
        )
    return None


@method("coach.resume_session", ResumeSessionRequest, ResumeSessionResponse)
async def resume_session(call: Call, request: ResumeSessionRequest) -> ResumeSessionResponse:
    """The tools' select + load in one call: the session is loaded into the live
    conversation and handed to the agent that continues it, which greets with its recap."""
    userdata, session = call.userdata, call.session
    found = await _owned(call, request.session_id)
    if session is None:
        raise rtc.RpcError(409, "No live conversation to resume into.")
    if userdata.session_id == found.id:
        raise rtc.RpcError(409, "This session is already open.")
    userdata.user_id = found.user_id
    try:
        result = await userdata.load_state(found.id)
    except TimeoutError:
        raise rtc.RpcError(503, "Saving is still catching up; try again in a moment.") from None
    agent = resumed_agent(userdata, result, current=session.current_agent.chat_ctx)
    session.update_agent(agent)
    return ResumeSessionResponse(
        session_id=found.id,
        agent=agent.kind,
        next_phase_id=result.next_phase_id,
        challenge=result.session.design_challenge,
    )


@method("coach.branch_session", BranchSessionRequest, BranchSessionResponse)
async def branch_session(call: Call, request: BranchSessionRequest) -> BranchSessionResponse:
    """Branch one of the caller's sessions (as the ``branch_session`` tool does) and
    continue the branch in the live conversation with the agent of its next phase."""
    userdata, session = call.userdata, call.session
    found = await _owned(call, request.session_id)
    if session is None:
        raise rtc.RpcError(409, "No live conversation to branch into.")
    userdata.user_id = found.user_id
    try:
        result = await userdata.branch(found.id, request.phase_id)
    except BranchRefused as exc:
        raise rtc.RpcError(409, clean_text(str(exc))) from None
    except TimeoutError:
        raise rtc.RpcError(503, "Saving is still catching up; try again in a moment.") from None
    agent = resumed_agent(userdata, result, current=session.current_agent.chat_ctx)
    session.update_agent(agent)
    return BranchSessionResponse(
        session_id=result.session.id,
        parent_session_id=found.id,
        branched_from_phase=request.phase_id,
        agent=agent.kind,
        next_phase_id=result.next_phase_id,
    )


@method("coach.delete_session", DeleteSessionRequest, DeleteSessionResponse)
async def delete_session(call: Call, request: DeleteSessionRequest) -> DeleteSessionResponse:
    """Erase one of the caller's sessions and everything stored of it (not the open one:
    this conversation is still writing it)."""
    found = await _owned(call, request.session_id)
    if call.userdata.session_id == found.id:
        raise rtc.RpcError(
            409, "This session is open in this conversation; it cannot be erased now."
        )
    userdata = call.userdata
    open_id = userdata.session_id
    if open_id is not None:
        # The erase rewrites what the open session copied of the erased one (its zones
        # move on a step): store what is queued first, then follow the rewritten state,
        # so this conversation's next board change is not refused as stale.
        await userdata.recorder.flush()
    await userdata.store.delete_session(found.id)
    if open_id is not None and userdata.session_id == open_id:
        userdata.state.attach(open_id, await userdata.store.get_state(open_id))
    return DeleteSessionResponse(session_id=found.id)


@method("coach.interrupt", InterruptRequest, InterruptResponse)
async def interrupt(call: Call, request: InterruptRequest) -> InterruptResponse:
    """Interrupt the agent's reply, as the person talking over it would."""
    session = call.session
    if session is None:
        raise rtc.RpcError(409, "No live conversation to interrupt.")
    speaking = session.agent_state in ("thinking", "speaking")
    try:
        await session.interrupt()
    except RuntimeError:  # not running, or a reply that disallows interruptions
        return InterruptResponse(interrupted=False)
    return InterruptResponse(interrupted=speaking)


@method("coach.get_state", GetStateRequest, GetStateResponse)
async def get_state(call: Call, request: GetStateRequest) -> GetStateResponse:
    """Send a snapshot of the three zones on the state stream."""
    state = call.userdata.state
    state.publish_snapshot()
    return GetStateResponse(session_id=state.session_id, step=state.step)


async def _known(call: Call) -> UserData:
    """The conversation's user data, with the caller's person record as stored."""
    userdata = call.userdata
    if userdata.user_id is None:
        raise rtc.RpcError(409, "This conversation has not identified you yet.")
    await userdata.load_person()
    return userdata


def _facts(userdata: UserData) -> list[Fact]:
    return [Fact.model_validate(f) for f in userdata.person.get("facts") or []]


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


@method("coach.focus", FocusRequest, FocusResponse)
async def focus_item(call: Call, request: FocusRequest) -> FocusResponse:
    """Focus an insight or idea: a view delta only, triggered by the user."""
    state = call.userdata.state
    if state.session_id is None:
        raise rtc.RpcError(409, "No design session is active yet.")
    item = clean_text(request.item)  # echoed in errors and stored: valid UTF-8 only
    try:
        view, change = focus(state.view, state.data, item)
    except DesignError as exc:
        raise rtc.RpcError(404, str(exc)) from None
    except InvalidWrite as exc:
        raise rtc.RpcError(400, str(exc)) from None
    delta = state.write(
        Zone.VIEW,
        view,
        change,
        Action(type="focus", params={"item": item}),
        trigger="user_action",
        source="user",
        actor_id=call.caller,
        turn_id=action_id(),
    )
    return FocusResponse(step=delta.step if delta else None)


async def _me(call: Call) -> UserRecord:
    """The caller's user record (404 when nothing is stored about them)."""
    user = await call.userdata.store.find_user(call.caller)
    if user is None:
        raise rtc.RpcError(404, "Nothing is stored about you.")
    return user


@method("coach.export_my_data", ExportMyDataRequest, ExportMyDataResponse)
async def export_my_data(call: Call, request: ExportMyDataRequest) -> ExportMyDataResponse:
    """The caller's export, one chunk per call. The first call reads the whole document
    (``sessions export --user``) and keeps its chunks in this job's memory, so every
    chunk is of the same read; a new first call replaces it."""
    userdata = call.userdata
    if request.cursor is None:
        user = await _me(call)
        if userdata.session_id is not None:
            await userdata.recorder.flush()  # what was said so far is in it
        text = StringIO()
        await export_person(userdata.store, user, text)
        userdata.export = (secrets.token_urlsafe(12), _chunks(text.getvalue()))
        index = 0
    else:
        index = _cursor_index(userdata, request.cursor)
    assert userdata.export is not None
    export_id, chunks = userdata.export
    last = index + 1 == len(chunks)
    return ExportMyDataResponse(
        chunk=chunks[index],
        next_cursor=None if last else f"{export_id}.{index + 1}",
        index=index,
        total_chunks=len(chunks),
    )


def _cursor_index(userdata: UserData, cursor: str) -> int:
    export_id, _, index = cursor.rpartition(".")
    if (
        userdata.export is None
        or not secrets.compare_digest(export_id, userdata.export[0])
        or not (index.isascii() and index.isdigit())
        or not 0 < int(index) < len(userdata.export[1])
    ):
        raise rtc.RpcError(404, "No such export chunk; start the export again without a cursor.")
    return int(index)


def _chunks(text: str) -> tuple[str, ...]:
    """``text`` cut into parts each of which fits an answer (escaped as a JSON string)."""
    envelope = ExportMyDataResponse(
        chunk="", next_cursor="x" * 40, index=_LONGEST_CURSOR, total_chunks=_LONGEST_CURSOR
    )
    room = MAX_RESPONSE_BYTES - _size(envelope)
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
    user = await _me(call)
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
    if call.session is not None:
        await call.session.aclose()  # the conversation ends: nothing more is said or stored
    await userdata.recorder.flush()  # what was queued lands, and goes with the rest
    erased = await userdata.store.delete_user(user.identity)
    userdata.clear_person()
    return ForgetMeResponse(erased=True, sessions=erased or 0, confirm_token=None, expires_in=None)


def _size(model: BaseModel) -> int:
    return len(model.model_dump_json().encode("utf-8"))


_LONGEST_CURSOR: Final = 2**63 - 1
"""The widest ``before`` an answer can carry: its envelope is sized with it."""


def _fitting(items: Sequence[BaseModel], room: int) -> int:
    """How many of ``items``, from the first, fit in ``room`` bytes as a JSON list's
    elements (each serialized once); at least one — a lone item too large is cut."""
    used = 0
    for count, item in enumerate(items):
        used += _size(item) + (1 if count else 0)  # the comma before it
        if used > room and count:
            return count
    return len(items)


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


if __name__ == "__main__":  # `make rpc-types`: the schema web/src/rpc.ts is generated from
    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
