/* Generated from src/coach/surfaces/rpc/ by make rpc-types: do not edit. */

/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "JsonValue".
 */
export type JsonValue = unknown;
/**
 * A message on the text stream topic `coach.state`.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "StateMessage".
 */
export type StateMessage = StateDelta | StateSnapshot;
/**
 * A message on the text stream topic `coach.steps`.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "StepMessage".
 */
export type StepMessage = ToolStep | HandoffStep;
/**
 * The code of an RpcError: 400 the payload is not JSON or does not match the method's request type; 403 the caller is not the session's owner (the participant this agent serves); 404 no such session of this user (unknown, malformed, foreign ids alike), or no such item; 409 the request conflicts with the session's state (e.g. resuming a completed session); 413 the payload is larger than 4096 bytes; 503 the database is unavailable; try again.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "RpcErrorCode".
 */
export type RpcErrorCode = 400 | 403 | 404 | 409 | 413 | 503;

/**
 * The RPC methods of the coach agent participant (generated).
 */
export interface CoachRpc {
  "coach.branch_session": {
    request: BranchSessionRequest;
    response: BranchSessionResponse;
  };
  "coach.delete_session": {
    request: DeleteSessionRequest;
    response: DeleteSessionResponse;
  };
  "coach.export_my_data": {
    request: ExportMyDataRequest;
    response: ExportMyDataResponse;
  };
  "coach.focus": {
    request: FocusRequest;
    response: FocusResponse;
  };
  "coach.forget": {
    request: ForgetRequest;
    response: ForgetResponse;
  };
  "coach.forget_me": {
    request: ForgetMeRequest;
    response: ForgetMeResponse;
  };
  "coach.get_phase_outputs": {
    request: GetPhaseOutputsRequest;
    response: GetPhaseOutputsResponse;
  };
  "coach.get_profile": {
    request: GetProfileRequest;
    response: GetProfileResponse;
  };
  "coach.get_session_conversation": {
    request: GetSessionConversationRequest;
    response: GetSessionConversationResponse;
  };
  "coach.get_state": {
    request: GetStateRequest;
    response: GetStateResponse;
  };
  "coach.interrupt": {
    request: InterruptRequest;
    response: InterruptResponse;
  };
  "coach.list_sessions": {
    request: ListSessionsRequest;
    response: ListSessionsResponse;
  };
  "coach.resume_session": {
    request: ResumeSessionRequest;
    response: ResumeSessionResponse;
  };
}
/**
 * ``coach.branch_session``: a new line of work from the end of a completed phase,
 * or from after any turn (give exactly one of ``phase_id`` and ``after_message_id``).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "BranchSessionRequest".
 */
export interface BranchSessionRequest {
  /**
   * A session id (32 hex digits).
   */
  session_id: string;
  /**
   * A completed phase's id.
   */
  phase_id?: string | null;
  /**
   * A message of the session (its id in the history): the branch holds the session as it was after that message's turn.
   */
  after_message_id?: number | null;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "BranchSessionResponse".
 */
export interface BranchSessionResponse {
  /**
   * The new branch, now open in this conversation.
   */
  session_id: string;
  parent_session_id: string;
  /**
   * The phase it starts after (from a turn: the last one completed then, or 'message N' before any).
   */
  branched_from_phase: string;
  /**
   * The message whose turn it starts after, if any.
   */
  after_message_id: number | null;
  agent: "coach" | "strategist" | "evaluator";
  next_phase_id: string;
}
/**
 * ``coach.delete_session``: erase one of the caller's sessions for good.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "DeleteSessionRequest".
 */
export interface DeleteSessionRequest {
  /**
   * A session id (32 hex digits).
   */
  session_id: string;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "DeleteSessionResponse".
 */
export interface DeleteSessionResponse {
  session_id: string;
  deleted: true;
}
/**
 * ``coach.export_my_data``: everything stored about the caller (every session, as
 * ``sessions export`` gives it, and what coach remembers), as one JSON document sent in
 * chunks: call without ``cursor`` to start, then with each answer's ``next_cursor``.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ExportMyDataRequest".
 */
export interface ExportMyDataRequest {
  /**
   * The previous answer's `next_cursor`.
   */
  cursor?: string | null;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ExportMyDataResponse".
 */
export interface ExportMyDataResponse {
  /**
   * The next part of the document's text.
   */
  chunk: string;
  /**
   * Pass as `cursor` for the next chunk; null: done.
   */
  next_cursor: string | null;
  /**
   * This chunk's place, from 0.
   */
  index: number;
  total_chunks: number;
}
/**
 * ``coach.focus``: show one insight or idea (a view change only).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "FocusRequest".
 */
export interface FocusRequest {
  /**
   * An insight or idea id from the board.
   */
  item: string;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "FocusResponse".
 */
export interface FocusResponse {
  ok: true;
  /**
   * The state step of the view change.
   */
  step: number | null;
}
/**
 * ``coach.forget``: forget one remembered fact, or everything (``"all"``).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ForgetRequest".
 */
export interface ForgetRequest {
  /**
   * A fact id, or "all".
   */
  fact_id: string;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ForgetResponse".
 */
export interface ForgetResponse {
  /**
   * What is still remembered.
   */
  facts: Fact[];
}
/**
 * One thing the person agreed coach may remember.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Fact".
 */
export interface Fact {
  id: string;
  topic: string;
  text: string;
}
/**
 * ``coach.forget_me``: erase the caller, with every session and what coach remembers.
 * Call without ``confirm_token`` to be told what would go and get a token, then with the
 * token (within :data:`CONFIRM_SECONDS`) to erase.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ForgetMeRequest".
 */
export interface ForgetMeRequest {
  confirm_token?: string | null;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ForgetMeResponse".
 */
export interface ForgetMeResponse {
  /**
   * False: nothing was erased yet; confirm with the token.
   */
  erased: boolean;
  /**
   * The sessions that would be (or were) erased.
   */
  sessions: number;
  /**
   * The token to confirm with (null once erased).
   */
  confirm_token: string | null;
  /**
   * Seconds the token is valid for.
   */
  expires_in: number | null;
}
/**
 * ``coach.get_phase_outputs``: a session's phases, in order.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetPhaseOutputsRequest".
 */
export interface GetPhaseOutputsRequest {
  /**
   * A session id (32 hex digits).
   */
  session_id: string;
  /**
   * Add each phase's system prompt and user input.
   */
  include_prompts?: boolean;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetPhaseOutputsResponse".
 */
export interface GetPhaseOutputsResponse {
  session_id: string;
  phases: PhaseOutputView[];
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "PhaseOutputView".
 */
export interface PhaseOutputView {
  phase_id: string;
  phase_name: string;
  status: "pending" | "running" | "completed" | "failed";
  output: string | null;
  error: string | null;
  /**
   * Only with include_prompts.
   */
  system_prompt: string | null;
  /**
   * Only with include_prompts.
   */
  user_input: string | null;
  created_at: string;
  updated_at: string;
  /**
   * Fields cut to fit the answer (`sessions show`).
   */
  truncated: string[];
}
/**
 * ``coach.get_profile``: what coach remembers about the caller (SPEC §4.6).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetProfileRequest".
 */
export interface GetProfileRequest {}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetProfileResponse".
 */
export interface GetProfileResponse {
  facts: Fact[];
}
/**
 * ``coach.get_session_conversation``: a page of the conversation, oldest first,
 * ending just before ``before`` (the newest page without it).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetSessionConversationRequest".
 */
export interface GetSessionConversationRequest {
  /**
   * A session id (32 hex digits).
   */
  session_id: string;
  /**
   * One phase only.
   */
  phase_id?: string | null;
  /**
   * Interleave tool calls, tool outputs and handoffs.
   */
  include_steps?: boolean;
  /**
   * Entries at most.
   */
  limit?: number;
  /**
   * The `before` of the previous answer (older page).
   */
  before?: number | null;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetSessionConversationResponse".
 */
export interface GetSessionConversationResponse {
  session_id: string;
  entries: ConversationEntry[];
  /**
   * Pass as `before` for the older page; null: no more.
   */
  before: number | null;
}
/**
 * A message, or (with include_steps) a step between messages.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ConversationEntry".
 */
export interface ConversationEntry {
  kind: "message" | "tool_call" | "tool_output" | "handoff";
  role: ("user" | "assistant" | "system") | null;
  /**
   * A message's text, a call's JSON arguments, an output.
   */
  text: string | null;
  /**
   * The tool of a call or an output.
   */
  tool: string | null;
  /**
   * A tool output that failed.
   */
  is_error: boolean | null;
  from_agent: string | null;
  to_agent: string | null;
  interrupted: boolean;
  phase_id: string | null;
  message_id: number | null;
  /**
   * Memory position (include_steps).
   */
  step: number | null;
  /**
   * Messages only.
   */
  created_at: string | null;
  /**
   * The text was cut to fit the answer.
   */
  truncated: boolean;
}
/**
 * ``coach.get_state``: a fresh read of the board. The zones come on topic
 * ``coach.state`` as a ``StateSnapshot``, queued behind the deltas already sent, so
 * they are never a mix (and no answer has to fit the RPC limit).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetStateRequest".
 */
export interface GetStateRequest {}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "GetStateResponse".
 */
export interface GetStateResponse {
  /**
   * The session the snapshot is of.
   */
  session_id: string | null;
  /**
   * The snapshot's step.
   */
  step: number;
}
/**
 * ``coach.interrupt``: stop what the agent is saying or generating now (a stop
 * button). The reply is stored as interrupted, with only what was played.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "InterruptRequest".
 */
export interface InterruptRequest {}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "InterruptResponse".
 */
export interface InterruptResponse {
  /**
   * False: nothing was being said, or the reply cannot be interrupted.
   */
  interrupted: boolean;
}
/**
 * ``coach.list_sessions``: the caller's sessions, newest first (a branch names its
 * parent, so a client can draw the tree).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ListSessionsRequest".
 */
export interface ListSessionsRequest {
  /**
   * Sessions at most.
   */
  limit?: number;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ListSessionsResponse".
 */
export interface ListSessionsResponse {
  sessions: SessionSummary[];
  /**
   * Older sessions were left out (by `limit`, or to fit).
   */
  more: boolean;
}
/**
 * One of the caller's sessions.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "SessionSummary".
 */
export interface SessionSummary {
  id: string;
  challenge: string | null;
  status: "in_progress" | "completed" | "failed";
  created_at: string;
  updated_at: string;
  phases_done: number;
  phases_total: number;
  current_agent: string | null;
  current_phase_id: string | null;
  /**
   * A branch's parent session.
   */
  parent_session_id: string | null;
  /**
   * The parent's phase it starts after.
   */
  branched_from_phase: string | null;
}
/**
 * ``coach.resume_session``: continue a session in this conversation.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ResumeSessionRequest".
 */
export interface ResumeSessionRequest {
  /**
   * A session id (32 hex digits).
   */
  session_id: string;
}
/**
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ResumeSessionResponse".
 */
export interface ResumeSessionResponse {
  session_id: string;
  agent: "coach" | "strategist" | "evaluator";
  next_phase_id: string;
  challenge: string | null;
}
/**
 * What was done: ``type`` (e.g. ``search``, ``navigate``), the tool and its parameters.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Action".
 */
export interface Action {
  type: string;
  tool: string | null;
  params: {
    [k: string]: JsonValue;
  };
}
/**
 * The cards a frontend draws beside the brief.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Board".
 */
export interface Board {
  challenge: string | null;
  insights: BoardInsight[];
  ideas: BoardIdea[];
  evaluation: Evaluation | null;
  search: Search;
  /**
   * The data paths this render reflects.
   */
  changed: string[];
}
/**
 * An insight as the board shows it.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "BoardInsight".
 */
export interface BoardInsight {
  id: string;
  text: string;
  focused: boolean;
}
/**
 * An idea as the board shows it.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "BoardIdea".
 */
export interface BoardIdea {
  id: string;
  title: string;
  description: string;
  selected: boolean;
  focused: boolean;
}
/**
 * The strategy's scores and the reasoning behind them.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Evaluation".
 */
export interface Evaluation {
  desirability: number;
  feasibility: number;
  viability: number;
  summary: string;
}
/**
 * The last search of earlier work that found something (``query`` null: none yet).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Search".
 */
export interface Search {
  query: string | null;
  results: SearchResult[];
}
/**
 * A piece of earlier work a search found (an idea's text is ``title: description``).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "SearchResult".
 */
export interface SearchResult {
  kind: "insight" | "idea";
  text: string;
  /**
   * The session it was found in.
   */
  session_id: string;
}
/**
 * The design work: what the agents' tools write.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "DataZone".
 */
export interface DataZone {
  challenge: string | null;
  insights: Insight[];
  ideas: Idea[];
  selected_idea_id: string | null;
  evaluation: Evaluation | null;
  search: Search;
}
/**
 * An observation, need or pain point of the users, from the phase it was found in.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Insight".
 */
export interface Insight {
  id: string;
  text: string;
  phase_id: string | null;
}
/**
 * An idea for the challenge.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Idea".
 */
export interface Idea {
  id: string;
  title: string;
  description: string;
}
/**
 * A recorded delta: the spec plus the state step it produced (strictly increasing).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Delta".
 */
export interface Delta {
  turn_id: string | null;
  trigger: "user_query" | "user_action" | "system";
  source: "llm" | "user" | "system";
  actor_id: string | null;
  delta_type: "add" | "update" | "remove";
  path: string;
  action: Action;
  result: ResultMeta;
  step: number;
}
/**
 * What came of it: how many items (``0`` for an empty search) and which fields.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ResultMeta".
 */
export interface ResultMeta {
  count: number | null;
  fields: string[];
}
/**
 * The insight or idea the user looks at.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "Focus".
 */
export interface Focus {
  kind: "insight" | "idea";
  id: string;
}
/**
 * Where the user was before: an agent and its phase.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "StackEntry".
 */
export interface StackEntry {
  agent: string;
  phase_id: string | null;
}
/**
 * One change: its delta and the whole new value of the zone it changed (``zone``
 * null: a delta that changed no zone, such as a search that found nothing).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "StateDelta".
 */
export interface StateDelta {
  type: "delta";
  session_id: string;
  step: number;
  zone: ("data" | "template" | "view") | null;
  delta: Delta;
  value: DataZone | TemplateZone | ViewZone | null;
}
/**
 * The rendered brief, written after a turn that changed the data zone.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "TemplateZone".
 */
export interface TemplateZone {
  markdown: string;
  /**
   * The user request of that turn.
   */
  request: string | null;
  board: Board;
}
/**
 * Where the user is: the agent, the phase, the focused item, where they have been.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ViewZone".
 */
export interface ViewZone {
  agent: "coach" | "strategist" | "evaluator";
  phase_id: string | null;
  focus: Focus | null;
  stack: StackEntry[];
}
/**
 * The three zones at ``step``: apply deltas after that step only.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "StateSnapshot".
 */
export interface StateSnapshot {
  type: "snapshot";
  /**
   * null: no design session yet.
   */
  session_id: string | null;
  step: number;
  data: DataZone;
  /**
   * null: nothing rendered yet.
   */
  template: TemplateZone | null;
  /**
   * null: no agent has taken the session yet.
   */
  view: ViewZone | null;
}
/**
 * The conversation passed from one agent to another.
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "HandoffStep".
 */
export interface HandoffStep {
  type: "handoff";
  from_agent: string;
  to_agent: string;
}
/**
 * An agent called a tool (as it happened; what a "show steps" view lists).
 *
 * This interface was referenced by `CoachRpc`'s JSON-Schema
 * via the `definition` "ToolStep".
 */
export interface ToolStep {
  type: "tool";
  tool: string;
  /**
   * The arguments as the model sent them (JSON text).
   */
  arguments: string;
  /**
   * False: the tool refused or failed.
   */
  ok: boolean;
}
