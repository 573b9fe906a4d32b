// TEMPORARY copies of the state stream's types (README, "The room: state stream and RPC"),
// until src/rpc.ts is regenerated with them; then this file goes and imports use "./rpc".

import type { CoachRpc } from "./rpc";

export type Zone = "data" | "template" | "view";

export interface Action {
  type: string;
  tool: string | null;
  params: { [k: string]: unknown };
}

export interface ResultMeta {
  count: number | null;
  fields: string[];
}

export interface Delta {
  turn_id: string | null;
  step: number;
  trigger: "user_query" | "user_action" | "system";
  source: "llm" | "user" | "system";
  actor_id: string | null;
  delta_type: "add" | "update" | "remove";
  path: string;
  action: Action;
  result: ResultMeta;
}

export interface Insight {
  id: string;
  text: string;
  phase_id: string | null;
}

export interface Idea {
  id: string;
  title: string;
  description: string;
}

export interface Evaluation {
  desirability: number;
  feasibility: number;
  viability: number;
  summary: string;
}

export interface SearchResult {
  kind: "insight" | "idea";
  text: string;
  session_id: string;
}

export interface Search {
  query: string | null;
  results: SearchResult[];
}

export interface DataZone {
  challenge: string | null;
  insights: Insight[];
  ideas: Idea[];
  selected_idea_id: string | null;
  evaluation: Evaluation | null;
  search: Search;
}

export interface BoardInsight {
  id: string;
  text: string;
  focused: boolean;
}

export interface BoardIdea {
  id: string;
  title: string;
  description: string;
  selected: boolean;
  focused: boolean;
}

export interface Board {
  challenge: string | null;
  insights: BoardInsight[];
  ideas: BoardIdea[];
  evaluation: Evaluation | null;
  search: Search;
  changed: string[];
}

export interface TemplateZone {
  markdown: string;
  request: string | null;
  board: Board;
}

export interface Focus {
  kind: "insight" | "idea";
  id: string;
}

export interface StackEntry {
  agent: string;
  phase_id: string | null;
}

export interface ViewZone {
  agent: "coach" | "strategist" | "evaluator";
  phase_id: string | null;
  focus: Focus | null;
  stack: StackEntry[];
}

export interface StateDelta {
  type: "delta";
  session_id: string;
  step: number;
  zone: Zone | null;
  delta: Delta;
  value: DataZone | TemplateZone | ViewZone | null;
}

export interface StateSnapshot {
  type: "snapshot";
  session_id: string | null;
  step: number;
  data: DataZone;
  template: TemplateZone | null;
  view: ViewZone | null;
}

export type StateMessage = StateDelta | StateSnapshot;

// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface GetStateRequest {}

export interface GetStateResponse {
  session_id: string | null;
  step: number;
}

export type CoachMethods = CoachRpc & {
  "coach.get_state": { request: GetStateRequest; response: GetStateResponse };
};
