// Scripted coach data shared by the unit tests, the fake room and the browser tests.

import { emptyData, type Snapshot } from "../src/state";
import type {
  ConversationEntry,
  DataZone,
  Delta,
  ListSessionsResponse,
  PhaseOutputView,
  ResumeSessionResponse,
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
  return { ...emptyData(), ...overrides };
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

// --- the sessions panel's fixtures ------------------------------------------------

export function sessionsList(): ListSessionsResponse {
  return {
    more: false,
    sessions: [
      {
        id: SESSION_B,
        challenge: "How might we help commuters eat well? (lockers branch)",
        status: "in_progress",
        created_at: "2026-05-02T09:00:00Z",
        updated_at: "2026-05-02T10:30:00Z",
        phases_done: 3,
        phases_total: 5,
        current_agent: "strategist",
        current_phase_id: "ideate",
        parent_session_id: SESSION_A,
        branched_from_phase: "define",
      },
      {
        id: SESSION_A,
        challenge: "How might we help commuters eat well?",
        status: "in_progress",
        created_at: "2026-05-01T08:00:00Z",
        updated_at: "2026-05-01T09:15:00Z",
        phases_done: 2,
        phases_total: 5,
        current_agent: "coach",
        current_phase_id: "define",
        parent_session_id: null,
        branched_from_phase: null,
      },
      {
        id: SESSION_C,
        challenge: "Make the library quieter",
        status: "completed",
        created_at: "2026-04-20T08:00:00Z",
        updated_at: "2026-04-21T17:45:00Z",
        phases_done: 5,
        phases_total: 5,
        current_agent: null,
        current_phase_id: null,
        parent_session_id: null,
        branched_from_phase: null,
      },
    ],
  };
}

function phase(phase_id: string, phase_name: string, status: PhaseOutputView["status"], output: string | null): PhaseOutputView {
  return {
    phase_id,
    phase_name,
    status,
    output,
    error: null,
    system_prompt: `You are the coach. Guide the user through the ${phase_name.toLowerCase()} phase.`,
    user_input: `Challenge: help commuters eat well. Phase: ${phase_name}.`,
    created_at: "2026-05-01T08:00:00Z",
    updated_at: "2026-05-01T09:00:00Z",
    truncated: [],
  };
}

export function phasesFor(): Record<string, PhaseOutputView[]> {
  const a = [
    phase("empathize", "Empathize", "completed", "Two insights about rushed mornings."),
    phase("define", "Define", "completed", "How might we help commuters eat well?"),
    phase("ideate", "Ideate", "running", null),
  ];
  return { [SESSION_A]: a, [SESSION_B]: a, [SESSION_C]: [phase("empathize", "Empathize", "completed", "Noise at lunch.")] };
}

function message(i: number, role: "user" | "assistant", text: string): ConversationEntry {
  return {
    kind: "message",
    role,
    text,
    tool: null,
    is_error: null,
    from_agent: null,
    to_agent: null,
    interrupted: false,
    phase_id: "define",
    message_id: i,
    step: i * 10,
    created_at: "2026-05-01T08:00:00Z",
    truncated: false,
  };
}

function step(i: number, kind: "tool_call" | "tool_output" | "handoff", extra: Partial<ConversationEntry>): ConversationEntry {
  return {
    kind,
    role: null,
    text: null,
    tool: null,
    is_error: null,
    from_agent: null,
    to_agent: null,
    interrupted: false,
    phase_id: "define",
    message_id: null,
    step: i,
    created_at: null,
    truncated: false,
    ...extra,
  };
}

/** 26 messages (message 1 … message 26) with tool steps and a handoff between the last ones. */
export function conversationFor(): Record<string, ConversationEntry[]> {
  const entries: ConversationEntry[] = [];
  for (let i = 1; i <= 26; i++) {
    entries.push(message(i, i % 2 ? "user" : "assistant", `message ${i}`));
    if (i === 24) {
      entries.push(step(i * 10 + 1, "tool_call", { tool: "add_idea", text: '{"title":"Breakfast lockers"}' }));
      entries.push(step(i * 10 + 2, "tool_output", { tool: "add_idea", text: "added idea-1", is_error: false }));
      entries.push(step(i * 10 + 3, "handoff", { from_agent: "coach", to_agent: "strategist" }));
    }
  }
  return { [SESSION_A]: entries, [SESSION_B]: entries.slice(0, 4), [SESSION_C]: entries.slice(0, 2) };
}

export function resumeAnswers(): Record<string, ResumeSessionResponse | { error: string }> {
  return {
    [SESSION_A]: { session_id: SESSION_A, agent: "coach", next_phase_id: "ideate", challenge: "How might we help commuters eat well?" },
    [SESSION_B]: { session_id: SESSION_B, agent: "strategist", next_phase_id: "ideate", challenge: null },
    [SESSION_C]: { error: "That session is completed: branch it from one of its phases to carry on." },
  };
}

// --- self-service -------------------------------------------------------------------

/** What coach.export_my_data sends for ada: longer than one of the fake's chunks. */
export function exportText(): string {
  const sessions = sessionsList().sessions.map((s) => ({ session: { id: s.id, design_challenge: s.challenge } }));
  return `${JSON.stringify({ user: { identity: "ada" }, person: { step: 1, value: { facts: [] } }, person_deltas: [], sessions })}\n`;
}
