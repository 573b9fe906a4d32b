// The board's state: a pure reducer over the coach.state stream and fresh reads.
//
// The board never shows a mix of two sessions or a state with a hole in it: a delta is
// applied only on top of the step just before it, from the same session. Anything else
// is buffered and a fresh read (a snapshot) is asked for. The session id lives here and
// nowhere else: callers read it from this state, never from a closure.

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

interface Buffered {
  message: StateDelta;
  /** The order it arrived in (see `BoardState.received`). */
  seq: number;
}

export interface BoardState {
  session_id: string | null;
  step: number;
  data: DataZone;
  template: TemplateZone | null;
  view: ViewZone | null;
  /** A snapshot has been applied: the zones are the server's, not placeholders. */
  synced: boolean;
  /** The last applied delta (what just changed). */
  lastDelta: Delta | null;
  /** The last search, when it found nothing (the data zone keeps the one before). */
  emptySearch: EmptySearch | null;
  /** Deltas that cannot be applied yet: after a gap, or of another session. */
  pending: Buffered[];
  /** A fresh read is wanted. */
  needsSync: boolean;
  /** The fresh read in flight: its id, and `received` when it started. */
  sync: { id: number; from: number } | null;
  /** How many messages have arrived (their sequence numbers). */
  received: number;
  /** How many syncs have been started (their ids). */
  syncs: number;
}

export type BoardAction =
  /** A message from the coach.state stream (a delta, or a snapshot the server sent). */
  | { type: "message"; message: StateMessage }
  /** A snapshot from the answer of a fresh read (`syncId`: the sync that asked for it). */
  | { type: "snapshot"; snapshot: Snapshot; syncId?: number }
  /** The room connected (first time) or reconnected: messages may have been lost. */
  | { type: "reconnect" }
  /** The app starts a fresh read (ignored while one is in flight). */
  | { type: "syncStarted" }
  /** The fresh read was answered with where the state is; its zones come on the stream. */
  | { type: "syncAnswered"; syncId: number; session_id: string | null; step: number }
  /** The fresh read failed or its snapshot never came: ask again. */
  | { type: "syncFailed"; syncId: number };

/** At most this many deltas are buffered; the oldest go first. */
export const MAX_PENDING = 500;

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

/** Before the first connect: nothing known, a fresh read wanted. */
export function initialBoard(): BoardState {
  return {
    session_id: null,
    step: 0,
    data: emptyData(),
    template: null,
    view: null,
    synced: false,
    lastDelta: null,
    emptySearch: null,
    pending: [],
    needsSync: true,
    sync: null,
    received: 0,
    syncs: 0,
  };
}

export function boardReducer(state: BoardState, action: BoardAction): BoardState {
  switch (action.type) {
    case "message": {
      const seq = state.received;
      const counted = { ...state, received: seq + 1 };
      if (action.message.type === "snapshot") {
        // Sent on the stream behind every delta before it: nothing buffered is newer
        // from another session.
        return applySnapshot(counted, fromStateSnapshot(action.message), Number.POSITIVE_INFINITY, state.sync !== null);
      }
      return receiveDelta(counted, action.message, seq);
    }
    case "snapshot": {
      const ours = state.sync !== null && action.syncId === state.sync.id;
      const keepFrom = ours && state.sync ? state.sync.from : Number.POSITIVE_INFINITY;
      return applySnapshot(state, action.snapshot, keepFrom, ours);
    }
    case "reconnect":
      // An in-flight read may be lost with the connection: a new one is wanted.
      return { ...state, needsSync: true, sync: null };
    case "syncStarted": {
      if (state.sync !== null) return state; // never two in flight
      const id = state.syncs + 1;
      return { ...state, syncs: id, needsSync: false, sync: { id, from: state.received } };
    }
    case "syncAnswered": {
      if (state.sync?.id !== action.syncId) return state;
      const done = state.synced && state.session_id === action.session_id && state.step >= action.step;
      return done ? { ...state, sync: null } : state;
    }
    case "syncFailed": {
      if (state.sync?.id !== action.syncId) return state;
      return { ...state, sync: null, needsSync: true };
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

function receiveDelta(state: BoardState, message: StateDelta, seq: number): BoardState {
  const sameSession = state.synced && message.session_id === state.session_id;
  if (sameSession && message.step <= state.step) return state; // a duplicate
  if (sameSession && message.step === state.step + 1) {
    return drain(applyDelta(state, message));
  }
  // A gap, or another session (a resume or branch switched it): wait for a fresh read.
  return { ...buffer(state, message, seq), needsSync: true };
}

function buffer(state: BoardState, message: StateDelta, seq: number): BoardState {
  const known = state.pending.some(
    (b) => b.message.session_id === message.session_id && b.message.step === message.step,
  );
  if (known) return state;
  const pending = [...state.pending, { message, seq }];
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
    const next = current.pending.find((b) => b.message.session_id === session && b.message.step === step + 1);
    const rest = current.pending.filter((b) => !(b.message.session_id === session && b.message.step <= step + 1));
    if (!next) return rest.length === current.pending.length ? current : { ...current, pending: rest };
    current = applyDelta({ ...current, pending: rest }, next.message);
  }
}

/**
 * Replace everything with a snapshot (unless it is older than what is shown), then apply
 * the buffered deltas of its session that follow it. Buffered deltas of another session
 * are dropped, unless they arrived after the fresh read began (`keepFrom`): those may be
 * newer than the snapshot, and ask for another read.
 */
function applySnapshot(state: BoardState, snapshot: Snapshot, keepFrom: number, endsSync: boolean): BoardState {
  // `endsSync`: it answers the fresh read in flight, so it also answers whatever asked for it.
  const stale = state.synced && snapshot.session_id === state.session_id && snapshot.step < state.step;
  let next: BoardState = stale
    ? state
    : {
        ...state,
        session_id: snapshot.session_id,
        step: snapshot.step,
        data: snapshot.data,
        template: snapshot.template,
        view: snapshot.view,
        synced: true,
        lastDelta: null,
        emptySearch: null,
      };
  next = {
    ...next,
    sync: endsSync ? null : state.sync,
    pending: next.pending.filter((b) =>
      b.message.session_id === next.session_id ? b.message.step > next.step : b.seq >= keepFrom,
    ),
  };
  next = drain(next);
  // Still a hole (or a newer session) in the buffer: ask again.
  return { ...next, needsSync: next.pending.length > 0 || (state.needsSync && !endsSync) };
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

/** A snapshot from a `coach.get_state` answer, when the answer carries the zones. */
export function snapshotFromAnswer(answer: unknown): Snapshot | null {
  if (!isObject(answer) || !isStep(answer["step"]) || !isDataZone(answer["data"])) return null;
  const session = answer["session_id"];
  if (session !== null && typeof session !== "string") return null;
  const template = answer["template"] ?? null;
  const view = answer["view"] ?? null;
  if ((template !== null && !isTemplateZone(template)) || (view !== null && !isViewZone(view))) return null;
  return { session_id: session, step: answer["step"], data: answer["data"], template, view };
}
