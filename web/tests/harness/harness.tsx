// The browser tests' page: the real App over a FakeRoom, with a handle on window.
// The token request is the real one (fetchToken), answered by the test's route.
//
// Query: ?agent=none  the agent has not joined yet

import { createRoot } from "react-dom/client";
import { App } from "../../src/App";
import { fetchToken } from "../../src/livekitRoom";
import type { Connect } from "../../src/room";
import "../../src/styles.css";
import { FakeRoom } from "../fake-room";
import * as fixtures from "../fixtures";

const params = new URLSearchParams(location.search);
const fake = new FakeRoom(
  {
    sessions: fixtures.sessionsList(),
    phases: fixtures.phasesFor(),
    conversation: fixtures.conversationFor(),
    resume: fixtures.resumeAnswers(),
    state: fixtures.snapshot(fixtures.SESSION_A, 0),
    exportText: fixtures.exportText(),
    exportChunk: 64,
  },
  params.get("agent") === "none" ? null : undefined,
);

const handle = { fake, fixtures, tokenRequests: [] as string[] };
declare global {
  interface Window {
    coachTest: typeof handle;
  }
}
window.coachTest = handle;

const connect: Connect = async (identity) => {
  const token = await fetchToken(identity);
  handle.tokenRequests.push(identity);
  fake.localIdentity = token.identity;
  return fake;
};

createRoot(document.getElementById("root")!).render(<App connect={connect} />);
