"""The RPC contract: its limits, its error codes, and every method's request and response
models (what ``web/src/rpc.ts`` is generated from)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...state.shapes import Fact

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
SESSION_ID: Final = re.compile(r"[0-9a-f]{32}")


# --- the contract: request and response models ------------------------------------------


class RpcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RpcResponse(BaseModel):
    # Every field is always sent: the schema (and TypeScript) says so, defaults included.
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


SessionId = Field(min_length=1, max_length=64, description="A session id (32 hex digits).")


class ListSessionsRequest(RpcRequest):
    """``coach.list_sessions``: the caller's sessions, newest first (a branch names its
    parent, so a client can draw the tree)."""

    limit: int = Field(default=20, ge=1, le=100, description="Sessions at most.")


class SessionSummary(RpcResponse):
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


class ListSessionsResponse(RpcResponse):
    sessions: list[SessionSummary]
    more: bool = Field(description="Older sessions were left out (by `limit`, or to fit).")


class GetPhaseOutputsRequest(RpcRequest):
    """``coach.get_phase_outputs``: a session's phases, in order."""

    session_id: str = SessionId
    include_prompts: bool = Field(
        default=False, description="Add each phase's system prompt and user input."
    )


class PhaseOutputView(RpcResponse):
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


class GetPhaseOutputsResponse(RpcResponse):
    session_id: str
    phases: list[PhaseOutputView]


class GetSessionConversationRequest(RpcRequest):
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


class ConversationEntry(RpcResponse):
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


class GetSessionConversationResponse(RpcResponse):
    session_id: str
    entries: list[ConversationEntry]
    before: int | None = Field(description="Pass as `before` for the older page; null: no more.")


class ResumeSessionRequest(RpcRequest):
    """``coach.resume_session``: continue a session in this conversation."""

    session_id: str = SessionId


class ResumeSessionResponse(RpcResponse):
    session_id: str
    agent: Literal["coach", "strategist", "evaluator"]
    next_phase_id: str
    challenge: str | None


class BranchSessionRequest(RpcRequest):
    """``coach.branch_session``: a new line of work from the end of a completed phase,
    or from after any turn (give exactly one of ``phase_id`` and ``after_message_id``)."""

    session_id: str = SessionId
    phase_id: str | None = Field(
        default=None, min_length=1, max_length=64, description="A completed phase's id."
    )
    after_message_id: int | None = Field(
        default=None,
        ge=1,
        description="A message of the session (its id in the history): the branch holds "
        "the session as it was after that message's turn.",
    )

    @model_validator(mode="after")
    def _one_point(self) -> BranchSessionRequest:
        if (self.phase_id is None) == (self.after_message_id is None):
            raise ValueError("give either phase_id or after_message_id")
        return self


class BranchSessionResponse(RpcResponse):
    session_id: str = Field(description="The new branch, now open in this conversation.")
    parent_session_id: str
    branched_from_phase: str = Field(
        description="The phase it starts after (from a turn: the last one completed then, "
        "or 'message N' before any)."
    )
    after_message_id: int | None = Field(
        default=None, description="The message whose turn it starts after, if any."
    )
    agent: Literal["coach", "strategist", "evaluator"]
    next_phase_id: str


class DeleteSessionRequest(RpcRequest):
    """``coach.delete_session``: erase one of the caller's sessions for good."""

    session_id: str = SessionId


class DeleteSessionResponse(RpcResponse):
    session_id: str
    deleted: Literal[True] = True


class FocusRequest(RpcRequest):
    """``coach.focus``: show one insight or idea (a view change only)."""

    item: str = Field(min_length=1, description="An insight or idea id from the board.")


class FocusResponse(RpcResponse):
    ok: Literal[True] = True
    step: int | None = Field(description="The state step of the view change.")


class GetStateRequest(RpcRequest):
    """``coach.get_state``: a fresh read of the board. The zones come on topic
    ``coach.state`` as a ``StateSnapshot``, queued behind the deltas already sent, so
    they are never a mix (and no answer has to fit the RPC limit)."""


class GetStateResponse(RpcResponse):
    session_id: str | None = Field(description="The session the snapshot is of.")
    step: int = Field(description="The snapshot's step.")


class InterruptRequest(RpcRequest):
    """``coach.interrupt``: stop what the agent is saying or generating now (a stop
    button). The reply is stored as interrupted, with only what was played."""


class InterruptResponse(RpcResponse):
    interrupted: bool = Field(
        description="False: nothing was being said, or the reply cannot be interrupted."
    )


class GetProfileRequest(RpcRequest):
    """``coach.get_profile``: what coach remembers about the caller (SPEC §4.6)."""


class GetProfileResponse(RpcResponse):
    facts: list[Fact]


class ForgetRequest(RpcRequest):
    """``coach.forget``: forget one remembered fact, or everything (``"all"``)."""

    fact_id: str = Field(min_length=1, max_length=64, description='A fact id, or "all".')


class ForgetResponse(RpcResponse):
    facts: list[Fact] = Field(description="What is still remembered.")


class ExportMyDataRequest(RpcRequest):
    """``coach.export_my_data``: everything stored about the caller (every session, as
    ``sessions export`` gives it, and what coach remembers), as one JSON document sent in
    chunks: call without ``cursor`` to start, then with each answer's ``next_cursor``."""

    cursor: str | None = Field(
        default=None, max_length=128, description="The previous answer's `next_cursor`."
    )


class ExportMyDataResponse(RpcResponse):
    chunk: str = Field(description="The next part of the document's text.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next chunk; null: done.")
    index: int = Field(description="This chunk's place, from 0.")
    total_chunks: int


class ForgetMeRequest(RpcRequest):
    """``coach.forget_me``: erase the caller, with every session and what coach remembers.
    Call without ``confirm_token`` to be told what would go and get a token, then with the
    token (within :data:`CONFIRM_SECONDS`) to erase."""

    confirm_token: str | None = Field(default=None, min_length=1, max_length=128)


class ForgetMeResponse(RpcResponse):
    erased: bool = Field(description="False: nothing was erased yet; confirm with the token.")
    sessions: int = Field(description="The sessions that would be (or were) erased.")
    confirm_token: str | None = Field(description="The token to confirm with (null once erased).")
    expires_in: int | None = Field(description="Seconds the token is valid for.")
