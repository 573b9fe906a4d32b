import { describe, expect, it } from "vitest";
import {
  data,
  delta,
  emptySearch,
  fullData,
  IDEAS,
  INSIGHTS,
  SESSION_A,
  SESSION_B,
  snapshot,
  streamSnapshot,
  template,
  view,
} from "../tests/fixtures";
import type { StateMessage } from "./rpc";
import {
  type BoardAction,
  type BoardState,
  boardReducer,
  initialBoard,
  parseStateMessage,
  readGetStateAnswer,
  RETRY_MAX_MS,
  retryDelay,
  type Snapshot,
} from "./state";

const AGENT = "agent-AJ_first";
const NEW_AGENT = "agent-AJ_second";

function run(state: BoardState, ...actions: BoardAction[]): BoardState {
  return actions.reduce(boardReducer, state);
}

/** A coach.state message (from the first agent unless told). */
const msg = (message: StateMessage, sender = AGENT): BoardAction => ({ type: "message", sender, message });
/** A snapshot on coach.state. */
const snap = (s: Snapshot, sender = AGENT): BoardAction => msg(streamSnapshot(s), sender);
/** coach.get_state's answer for the read in flight: where `s` is. */
const answered = (state: BoardState, s: Snapshot): BoardAction => ({
  type: "syncAnswered",
  syncId: state.sync!.id,
  session_id: s.session_id,
  step: s.step,
});

/** A whole fresh read: started, its snapshot on the stream, then the answer. */
function read(state: BoardState, s: Snapshot, sender = AGENT): BoardState {
  const started = run(state, { type: "syncStarted" });
  return run(started, snap(s, sender), answered(started, s));
}

/** A board synced to session A at step 3 with one insight, of the first agent. */
function syncedA(): BoardState {
  return read(initialBoard(AGENT), snapshot(SESSION_A, 3, { data: data({ challenge: "Eat well", insights: [INSIGHTS[0]!] }) }));
}

describe("boardReducer", () => {
  it("starts wanting a fresh read, with nothing shown", () => {
    const state = initialBoard(AGENT);
    expect(state.needsSync).toBe(true);
    expect(state.synced).toBe(false);
    expect(state.awaitingSnapshot).toBe(true);
    expect(state.session_id).toBeNull();
    // No agent, no read.
    expect(run(initialBoard(null), { type: "syncStarted" }).sync).toBeNull();
  });

  it("applies deltas in order", () => {
    const start = syncedA();
    expect(start.needsSync).toBe(false);
    expect(start.sync).toBeNull();
    const state = run(
      start,
      msg(delta(SESSION_A, 4, "data", data({ challenge: "Eat well", insights: INSIGHTS }))),
      msg(delta(SESSION_A, 5, "data", data({ challenge: "Eat well", insights: INSIGHTS, ideas: IDEAS }))),
    );
    expect(state.step).toBe(5);
    expect(state.data.insights).toHaveLength(2);
    expect(state.data.ideas.map((i) => i.id)).toEqual(["idea-1", "idea-2"]);
    expect(state.lastDelta?.step).toBe(5);
    expect(state.needsSync).toBe(false);
    expect(state.pending).toEqual([]);
  });

  it("ignores a duplicate step", () => {
    const start = run(syncedA(), msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))));
    const again = run(start, msg(delta(SESSION_A, 4, "data", data({ challenge: "Other four" }))));
    const older = run(again, msg(delta(SESSION_A, 2, "data", data({ challenge: "Two" }))));
    expect(older.data.challenge).toBe("Four");
    expect(older.step).toBe(4);
    expect(older.needsSync).toBe(false);
    expect(older.pending).toEqual([]);
  });

  it("reads only the agent: another participant's message is ignored", () => {
    const start = syncedA();
    expect(run(start, msg(delta(SESSION_A, 4, "data", data({ challenge: "Not the coach" })), "mallory"))).toBe(start);
    expect(run(start, snap(snapshot(SESSION_B, 9), "mallory"))).toBe(start);
  });

  it("buffers after a gap, asks for a fresh read, then applies the snapshot and the buffer above it", () => {
    let state = run(
      syncedA(),
      msg(delta(SESSION_A, 6, "data", data({ challenge: "Six" }))),
      msg(delta(SESSION_A, 7, "view", view({ agent: "strategist" }))),
    );
    expect(state.needsSync).toBe(true);
    expect(state.step).toBe(3);
    expect(state.data.challenge).toBe("Eat well"); // no hole: nothing of 6 or 7 shown yet
    expect(state.pending).toHaveLength(2);

    state = run(state, { type: "syncStarted" });
    expect(state.needsSync).toBe(false);
    // A second start while one is in flight changes nothing.
    expect(run(state, { type: "syncStarted" })).toBe(state);

    const five = snapshot(SESSION_A, 5, { data: data({ challenge: "Five" }) });
    state = run(state, answered(state, five), snap(five));
    expect(state.step).toBe(7);
    expect(state.data.challenge).toBe("Six");
    expect(state.view?.agent).toBe("strategist");
    expect(state.pending).toEqual([]);
    expect(state.needsSync).toBe(false);
    expect(state.sync).toBeNull();
  });

  it("fills a gap when the missing delta arrives late", () => {
    const state = run(
      syncedA(),
      msg(delta(SESSION_A, 5, "data", data({ challenge: "Five" }))),
      msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))),
    );
    expect(state.step).toBe(5);
    expect(state.data.challenge).toBe("Five");
    expect(state.pending).toEqual([]);
  });

  it("keeps asking when a gap remains after the snapshot", () => {
    const state = read(run(syncedA(), msg(delta(SESSION_A, 9, "data", data({ challenge: "Nine" })))), snapshot(SESSION_A, 6));
    expect(state.step).toBe(6);
    expect(state.pending).toHaveLength(1);
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(true);
  });

  it("a snapshot drops what it covers: its session at or below its step, and other sessions", () => {
    const state = run(
      syncedA(),
      msg(delta(SESSION_A, 5, "data", data({ challenge: "A five" }))),
      msg(delta(SESSION_A, 8, "data", data({ challenge: "A eight" }))),
      msg(delta(SESSION_B, 2, "data", data({ challenge: "B two" }))),
      snap(snapshot(SESSION_A, 8, { data: data({ challenge: "Eight" }) })),
    );
    expect(state.step).toBe(8);
    expect(state.data.challenge).toBe("Eight");
    expect(state.pending).toEqual([]);
  });

  it("a snapshot on the stream always applies, even below what is shown", () => {
    const state = run(
      syncedA(),
      msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))),
      snap(snapshot(SESSION_A, 2, { data: data({ challenge: "Two" }) })),
    );
    expect(state.step).toBe(2);
    expect(state.data.challenge).toBe("Two");
    expect(state.lastDelta).toBeNull();
  });

  it("asks for a fresh read after a reconnect, and takes the snapshot whole", () => {
    let state = run(syncedA(), msg(delta(SESSION_A, 4, "view", view())), { type: "reconnect" });
    expect(state.needsSync).toBe(true);
    state = read(state, snapshot(SESSION_A, 12, { data: fullData(), template: template(), view: view({ agent: "evaluator" }) }));
    expect(state.step).toBe(12);
    expect(state.data.selected_idea_id).toBe("idea-1");
    expect(state.template?.markdown).toContain("Design brief");
    expect(state.view?.agent).toBe("evaluator");
    expect(state.needsSync).toBe(false);
    expect(state.sync).toBeNull();
  });

  it("a reconnect abandons the read in flight; its late answer does not end the new one", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const first = state.sync!.id;
    state = run(state, { type: "reconnect" });
    expect(state.sync).toBeNull();
    state = run(state, { type: "syncStarted" });
    const second = state.sync!.id;
    expect(second).not.toBe(first);
    state = run(state, { type: "syncAnswered", syncId: first, session_id: SESSION_A, step: 3 });
    expect(state.sync).toEqual({ id: second, answer: null });
    state = run(state, { type: "syncFailed", syncId: first, at: 0 });
    expect(state.sync?.id).toBe(second);
    state = run(state, { type: "syncFailed", syncId: second, at: 0 });
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(true);
  });

  it("the answer first: the read ends when its snapshot has come", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const six = snapshot(SESSION_A, 6, { data: data({ challenge: "Six" }) });
    state = run(state, answered(state, six));
    expect(state.sync?.answer).toEqual({ session_id: SESSION_A, step: 6 });
    expect(state.data.challenge).toBe("Eat well");
    state = run(state, snap(six));
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(false);
    expect(state.data.challenge).toBe("Six");
  });

  it("the snapshot first: it is shown at once, and the read ends with the answer", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const syncId = state.sync!.id;
    const six = snapshot(SESSION_A, 6, { data: data({ challenge: "Six" }) });
    state = run(state, snap(six));
    expect(state.data.challenge).toBe("Six");
    expect(state.sync).toEqual({ id: syncId, answer: null });
    state = run(state, { type: "syncAnswered", syncId, session_id: SESSION_A, step: 6 });
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(false);
    // A second answer of the same read changes nothing.
    expect(run(state, { type: "syncAnswered", syncId, session_id: SESSION_A, step: 6 })).toBe(state);
  });

  it("an answer the board has reached by its deltas ends the read; the snapshot after it still applies", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    state = run(state, answered(state, snapshot(SESSION_A, 4)));
    expect(state.sync).not.toBeNull();
    state = run(state, msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))));
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(false);
    state = run(state, snap(snapshot(SESSION_A, 4, { data: data({ challenge: "Four, read" }) })));
    expect(state.step).toBe(4);
    expect(state.data.challenge).toBe("Four, read");
  });

  it("applies each zone: data, template, view", () => {
    const state = run(
      syncedA(),
      msg(delta(SESSION_A, 4, "data", fullData())),
      msg(delta(SESSION_A, 5, "template", template("# Brief\n- one"))),
      msg(delta(SESSION_A, 6, "view", view({ agent: "strategist", phase_id: "ideate", focus: { kind: "idea", id: "idea-2" } }))),
    );
    expect(state.data).toEqual(fullData());
    expect(state.template?.markdown).toBe("# Brief\n- one");
    expect(state.view).toEqual(view({ agent: "strategist", phase_id: "ideate", focus: { kind: "idea", id: "idea-2" } }));
    expect(state.step).toBe(6);
  });

  it("an empty search changes no zone but advances the step and is remembered", () => {
    const before = run(syncedA(), msg(delta(SESSION_A, 4, "data", fullData())));
    const state = run(before, msg(emptySearch(SESSION_A, 5, "flying cars")));
    expect(state.step).toBe(5);
    expect(state.data).toBe(before.data);
    expect(state.emptySearch).toEqual({ query: "flying cars", step: 5 });
    expect(state.lastDelta?.result.count).toBe(0);
    // The next step follows on directly.
    const next = run(state, msg(delta(SESSION_A, 6, "view", view())));
    expect(next.step).toBe(6);
    expect(next.needsSync).toBe(false);
    // A search that found something replaces the empty one.
    const found = { ...fullData(), search: { query: "lockers", results: [] } };
    expect(run(next, msg(delta(SESSION_A, 7, "data", found))).emptySearch).toBeNull();
  });

  it("a session switch whose snapshot was lost: the new session's deltas wait for a fresh read", () => {
    let state = run(syncedA(), msg(delta(SESSION_B, 8, "data", data({ challenge: "B eight" }))));
    expect(state.session_id).toBe(SESSION_A);
    expect(state.data.challenge).toBe("Eat well"); // never a mix
    expect(state.needsSync).toBe(true);
    state = read(state, snapshot(SESSION_B, 8, { data: data({ challenge: "B eight, read" }) }));
    expect(state.session_id).toBe(SESSION_B);
    expect(state.data.challenge).toBe("B eight, read");
    expect(state.pending).toEqual([]);
    state = run(state, msg(delta(SESSION_B, 9, "data", data({ challenge: "B nine" }))));
    expect(state.step).toBe(9);
    expect(state.data.challenge).toBe("B nine");
    expect(state.needsSync).toBe(false);
  });

  it("takes a snapshot sent on the stream (a session switch), then its deltas", () => {
    const state = run(
      syncedA(),
      snap(snapshot(SESSION_B, 10, { data: data({ challenge: "B" }), view: view({ agent: "evaluator" }) })),
      msg(delta(SESSION_B, 11, "data", data({ challenge: "B eleven" }))),
    );
    expect(state.session_id).toBe(SESSION_B);
    expect(state.step).toBe(11);
    expect(state.data.challenge).toBe("B eleven");
    expect(state.view?.agent).toBe("evaluator");
    expect(state.needsSync).toBe(false);
  });

  it("a snapshot of no session, then the first session: a fresh read before showing it", () => {
    let state = read(initialBoard(AGENT), snapshot(null, 0));
    expect(state.synced).toBe(true);
    expect(state.needsSync).toBe(false);
    state = run(state, msg(delta(SESSION_A, 1, "data", data({ challenge: "New" }))));
    expect(state.data.challenge).toBeNull();
    expect(state.needsSync).toBe(true);
  });

  it("a delta before any snapshot is buffered", () => {
    const state = run(initialBoard(AGENT), msg(delta(SESSION_A, 1, "data", data({ challenge: "x" }))));
    expect(state.synced).toBe(false);
    expect(state.pending).toHaveLength(1);
    expect(state.needsSync).toBe(true);
  });
});

describe("boardReducer: another agent (a worker died, the session was resumed elsewhere)", () => {
  /** Session A at step 6 as the first agent published it (its steps 5 and 6 never committed). */
  function publishedToSix(): BoardState {
    return run(
      syncedA(),
      msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))),
      msg(delta(SESSION_A, 5, "data", data({ challenge: "Five, lost", ideas: IDEAS }))),
      msg(delta(SESSION_A, 6, "template", template("# Six, lost"))),
    );
  }

  it("the new agent's snapshot at a lower step replaces the old state", () => {
    let state = publishedToSix();
    expect(state.step).toBe(6);
    state = run(state, { type: "agent", identity: null }, { type: "agent", identity: NEW_AGENT });
    expect(state.agent).toBe(NEW_AGENT);
    expect(state.awaitingSnapshot).toBe(true);
    expect(state.needsSync).toBe(true);
    state = read(state, snapshot(SESSION_A, 4, { data: data({ challenge: "Four" }) }), NEW_AGENT);
    expect(state.session_id).toBe(SESSION_A);
    expect(state.step).toBe(4);
    expect(state.data.challenge).toBe("Four");
    expect(state.data.ideas).toEqual([]);
    expect(state.template).toBeNull();
    expect(state.awaitingSnapshot).toBe(false);
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(false);
    // The new agent's next step follows on from its own.
    state = run(state, msg(delta(SESSION_A, 5, "data", data({ challenge: "Five, again" })), NEW_AGENT));
    expect(state.step).toBe(5);
    expect(state.data.challenge).toBe("Five, again");
  });

  it("the old agent's deltas buffered before the switch are dropped", () => {
    // Steps 4 and 5 of the first agent are lost; 6 and 7 wait for a fresh read.
    let state = run(
      syncedA(),
      msg(delta(SESSION_A, 6, "data", data({ challenge: "Six, lost" }))),
      msg(delta(SESSION_A, 7, "view", view({ agent: "evaluator" }))),
    );
    expect(state.pending).toHaveLength(2);
    state = run(state, { type: "agent", identity: NEW_AGENT });
    expect(state.pending).toEqual([]);
    state = read(state, snapshot(SESSION_A, 5, { data: data({ challenge: "Five" }) }), NEW_AGENT);
    expect(state.step).toBe(5);
    expect(state.data.challenge).toBe("Five");
    expect(state.view).toBeNull();
    expect(state.pending).toEqual([]);
  });

  it("no mix: nothing applies before the new agent's snapshot, and the old agent is not read", () => {
    let state = run(publishedToSix(), { type: "agent", identity: NEW_AGENT });
    // The old agent's late messages are not read.
    expect(run(state, msg(delta(SESSION_A, 7, "data", data({ challenge: "Seven, old" }))))).toBe(state);
    expect(run(state, snap(snapshot(SESSION_A, 9)))).toBe(state);
    // The new agent's delta waits for its snapshot, even where it would follow on.
    state = run(state, msg(delta(SESSION_A, 7, "data", data({ challenge: "Seven, new" })), NEW_AGENT));
    expect(state.step).toBe(6);
    expect(state.data.challenge).toBe("Five, lost");
    expect(state.pending).toHaveLength(1);
    // Its snapshot replaces everything; the buffered delta above it follows.
    state = read(state, snapshot(SESSION_A, 6, { data: data({ challenge: "Six, new" }) }), NEW_AGENT);
    expect(state.step).toBe(7);
    expect(state.data.challenge).toBe("Seven, new");
    expect(state.template).toBeNull(); // the old agent's brief of step 6 is gone
    expect(state.pending).toEqual([]);
  });

  it("the old agent's read in flight is abandoned; its answer does not end the new one", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const old = state.sync!.id;
    state = run(state, { type: "agent", identity: NEW_AGENT });
    expect(state.sync).toBeNull();
    state = run(state, { type: "syncStarted" });
    state = run(state, { type: "syncAnswered", syncId: old, session_id: SESSION_A, step: 3 });
    expect(state.sync?.answer).toBeNull();
    expect(state.awaitingSnapshot).toBe(true);
    // The board the old agent showed at 3 does not answer the new agent's read either.
    state = run(state, answered(state, snapshot(SESSION_A, 3)));
    expect(state.sync).not.toBeNull();
  });

  it("while no agent is there nothing is read or asked; the same agent again changes nothing", () => {
    const start = syncedA();
    expect(run(start, { type: "agent", identity: AGENT })).toBe(start);
    const gone = run(start, { type: "agent", identity: null });
    expect(run(gone, msg(delta(SESSION_A, 4, "data", data())))).toBe(gone);
    expect(run(gone, { type: "syncStarted" })).toBe(gone);
    expect(gone.data.challenge).toBe("Eat well"); // shown until the next agent's snapshot
  });
});

describe("boardReducer: a fresh read that fails", () => {
  it("a failure asks again after a pause that doubles up to a limit; success resets it", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 50].map(retryDelay)).toEqual([0, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
    expect(RETRY_MAX_MS).toBe(30_000);
    let state = run(syncedA(), { type: "reconnect" });
    for (const [i, at, retryAt] of [[1, 5_000, 6_000], [2, 6_000, 8_000], [3, 8_000, 12_000]] as const) {
      state = run(state, { type: "syncStarted" });
      state = run(state, { type: "syncFailed", syncId: state.sync!.id, at });
      expect(state.failures).toBe(i);
      expect(state.retryAt).toBe(retryAt);
      expect(state.needsSync).toBe(true);
    }
    state = read(state, snapshot(SESSION_A, 3));
    expect(state.failures).toBe(0);
    expect(state.retryAt).toBeNull();
    // A new agent starts with no failures.
    state = run(state, { type: "syncStarted" }, { type: "reconnect" }, { type: "syncStarted" });
    state = run(state, { type: "syncFailed", syncId: state.sync!.id, at: 0 }, { type: "agent", identity: NEW_AGENT });
    expect(state.failures).toBe(0);
    expect(state.retryAt).toBeNull();
  });

  it("an agent without coach.get_state is not asked again; a new agent is", () => {
    let state = run(initialBoard(AGENT), { type: "syncStarted" });
    state = run(state, { type: "syncUnsupported", syncId: state.sync!.id });
    expect(state.unsupported).toBe(true);
    expect(state.sync).toBeNull();
    expect(run(state, { type: "syncStarted" })).toBe(state);
    expect(run(state, { type: "reconnect" }, { type: "syncStarted" }).sync).toBeNull();
    state = run(state, { type: "agent", identity: NEW_AGENT });
    expect(state.unsupported).toBe(false);
    expect(run(state, { type: "syncStarted" }).sync).not.toBeNull();
  });
});

describe("parseStateMessage", () => {
  it("reads a delta, a zone-less delta and a snapshot", () => {
    expect(parseStateMessage(JSON.stringify(delta(SESSION_A, 1, "data", fullData())))?.type).toBe("delta");
    expect(parseStateMessage(JSON.stringify(emptySearch(SESSION_A, 2, "q")))?.type).toBe("delta");
    expect(parseStateMessage(JSON.stringify(streamSnapshot(snapshot(null, 0))))?.type).toBe("snapshot");
  });

  it("refuses what is not a state message", () => {
    expect(parseStateMessage("not json")).toBeNull();
    expect(parseStateMessage("[]")).toBeNull();
    expect(parseStateMessage(JSON.stringify({ ...delta(SESSION_A, 1, "data", fullData()), value: null }))).toBeNull();
    expect(parseStateMessage(JSON.stringify({ ...delta(SESSION_A, 1, "view", view()), zone: "other" }))).toBeNull();
    expect(parseStateMessage(JSON.stringify({ ...delta(SESSION_A, 1, "view", view()), step: -1 }))).toBeNull();
  });
});

describe("readGetStateAnswer", () => {
  it("reads where the state is, and refuses what does not say", () => {
    expect(readGetStateAnswer({ session_id: SESSION_A, step: 3 })).toEqual({ session_id: SESSION_A, step: 3 });
    expect(readGetStateAnswer({ session_id: null, step: 0 })).toEqual({ session_id: null, step: 0 });
    expect(readGetStateAnswer({ session_id: SESSION_A })).toBeNull();
    expect(readGetStateAnswer({ session_id: 7, step: 1 })).toBeNull();
    expect(readGetStateAnswer(null)).toBeNull();
  });
});
