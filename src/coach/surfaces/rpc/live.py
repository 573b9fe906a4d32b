"""The live conversation: resume, branch, delete, interrupt, the board's fresh read and focus."""

from __future__ import annotations

from livekit import rtc
from livekit.agents import AgentSession, llm

from ...agents.coach import LISTED
from ...agents.restore import BranchPoint, Resumed, resume_into
from ...conversation.live_state import action_id
from ...conversation.userdata import UserData
from ...errors import InvalidWrite
from ...state.design import DesignError
from ...state.view import focus, new_view
from ...state.zones import Action, Zone
from ...store import SessionRecord, clean_text
from .contract import (
    BranchSessionRequest,
    BranchSessionResponse,
    DeleteSessionRequest,
    DeleteSessionResponse,
    FocusRequest,
    FocusResponse,
    GetStateRequest,
    GetStateResponse,
    InterruptRequest,
    InterruptResponse,
    ResumeSessionRequest,
    ResumeSessionResponse,
)
from .registry import Call, caller_record, method, owned_session


@method("coach.resume_session", ResumeSessionRequest, ResumeSessionResponse)
async def resume_session(call: Call, request: ResumeSessionRequest) -> ResumeSessionResponse:
    """The tools' select + load in one call: the session is loaded into the live
    conversation and handed to the agent that continues it, which greets with its recap."""
    found = await owned_session(call, request.session_id)
    session = _live(call, "resume")
    if call.userdata.session_id == found.id:
        raise rtc.RpcError(409, "This session is already open.")
    agent, result = await _hand_over(call, session, found, current=session.current_agent.chat_ctx)
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
    found = await owned_session(call, request.session_id)
    session = _live(call, "branch")
    # This visit's talk carries on in the branch, unless it is the branched session's own
    # (then it is the source's, after the branch point).
    current = session.current_agent.chat_ctx
    if found.id == call.userdata.session_id:
        current = llm.ChatContext.empty()
    point = BranchPoint(request.phase_id, request.after_message_id)
    agent, result = await _hand_over(call, session, found, current=current, branch=point)
    return BranchSessionResponse(
        session_id=result.session.id,
        parent_session_id=found.id,
        branched_from_phase=result.session.branched_from_phase or "",
        after_message_id=request.after_message_id,
        agent=agent.kind,
        next_phase_id=result.next_phase_id,
    )


def _live(call: Call, action: str) -> AgentSession[UserData]:
    """The live conversation ``action`` (resume, branch) continues in; 409 without one."""
    if call.session is None:
        raise rtc.RpcError(409, f"No live conversation to {action} into.")
    return call.session


async def _hand_over(
    call: Call,
    session: AgentSession[UserData],
    found: SessionRecord,
    *,
    current: llm.ChatContext,
    branch: BranchPoint | None = None,
) -> Resumed:
    """Load the caller's session ``found`` (or branch it) and swap the live conversation's
    agent for the one that continues it. A caller not identified yet (the lookup at the
    greeting failed) is identified first: the agent that takes over knows their name and
    what they agreed coach may remember."""
    if call.userdata.user_id != found.user_id:
        await call.userdata.identify(await caller_record(call), listed=LISTED)
    resumed = await resume_into(call.userdata, found.id, current=current, branch=branch)
    session.update_agent(resumed.agent)
    return resumed


@method("coach.delete_session", DeleteSessionRequest, DeleteSessionResponse)
async def delete_session(call: Call, request: DeleteSessionRequest) -> DeleteSessionResponse:
    """Erase one of the caller's sessions and everything stored of it (not the open one:
    this conversation is still writing it)."""
    found = await owned_session(call, request.session_id)
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
        await userdata.catch_up()
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


@method("coach.focus", FocusRequest, FocusResponse)
async def focus_item(call: Call, request: FocusRequest) -> FocusResponse:
    """Focus an insight or idea: a view delta only, triggered by the user."""
    state = call.userdata.state
    if state.session_id is None:
        raise rtc.RpcError(409, "No design session is active yet.")
    item = clean_text(request.item)  # echoed in errors and stored: valid UTF-8 only
    # No agent has shown the board yet: the view starts where the conversation is.
    shown = state.view or new_view(call.userdata.current_agent, call.userdata.current_phase_id)
    try:
        view, change = focus(shown, state.data, item)
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
