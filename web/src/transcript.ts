// The live transcript: segments of user and agent speech, typed turns, and the agents'
// steps (tool calls and handoffs, from coach.steps), which the view shows on request.
//
// A transcription segment arrives as one or more text streams with the same segment id:
// an agent's segment grows chunk by chunk in one stream; a user's interim text is re-sent
// whole in a new stream each time. Either way the segment is updated in place.

import type { StepMessage } from "./rpc";

export type Speaker = "user" | "agent" | "step";

export interface Segment {
  id: string;
  speaker: Speaker;
  text: string;
  /** The final text (`lk.transcription_final`), or a typed turn. */
  final: boolean;
  /** Typed in the text box rather than spoken. */
  typed: boolean;
}

export interface TranscriptState {
  segments: Segment[];
}

export type TranscriptAction =
  | { type: "segment"; id: string; speaker: Speaker; text: string; final: boolean }
  | { type: "typed"; id: string; text: string }
  | { type: "step"; id: string; text: string };

/** The transcript keeps this many segments, the newest. */
export const MAX_SEGMENTS = 300;

export const emptyTranscript: TranscriptState = { segments: [] };

export function transcriptReducer(state: TranscriptState, action: TranscriptAction): TranscriptState {
  const segment: Segment =
    action.type === "typed"
      ? { id: action.id, speaker: "user", text: action.text, final: true, typed: true }
      : action.type === "step"
        ? { id: action.id, speaker: "step", text: action.text, final: true, typed: false }
        : { id: action.id, speaker: action.speaker, text: action.text, final: action.final, typed: false };
  const index = state.segments.findIndex((s) => s.id === segment.id);
  if (index >= 0) {
    const old = state.segments[index]!;
    // A final segment is not turned back into an interim one by a late stream.
    const next = { ...segment, final: segment.final || (old.final && old.text === segment.text) };
    const segments = state.segments.slice();
    segments[index] = next;
    return { segments };
  }
  const segments = [...state.segments, segment];
  return { segments: segments.slice(Math.max(0, segments.length - MAX_SEGMENTS)) };
}

/** A coach.steps message, or null when the text is not one. */
export function parseStepMessage(text: string): StepMessage | null {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof raw !== "object" || raw === null) return null;
  const m = raw as Record<string, unknown>;
  if (m["type"] === "tool" && typeof m["tool"] === "string" && typeof m["arguments"] === "string" && typeof m["ok"] === "boolean")
    return m as unknown as StepMessage;
  if (m["type"] === "handoff" && typeof m["to_agent"] === "string" && typeof m["from_agent"] === "string")
    return m as unknown as StepMessage;
  return null;
}

/** A step as one line of the transcript. */
export function describeStep(step: StepMessage): string {
  if (step.type === "tool") return `${step.tool}(${step.arguments}) → ${step.ok ? "ok" : "failed"}`;
  return `handoff: ${step.from_agent} → ${step.to_agent}`;
}
