// The board's state: a pure reducer over the coach.state stream, the agent participant
// and the fresh reads (`coach.get_state`).
//
// The board never shows a mix of two sessions, of two agents, or a state with a hole in
// it: a delta is applied only on top of the step just before it, from the same session
// and the same agent. Anything else is buffered and a fresh read is asked for.
//
// Every snapshot comes on the stream (a fresh read's answer only says where the state
// is), queued behind the deltas sent before it, so a snapshot is in order by
// construction and always replaces what is shown, even at a lower step: after a
// worker died, the agent that resumed the session may be behind what the dead one
// published. The session id lives here and nowhere else: callers read it from this
// state, never from a closure.

import type {
  DataZone,
  Delta,
  StateDelta,
  StateMessage,
  StateSnapshot,
  TemplateZone,
  ViewZone,
} from "./rpc";

/** The three zones of one session at one step (a fresh read). */
export interface Snapshot {
  session_id: string | null;
  step: number;
  data: DataZone;
  template: TemplateZone | null;
  view: ViewZone | null;
}

/** A search that found nothing: a delta that changed no zone (`zone: null`, count 0). */
export interface EmptySearch {
  query: string | null;
  step: number;
}

/** The fresh read in flight. */
export interface Sync {
  id: number;
  /** What `coach.get_state` answered: the state its snapshot is of (null until then). */
  answer: { session_id: string | null; step: number } | null;
}

export interface BoardState {
  /** The agent participant whose messages are read (null: none in the room). */
  agent: string | null;
  session_id: string | null;
  step: number;
  data: DataZone;
  template: TemplateZone | null;
  view: ViewZone | null;
  /** A snapshot has been applied: the zones are the server's, not placeholders. */
  synced: boolean;
  /**
   * The agent changed: what is shown is the last agent's, no delta is applied until
   * the new agent's snapshot replaces it.
   */
  awaitingSnapshot: boolean;
  /** The last applied delta (what just changed). */
  lastDelta: Delta | null;
  /** The last search, when it found nothing (the data zone keeps the one before). */
  emptySearch: EmptySearch | null;
  /** Deltas that cannot be applied yet: after a gap, of another session, before a snapshot. */
  pending: StateDelta[];
  /** A fresh read is wanted. */
  needsSync: boolean;
  /** The fresh read in flight. */
  sync: Sync | null;
  /** How many syncs have been started (their ids). */
  syncs: number;
  /** Fresh reads that failed in a row (the pause before the next one grows with them). */
  failures: number;
  /** After a failure: when (ms since the epoch) the next fresh read may start. */
  retryAt: number | null;
  /** The agent has no `coach.get_state`: no fresh read is asked of it again. */
  unsupported: boolean;
}

export type BoardAction =
  /** A message from the coach.state stream (a delta, or a snapshot), and who sent it. */
  | { type: "message"; sender: string; message: StateMessage }
  /** The agent participant now (null: it left). Another identity starts afresh. */
  | { type: "agent"; identity: string | null }
  /** The room connected (first time) or reconnected: messages may have been lost. */
  | { type: "reconnect" }
  /** The app starts a fresh read (ignored while one is in flight, or none is wanted). */
  | { type: "syncStarted" }
  /** The fresh read was answered with where the state is; its snapshot comes on the stream. */
  | { type: "syncAnswered"; syncId: number; session_id: string | null; step: number }
  /** The fresh read failed or its snapshot never came (`at`: when, in ms): ask again after a pause. */
  | { type: "syncFailed"; syncId: number; at: number }
  /** The agent does not have `coach.get_state`: stop asking it. */
  | { type: "syncUnsupported"; syncId: number };

/** At most this many deltas are buffered; the oldest go first. */
export const MAX_PENDING = 500;
/** The pause before the first retry of a failed fresh read; it doubles up to the next. */
export const RETRY_FIRST_MS = 1_000;
export const RETRY_MAX_MS = 30_000;

/** The pause before the next fresh read, after `failures` failed ones in a row. */
export function retryDelay(failures: number): number {
  if (failures <= 0) return 0;
  return Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(failures - 1, 30));
}

export function emptyData(): DataZone {
  return {
    challenge: null,
    insights: [],
    ideas: [],
    selected_idea_id: null,
    evaluation: null,
    search: { query: null, results: [] },
  };
}

/** Before the first snapshot: nothing known, a fresh read wanted (of `agent`, once there). */
export function initialBoard(agent: string | null = null): BoardState {
  return {
    agent,
    session_id: null,
    step: 0,
    data: emptyData(),
    template: null,
    view: null,
    synced: false,
    awaitingSnapshot: true,
    lastDelta: null,
    emptySearch: null,
    pending: [],
    needsSync: true,
    sync: null,
    syncs: 0,
    failures: 0,
    retryAt: null,
    unsupported: false,
  };
}

export function boardReducer(state: BoardState, action: BoardAction): BoardState {
  switch (action.type) {
    case "message": {
      // Only the agent speaks for the board: another participant's message is not read.
      if (state.agent === null || action.sender !== state.agent) return state;
      const message = action.message;
      return message.type === "snapshot" ? applySnapshot(state, fromStateSnapshot(message)) : receiveDelta(state, message);
    }
    case "agent": {
      if (action.identity === state.agent) return state;
      // A new agent (or none): what was buffered and asked of the last one is dropped, and
      // the next snapshot replaces everything, whatever its step.
      return {
        ...state,
        agent: action.identity,
        awaitingSnapshot: true,
        pending: [],
        needsSync: true,
        sync: null,
        failures: 0,
        retryAt: null,
        unsupported: false,
      };
    }
    case "reconnect":
      // An in-flight read may be lost with the connection: a new one is wanted.
      return { ...state, needsSync: true, sync: null };
    case "syncStarted": {
      if (state.sync !== null || !state.needsSync || state.agent === null || state.unsupported) return state;
      const id = state.syncs + 1;
      return { ...state, syncs: id, needsSync: false, sync: { id, answer: null } };
    }
    case "syncAnswered": {
      if (state.sync?.id !== action.syncId || state.sync.answer !== null) return state;
      const answer = { session_id: action.session_id, step: action.step };
      return settle({ ...state, sync: { ...state.sync, answer } });
    }
    case "syncFailed": {
      if (state.sync?.id !== action.syncId) return state;
      const failures = state.failures + 1;
      return { ...state, sync: null, needsSync: true, failures, retryAt: action.at + retryDelay(failures) };
    }
    case "syncUnsupported": {
      if (state.sync?.id !== action.syncId) return state;
      return { ...state, sync: null, needsSync: true, unsupported: true };
    }
  }
}

export function fromStateSnapshot(message: StateSnapshot): Snapshot {
  return {
    session_id: message.session_id,
    step: message.step,
    data: message.data,
    template: message.template,
    view: message.view,
  };
}

/**
 * The fresh read is over once its answer is known and the board shows that state or a
 * later one of the same session (by its snapshot, or by the deltas after it).
 */
function settle(state: BoardState): BoardState {
  const answer = state.sync?.answer;
  if (!answer || !state.synced || state.awaitingSnapshot) return state;
  if (state.session_id !== answer.session_id || state.step < answer.step) return state;
  return { ...state, sync: null, needsSync: state.pending.length > 0, failures: 0, retryAt: null };
}

function receiveDelta(state: BoardState, message: StateDelta): BoardState {
  if (state.awaitingSnapshot) {
    // Its snapshot is on the way (a fresh read is wanted or in flight): it decides.
    return buffer(state, message);
  }
  const sameSession = state.synced && message.session_id === state.session_id;
  if (sameSession && message.step <= state.step) return state; // a duplicate
  if (sameSession && message.step === state.step + 1) {
    return settle(drain(applyDelta(state, message)));
  }
  // A gap, or another session (a resume or branch switched it): wait for a fresh read.
  return { ...buffer(state, message), needsSync: true };
}

function buffer(state: BoardState, message: StateDelta): BoardState {
  const known = state.pending.some((m) => m.session_id === message.session_id && m.step === message.step);
  if (known) return state;
  const pending = [...state.pending, message];
  return { ...state, pending: pending.slice(Math.max(0, pending.length - MAX_PENDING)) };
}

function applyDelta(state: BoardState, message: StateDelta): BoardState {
  const next: BoardState = { ...state, step: message.step, lastDelta: message.delta };
  switch (message.zone) {
    case "data": {
      const data = message.value as DataZone;
      next.data = data;
      if (next.emptySearch && !sameSearch(state.data, data)) next.emptySearch = null;
      break;
    }
    case "template":
      next.template = message.value as TemplateZone;
      break;
    case "view":
      next.view = message.value as ViewZone;
      break;
    case null:
      if (message.delta.result.count === 0 && isSearch(message.delta)) {
        const query = message.delta.action.params["query"];
        next.emptySearch = { query: typeof query === "string" ? query : null, step: message.step };
      }
      break;
  }
  return next;
}

function isSearch(delta: Delta): boolean {
  return delta.path === "data.search" || delta.action.type === "search";
}

function sameSearch(a: DataZone, b: DataZone): boolean {
  return JSON.stringify(a.search) === JSON.stringify(b.search);
}

/** Apply the buffered deltas that are now in order; drop the ones already applied. */
function drain(state: BoardState): BoardState {
  let current = state;
  for (;;) {
    const session = current.session_id;
    const step = current.step;
    const next = current.pending.find((m) => m.session_id === session && m.step === step + 1);
    const rest = current.pending.filter((m) => !(m.session_id === session && m.step <= step + 1));
    if (!next) return rest.length === current.pending.length ? current : { ...current, pending: rest };
    current = applyDelta({ ...current, pending: rest }, next);
  }
}

/**
 * A snapshot from the stream replaces everything, whatever its step: everything buffered
 * came before it on the same stream, so what it covers (its session at or below its
 * step, and any other session) is dropped, and the deltas of its session above it are
 * applied in order.
 */
function applySnapshot(state: BoardState, snapshot: Snapshot): BoardState {
  let next: BoardState = {
    ...state,
    session_id: snapshot.session_id,
    step: snapshot.step,
    data: snapshot.data,
    template: snapshot.template,
    view: snapshot.view,
    synced: true,
    awaitingSnapshot: false,
    lastDelta: null,
    emptySearch: null,
    pending: state.pending.filter((m) => m.session_id === snapshot.session_id && m.step > snapshot.step),
  };
  next = drain(next);
  // Still a hole in the buffer: ask again. A read wanted for another reason (a reconnect,
  // a new agent) and not yet started is still wanted: this snapshot may predate it.
  const wanted = next.pending.length > 0 || (state.needsSync && state.sync === null);
  return settle({ ...next, needsSync: wanted });
}

const ZONES = new Set(["data", "template", "view"]);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isStep(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

function isDataZone(value: unknown): value is DataZone {
  return (
    isObject(value) &&
    Array.isArray(value["insights"]) &&
    Array.isArray(value["ideas"]) &&
    isObject(value["search"]) &&
    Array.isArray((value["search"] as Record<string, unknown>)["results"])
  );
}

function isTemplateZone(value: unknown): value is TemplateZone {
  return isObject(value) && typeof value["markdown"] === "string";
}

function isViewZone(value: unknown): value is ViewZone {
  return isObject(value) && typeof value["agent"] === "string";
}

/** A coach.state message from its JSON text, or null when it is not one (it is then ignored). */
export function parseStateMessage(text: string): StateMessage | null {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  if (!isObject(raw) || !isStep(raw["step"])) return null;
  if (raw["type"] === "snapshot") {
    const ok =
      (raw["session_id"] === null || typeof raw["session_id"] === "string") &&
      isDataZone(raw["data"]) &&
      (raw["template"] === null || isTemplateZone(raw["template"])) &&
      (raw["view"] === null || isViewZone(raw["view"]));
    return ok ? (raw as unknown as StateSnapshot) : null;
  }
  if (raw["type"] !== "delta" || typeof raw["session_id"] !== "string" || !isObject(raw["delta"])) return null;
  const delta = raw["delta"];
  if (!isObject(delta["action"]) || !isObject(delta["result"])) return null;
  const zone = raw["zone"];
  const value = raw["value"];
  const ok =
    (zone === null && (value === null || value === undefined)) ||
    (zone === "data" && isDataZone(value)) ||
    (zone === "template" && isTemplateZone(value)) ||
    (zone === "view" && isViewZone(value));
  if (!ok || (zone !== null && !ZONES.has(zone as string))) return null;
  return { ...(raw as unknown as StateDelta), value: (value ?? null) as StateDelta["value"] };
}

/** Where a `coach.get_state` answer says the state is, or null when it does not say. */
export function readGetStateAnswer(answer: unknown): { session_id: string | null; step: number } | null {
  if (!isObject(answer) || !isStep(answer["step"])) return null;
  const session = answer["session_id"];
  if (session !== null && typeof session !== "string") return null;
  return { session_id: session, step: answer["step"] };
}
