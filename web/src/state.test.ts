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
import {
  type BoardAction,
  type BoardState,
  boardReducer,
  initialBoard,
  parseStateMessage,
  snapshotFromAnswer,
} from "./state";
import type { StateDelta } from "./rpc";

function run(state: BoardState, ...actions: BoardAction[]): BoardState {
  return actions.reduce(boardReducer, state);
}

const msg = (message: StateDelta): BoardAction => ({ type: "message", message });

/** A board synced to session A at step 3 with one insight. */
function syncedA(): BoardState {
  const state = run(initialBoard(), { type: "syncStarted" });
  return run(state, {
    type: "snapshot",
    syncId: state.sync!.id,
    snapshot: snapshot(SESSION_A, 3, { data: data({ challenge: "Eat well", insights: [INSIGHTS[0]!] }) }),
  });
}

describe("boardReducer", () => {
  it("starts wanting a fresh read, with nothing shown", () => {
    const state = initialBoard();
    expect(state.needsSync).toBe(true);
    expect(state.synced).toBe(false);
    expect(state.session_id).toBeNull();
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

  it("buffers after a gap, asks for a fresh read, then applies the snapshot and the buffer", () => {
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
    const syncId = state.sync!.id;
    // A second start while one is in flight changes nothing.
    expect(run(state, { type: "syncStarted" })).toBe(state);

    state = run(state, { type: "snapshot", syncId, snapshot: snapshot(SESSION_A, 5, { data: data({ challenge: "Five" }) }) });
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
    let state = run(syncedA(), msg(delta(SESSION_A, 9, "data", data({ challenge: "Nine" }))), { type: "syncStarted" });
    state = run(state, { type: "snapshot", syncId: state.sync!.id, snapshot: snapshot(SESSION_A, 6) });
    expect(state.step).toBe(6);
    expect(state.pending).toHaveLength(1);
    expect(state.needsSync).toBe(true);
  });

  it("drops buffered deltas the snapshot already covers", () => {
    let state = run(syncedA(), msg(delta(SESSION_A, 5, "data", data({ challenge: "Five" }))), { type: "syncStarted" });
    state = run(state, { type: "snapshot", syncId: state.sync!.id, snapshot: snapshot(SESSION_A, 8, { data: data({ challenge: "Eight" }) }) });
    expect(state.step).toBe(8);
    expect(state.data.challenge).toBe("Eight");
    expect(state.pending).toEqual([]);
    expect(state.needsSync).toBe(false);
  });

  it("asks for a fresh read after a reconnect, and takes the snapshot whole", () => {
    let state = run(syncedA(), msg(delta(SESSION_A, 4, "view", view())), { type: "reconnect" });
    expect(state.needsSync).toBe(true);
    state = run(state, { type: "syncStarted" });
    state = run(state, {
      type: "snapshot",
      syncId: state.sync!.id,
      snapshot: snapshot(SESSION_A, 12, { data: fullData(), template: template(), view: view({ agent: "evaluator" }) }),
    });
    expect(state.step).toBe(12);
    expect(state.data.selected_idea_id).toBe("idea-1");
    expect(state.template?.markdown).toContain("Design brief");
    expect(state.view?.agent).toBe("evaluator");
    expect(state.needsSync).toBe(false);
  });

  it("a reconnect abandons the read in flight; its late answer does not end the new one", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const first = state.sync!.id;
    state = run(state, { type: "reconnect" });
    expect(state.sync).toBeNull();
    state = run(state, { type: "syncStarted" });
    const second = state.sync!.id;
    expect(second).not.toBe(first);
    state = run(state, { type: "snapshot", syncId: first, snapshot: snapshot(SESSION_A, 4) });
    expect(state.step).toBe(4);
    expect(state.sync?.id).toBe(second);
    state = run(state, { type: "syncFailed", syncId: first });
    expect(state.sync?.id).toBe(second);
    state = run(state, { type: "syncFailed", syncId: second });
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(true);
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

  it("a session switch buffers the new session's deltas until its snapshot", () => {
    let state = run(syncedA(), msg(delta(SESSION_B, 8, "data", data({ challenge: "B eight" }))));
    expect(state.session_id).toBe(SESSION_A);
    expect(state.data.challenge).toBe("Eat well"); // never a mix
    expect(state.needsSync).toBe(true);
    state = run(state, msg(delta(SESSION_A, 4, "data", data({ challenge: "A four" }))));
    state = run(state, { type: "syncStarted" });
    state = run(state, { type: "snapshot", syncId: state.sync!.id, snapshot: snapshot(SESSION_B, 7, { data: data({ challenge: "B seven" }) }) });
    expect(state.session_id).toBe(SESSION_B);
    expect(state.step).toBe(8);
    expect(state.data.challenge).toBe("B eight");
    expect(state.pending).toEqual([]); // A's delta dropped
    expect(state.needsSync).toBe(false);
  });

  it("a delta of another session that came during the read is kept and asks again", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const syncId = state.sync!.id;
    state = run(state, msg(delta(SESSION_B, 2, "data", data({ challenge: "B two" }))));
    state = run(state, { type: "snapshot", syncId, snapshot: snapshot(SESSION_A, 5) });
    expect(state.session_id).toBe(SESSION_A);
    expect(state.pending).toHaveLength(1);
    expect(state.needsSync).toBe(true);
  });

  it("ignores a snapshot older than what is shown", () => {
    let state = run(syncedA(), msg(delta(SESSION_A, 4, "data", data({ challenge: "Four" }))), { type: "reconnect" }, { type: "syncStarted" });
    state = run(state, { type: "snapshot", syncId: state.sync!.id, snapshot: snapshot(SESSION_A, 2, { data: data({ challenge: "Two" }) }) });
    expect(state.step).toBe(4);
    expect(state.data.challenge).toBe("Four");
    expect(state.sync).toBeNull();
  });

  it("takes a snapshot sent on the stream (a session switch), then its deltas", () => {
    const state = run(
      syncedA(),
      { type: "message", message: streamSnapshot(snapshot(SESSION_B, 10, { data: data({ challenge: "B" }), view: view({ agent: "evaluator" }) })) },
      msg(delta(SESSION_B, 11, "data", data({ challenge: "B eleven" }))),
    );
    expect(state.session_id).toBe(SESSION_B);
    expect(state.step).toBe(11);
    expect(state.data.challenge).toBe("B eleven");
    expect(state.view?.agent).toBe("evaluator");
    expect(state.needsSync).toBe(false);
  });

  it("a get_state answer without zones waits for the snapshot on the stream", () => {
    let state = run(syncedA(), { type: "reconnect" }, { type: "syncStarted" });
    const syncId = state.sync!.id;
    state = run(state, { type: "syncAnswered", syncId, session_id: SESSION_A, step: 6 });
    expect(state.sync?.id).toBe(syncId);
    state = run(state, { type: "message", message: streamSnapshot(snapshot(SESSION_A, 6, { data: data({ challenge: "Six" }) })) });
    expect(state.sync).toBeNull();
    expect(state.needsSync).toBe(false);
    expect(state.data.challenge).toBe("Six");
    // An answer that comes after its snapshot changes nothing.
    expect(run(state, { type: "syncAnswered", syncId, session_id: SESSION_A, step: 6 })).toBe(state);
  });

  it("a snapshot of no session, then the first session: a fresh read before showing it", () => {
    let state = run(initialBoard(), { type: "syncStarted" });
    state = run(state, { type: "snapshot", syncId: state.sync!.id, snapshot: snapshot(null, 0) });
    expect(state.synced).toBe(true);
    expect(state.needsSync).toBe(false);
    state = run(state, msg(delta(SESSION_A, 1, "data", data({ challenge: "New" }))));
    expect(state.data.challenge).toBeNull();
    expect(state.needsSync).toBe(true);
  });

  it("a delta before any snapshot is buffered", () => {
    const state = run(initialBoard(), msg(delta(SESSION_A, 1, "data", data({ challenge: "x" }))));
    expect(state.synced).toBe(false);
    expect(state.pending).toHaveLength(1);
    expect(state.needsSync).toBe(true);
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

  it("reads a get_state answer with zones, and not one without", () => {
    expect(snapshotFromAnswer({ ...snapshot(SESSION_A, 3) })?.step).toBe(3);
    expect(snapshotFromAnswer({ session_id: SESSION_A, step: 3 })).toBeNull();
  });
});
