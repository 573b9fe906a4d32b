import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { BranchFromHere, branchedLine } from "./BranchFromHere";
import type { CoachRoom } from "./room";

describe("BranchFromHere", () => {
  it("offers the action and asks nothing before it is confirmed", () => {
    const room = {} as CoachRoom; // any call on it would throw: none is made by rendering
    const html = renderToStaticMarkup(
      <BranchFromHere room={room} sessionId="s1" messageId={7} onBranched={async () => undefined} />,
    );
    expect(html).toContain(">Branch from here</button>");
    expect(html).not.toContain("alertdialog");
  });

  it("says where the branch carries on, in the person's words", () => {
    expect(branchedLine({ agent: "strategist", next_phase_id: "problem_statement" })).toBe(
      "Branched: a new session carries on from here with the strategist, next: problem statement. This one stays as it is.",
    );
  });
});
