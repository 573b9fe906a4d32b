import { describe, expect, it } from "vitest";
import { emptyTranscript, transcriptReducer, type TranscriptAction, type TranscriptState } from "./transcript";

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
