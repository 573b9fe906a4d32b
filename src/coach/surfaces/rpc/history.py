"""Reading the caller's stored work: sessions, phase outputs, the conversation."""

from __future__ import annotations

from typing import Final

from livekit.agents import llm

from ...errors import (
    SessionNotFound,
)
from ...store import MessageRecord
from .contract import (
    MAX_RESPONSE_BYTES,
    ConversationEntry,
    GetPhaseOutputsRequest,
    GetPhaseOutputsResponse,
    GetSessionConversationRequest,
    GetSessionConversationResponse,
    ListSessionsRequest,
    ListSessionsResponse,
    PhaseOutputView,
    SessionSummary,
)
from .registry import (
    LONGEST_CURSOR,
    Call,
    caller_user_id,
    fitting,
    json_size,
    method,
    owned_session,
)


@method("coach.list_sessions", ListSessionsRequest, ListSessionsResponse)
async def list_sessions(call: Call, request: ListSessionsRequest) -> ListSessionsResponse:
    try:
        user_id = await caller_user_id(call)
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
    room = MAX_RESPONSE_BYTES - json_size(ListSessionsResponse(sessions=[], more=True))
    kept = fitting(summaries, room)
    more = len(found) > kept
    return ListSessionsResponse(sessions=summaries[:kept], more=more)


@method("coach.get_phase_outputs", GetPhaseOutputsRequest, GetPhaseOutputsResponse)
async def get_phase_outputs(call: Call, request: GetPhaseOutputsRequest) -> GetPhaseOutputsResponse:
    await owned_session(call, request.session_id)
    outputs = await call.userdata.store.get_phase_outputs(
        request.session_id, include_prompts=request.include_prompts
    )
    phases = [PhaseOutputView.model_validate(o, from_attributes=True) for o in outputs]
    answer = GetPhaseOutputsResponse(session_id=request.session_id, phases=phases)
    while json_size(answer) > MAX_RESPONSE_BYTES:
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
    await owned_session(call, request.session_id)
    if request.include_steps:
        entries, before = await _step_entries(call, request)
    else:
        entries, before = await _message_entries(call, request)
    room = MAX_RESPONSE_BYTES - json_size(_page(request, [], LONGEST_CURSOR))
    kept = fitting(entries[::-1], room)  # the newest; the rest go to the older page,
    if kept < len(entries):  # which ends before the oldest kept
        entries = entries[-kept:]
        before = entries[0].step if request.include_steps else entries[0].message_id
    if entries and json_size(_page(request, entries, before)) > MAX_RESPONSE_BYTES:
        (only,) = entries
        budget = MAX_RESPONSE_BYTES - json_size(_page(request, [], before)) - 1_000
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
