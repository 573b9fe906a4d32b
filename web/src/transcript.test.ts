import { describe, expect, it } from "vitest";
import {
  describeStep,
  emptyTranscript,
  parseStepMessage,
  transcriptReducer,
  type TranscriptAction,
  type TranscriptState,
} from "./transcript";

const run = (...actions: TranscriptAction[]): TranscriptState => actions.reduce(transcriptReducer, emptyTranscript);

describe("transcriptReducer", () => {
  it("updates a segment in place while it grows, in arrival order", () => {
    const state = run(
      { type: "segment", id: "s1", speaker: "user", text: "I want", final: false },
      { type: "segment", id: "s2", speaker: "agent", text: "Hello", final: false },
      { type: "segment", id: "s1", speaker: "user", text: "I want to eat well", final: true },
    );
    expect(state.segments.map((s) => [s.id, s.text, s.final])).toEqual([
      ["s1", "I want to eat well", true],
      ["s2", "Hello", false],
    ]);
  });

  it("adds a typed turn as a final user segment", () => {
    const state = run({ type: "typed", id: "typed-1", text: "Add an idea" });
    expect(state.segments[0]).toEqual({ id: "typed-1", speaker: "user", text: "Add an idea", final: true, typed: true });
  });
});

describe("steps (coach.steps)", () => {
  it("adds a step as a final segment of its own, in arrival order", () => {
    const state = run(
      { type: "segment", id: "s1", speaker: "user", text: "Bike parking", final: true },
      { type: "step", id: "step-1", text: "add_insight({}) → ok" },
    );
    expect(state.segments.map((s) => [s.speaker, s.text, s.final])).toEqual([
      ["user", "Bike parking", true],
      ["step", "add_insight({}) → ok", true],
    ]);
  });

  it("reads tool and handoff messages, and refuses anything else", () => {
    const tool = parseStepMessage('{"type":"tool","tool":"add_idea","arguments":"{\\"title\\":\\"Racks\\"}","ok":false}');
    expect(tool && describeStep(tool)).toBe('add_idea({"title":"Racks"}) → failed');
    const handoff = parseStepMessage('{"type":"handoff","from_agent":"design_coach","to_agent":"design_strategist"}');
    expect(handoff && describeStep(handoff)).toBe("handoff: design_coach → design_strategist");
    for (const bad of ["not json", "[]", '{"type":"tool","tool":"x"}', '{"type":"handoff","to_agent":3}', '{"type":"handoff","from_agent":null,"to_agent":"x"}', '{"type":"other"}']) {
      expect(parseStepMessage(bad)).toBeNull();
    }
  });
});
