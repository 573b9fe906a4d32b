// Scripted coach data shared by the unit tests, the fake room and the browser tests.

import type { Snapshot } from "../src/state";
import type {
  DataZone,
  Delta,
  StateDelta,
  StateSnapshot,
  TemplateZone,
  ViewZone,
} from "../src/rpc";

type Zone = NonNullable<StateDelta["zone"]>;

export const SESSION_A = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
export const SESSION_B = "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf";
export const SESSION_C = "c0c1c2c3c4c5c6c7c8c9cacbcccdcecf";

export function data(overrides: Partial<DataZone> = {}): DataZone {
  return {
    challenge: null,
    insights: [],
    ideas: [],
    selected_idea_id: null,
    evaluation: null,
    search: { query: null, results: [] },
    ...overrides,
  };
}

export const INSIGHTS = [
  { id: "ins-1", text: "Commuters skip breakfast when the train is late", phase_id: "empathize" },
  { id: "ins-2", text: "Parents plan meals on Sunday evenings", phase_id: "empathize" },
];

export const IDEAS = [
  { id: "idea-1", title: "Breakfast lockers", description: "Pre-ordered breakfast waiting at the station." },
  { id: "idea-2", title: "Sunday meal kits", description: "A box that plans the week's meals with you." },
];

/** A board with everything on it. */
export function fullData(): DataZone {
  return data({
    challenge: "How might we help commuters eat well?",
    insights: INSIGHTS,
    ideas: IDEAS,
    selected_idea_id: "idea-1",
    evaluation: { desirability: 4, feasibility: 3, viability: 5, summary: "Loved by testers; lockers cost money." },
    search: {
      query: "breakfast",
      results: [{ kind: "idea", text: "Coffee cart on the platform", session_id: SESSION_C }],
    },
  });
}

export const BRIEF = [
  "# Design brief",
  "",
  "## Challenge",
  "How might we help **commuters** eat well?",
  "",
  "## Ideas",
  "- Breakfast lockers",
  "- Sunday meal kits",
  "",
  "1. Test with ten riders",
  "2. Price the lockers",
].join("\n");

export function template(markdown = BRIEF, overrides: Partial<TemplateZone> = {}): TemplateZone {
  return {
    markdown,
    request: "add an idea",
    board: {
      challenge: null,
      insights: [],
      ideas: [],
      evaluation: null,
      search: { query: null, results: [] },
      changed: ["data.ideas"],
    },
    ...overrides,
  };
}

export function view(overrides: Partial<ViewZone> = {}): ViewZone {
  return { agent: "coach", phase_id: "define", focus: null, stack: [], ...overrides };
}

export function deltaMeta(step: number, overrides: Partial<Delta> = {}): Delta {
  return {
    turn_id: "turn-1",
    step,
    trigger: "user_query",
    source: "llm",
    actor_id: "coach",
    delta_type: "update",
    path: "data",
    action: { type: "tool", tool: "add_idea", params: {} },
    result: { count: 1, fields: [] },
    ...overrides,
  };
}

export function delta(
  session_id: string,
  step: number,
  zone: Zone | null,
  value: StateDelta["value"],
  overrides: Partial<Delta> = {},
): StateDelta {
  return { type: "delta", session_id, step, zone, delta: deltaMeta(step, overrides), value };
}

/** The delta of a search that found nothing: it changes no zone. */
export function emptySearch(session_id: string, step: number, query: string): StateDelta {
  return delta(session_id, step, null, null, {
    path: "data.search",
    action: { type: "search", tool: "search_past_work", params: { query } },
    result: { count: 0, fields: [] },
  });
}

export function snapshot(session_id: string | null, step: number, overrides: Partial<Snapshot> = {}): Snapshot {
  return { session_id, step, data: data(), template: null, view: null, ...overrides };
}

export function streamSnapshot(s: Snapshot): StateSnapshot {
  return { type: "snapshot", ...s };
}
