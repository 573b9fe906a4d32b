import { expect, test } from "@playwright/test";
import {
  BRIEF,
  data,
  delta,
  emptySearch,
  fullData,
  IDEAS,
  INSIGHTS,
  SESSION_A,
  SESSION_B,
  snapshot,
  template,
  view,
} from "../fixtures";
import {
  answeredCount,
  CLOCK_START,
  connect,
  expectBoardAt,
  pauseClock,
  pushState,
  rpcCalls,
  screenshot,
  setServerState,
} from "./helpers";

test("the start screen asks for a name and shows the server's one-line error", async ({ page }) => {
  await page.route("**/api/token", (route) =>
    route.fulfill({
      status: 400,
      contentType: "application/json",
      body: JSON.stringify({ error: "An identity can have at most 255 characters (this one has 300)." }),
    }),
  );
  await page.goto("/tests/harness/index.html");
  await expect(page.getByLabel("Your name")).toBeFocused();
  await screenshot(page, "start-screen");
  await page.getByRole("button", { name: "Connect" }).click();
  await expect(page.getByRole("alert")).toHaveText("Enter your name to start.");
  await page.getByLabel("Your name").fill("x".repeat(300));
  await page.getByRole("button", { name: "Connect" }).click();
  await expect(page.getByRole("alert")).toHaveText("An identity can have at most 255 characters (this one has 300).");
  await expect(page.getByRole("region", { name: "Design board" })).toHaveCount(0);
});

test("an identity the server refuses: its 400 line is shown under the name field", async ({ page }) => {
  // What POST /api/token answers for an identity check_identity refuses.
  await page.route("**/api/token", (route) =>
    route.fulfill({
      status: 400,
      contentType: "application/json",
      body: JSON.stringify({ error: "An identity must be plain text: no control characters and nothing that is not UTF-8." }),
    }),
  );
  await page.goto("/tests/harness/index.html");
  const name = page.getByLabel("Your name");
  await name.fill("ada");
  await page.getByRole("button", { name: "Connect" }).click();
  const line = page.getByRole("alert");
  await expect(line).toHaveText("An identity must be plain text: no control characters and nothing that is not UTF-8.");
  await expect(name).toHaveAttribute("aria-invalid", "true");
  await expect(name).toHaveAttribute("aria-describedby", (await line.getAttribute("id")) ?? "no id");
  const field = (await name.boundingBox())!;
  const below = (await line.boundingBox())!;
  expect(below.y).toBeGreaterThanOrEqual(field.y + field.height);
  await expect(name).toBeEnabled();
  await expect(name).toHaveValue("ada");
});

test("scripted deltas render the board, with the agent and phase from attributes", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0); // the first fresh read
  const board = page.getByTestId("board");
  await expect(board.getByText("No challenge yet")).toBeVisible();

  await pushState(
    page,
    delta(SESSION_A, 1, "data", data({ challenge: "How might we help commuters eat well?" })),
    delta(SESSION_A, 2, "data", data({ challenge: "How might we help commuters eat well?", insights: INSIGHTS })),
    delta(SESSION_A, 3, "data", data({ challenge: "How might we help commuters eat well?", insights: INSIGHTS, ideas: IDEAS })),
    delta(SESSION_A, 4, "data", fullData()),
    delta(SESSION_A, 5, "template", template(BRIEF)),
    delta(SESSION_A, 6, "view", view({ agent: "strategist", phase_id: "ideate" })),
  );
  await expectBoardAt(page, SESSION_A, 6);
  await expect(page.getByTestId("challenge")).toHaveText("How might we help commuters eat well?");
  const insights = page.getByRole("list", { name: "Insights" });
  await expect(insights.getByRole("button")).toHaveText([/Commuters skip breakfast/, /Parents plan meals/]);
  const ideas = page.getByRole("list", { name: "Ideas" });
  await expect(ideas.getByRole("button")).toHaveCount(2);
  await expect(ideas.locator('[data-item-id="idea-1"]')).toHaveAttribute("data-selected", "true");
  await expect(ideas.locator('[data-item-id="idea-1"]')).toContainText("Selected");
  await expect(ideas.locator('[data-item-id="idea-2"]')).toHaveAttribute("data-selected", "false");
  await expect(page.getByTestId("selected-idea")).toContainText("Breakfast lockers");
  await expect(page.getByTestId("score-desirability")).toContainText("4/5");
  await expect(page.getByTestId("score-feasibility")).toContainText("3/5");
  await expect(page.getByTestId("score-viability")).toContainText("5/5");
  await expect(page.getByTestId("evaluation")).toContainText("Loved by testers");
  await expect(page.getByTestId("search")).toContainText("Coffee cart on the platform");
  // The brief is rendered as markdown: headings, a list, bold.
  const brief = page.locator(".brief .markdown");
  await expect(brief.getByRole("heading", { name: "Design brief" })).toBeVisible();
  await expect(brief.locator("ul > li")).toHaveText(["Breakfast lockers", "Sunday meal kits"]);
  await expect(brief.locator("ol > li")).toHaveCount(2);
  await expect(brief.locator("strong")).toHaveText("commuters");
  // Agent and phase: the view zone until the participant's attributes say otherwise.
  await expect(page.getByTestId("active-agent")).toContainText("Strategist");
  await expect(page.getByTestId("active-phase")).toContainText("Ideate");
  await page.evaluate(() => window.coachTest.fake.setAgentAttributes({ "coach.agent": "evaluator", "coach.phase": "evaluate", "lk.agent.state": "thinking" }));
  await expect(page.getByTestId("active-agent")).toContainText("Evaluator");
  await expect(page.getByTestId("active-phase")).toContainText("Evaluate");
  await expect(page.getByTestId("agent-state")).toHaveText("Thinking");

  // An empty search changes no zone: the old results stay, the step advances.
  await pushState(page, emptySearch(SESSION_A, 7, "flying cars"));
  await expectBoardAt(page, SESSION_A, 7);
  await expect(page.getByTestId("search-empty")).toHaveText("Nothing found for “flying cars”.");
  await expect(page.getByTestId("search")).toContainText("Coffee cart on the platform");
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.setAgentAttributes({ "lk.agent.state": "speaking" });
    const turns: Array<[string, string, string]> = [
      ["ada", "SG_1", "I'd like to help commuters eat better in the morning."],
      ["agent-coach", "SG_2", "Good challenge. What did you notice about their mornings?"],
      ["ada", "SG_3", "They skip breakfast when the train is late."],
      ["agent-coach", "SG_4", "I've added that as an insight. Shall we look for ideas?"],
      ["ada", "SG_5", "Yes — and search past work for breakfast."],
    ];
    for (const [who, id, text] of turns) {
      fake.sendStream("lk.transcription", who, text, { "lk.segment_id": id, "lk.transcription_final": "true" });
    }
    fake.sendStream("lk.transcription", "agent-coach", "Here is how the ideas compare", { "lk.segment_id": "SG_6", "lk.transcription_final": "false" });
  });
  await expect(page.getByRole("list", { name: "Transcript" }).locator("li.turn")).toHaveCount(6);
  await screenshot(page, "board");
});

test("a gap asks for a fresh read and shows the snapshot, never a mix; a duplicate is ignored", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await pushState(page, delta(SESSION_A, 1, "data", data({ challenge: "Step one" })));
  await expectBoardAt(page, SESSION_A, 1);
  // The duplicate of step 1 changes nothing.
  await pushState(page, delta(SESSION_A, 1, "data", data({ challenge: "A duplicate" })));
  await pushState(page, delta(SESSION_A, 2, "data", data({ challenge: "Step two" })));
  await expectBoardAt(page, SESSION_A, 2);
  await expect(page.getByTestId("challenge")).toHaveText("Step two");
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(1);

  // Steps 3 and 4 are lost; 5 arrives. The server is at 4 now.
  await setServerState(page, snapshot(SESSION_A, 4, { data: data({ challenge: "Step four", insights: INSIGHTS }) }));
  await page.evaluate(() => window.coachTest.fake.holdSnapshots());
  await pushState(page, delta(SESSION_A, 5, "data", data({ challenge: "Step five", insights: INSIGHTS, ideas: IDEAS })));
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(2);
  // While the read's snapshot is on its way, the board still shows step 2 whole.
  await expectBoardAt(page, SESSION_A, 2);
  await expect(page.getByTestId("challenge")).toHaveText("Step two");
  await expect(page.getByText("Updating…")).toBeVisible();
  await page.evaluate(() => window.coachTest.fake.releaseSnapshots());
  await expectBoardAt(page, SESSION_A, 5);
  await expect(page.getByTestId("challenge")).toHaveText("Step five");
  await expect(page.getByRole("list", { name: "Ideas" }).getByRole("button")).toHaveCount(2);
  await expect(page.getByText("Updating…")).toHaveCount(0);
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(2);
});

test("a resume switches the session: the new one's deltas wait for its snapshot", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await pushState(page, delta(SESSION_A, 1, "data", data({ challenge: "Session A" })));
  await expect(page.getByTestId("challenge")).toHaveText("Session A");
  await setServerState(page, snapshot(SESSION_B, 8, { data: data({ challenge: "Session B", ideas: IDEAS }), view: view({ agent: "strategist" }) }));
  await pushState(page, delta(SESSION_B, 9, "data", data({ challenge: "Session B, step 9", ideas: IDEAS })));
  await expectBoardAt(page, SESSION_B, 9);
  await expect(page.getByTestId("challenge")).toHaveText("Session B, step 9");
  await expect(page.getByTestId("active-agent")).toContainText("Strategist");
});

test("a reconnect reads the board afresh", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await setServerState(page, snapshot(SESSION_A, 3, { data: fullData() }));
  await page.evaluate(() => window.coachTest.fake.reconnect());
  await expectBoardAt(page, SESSION_A, 3);
  await expect(page.getByTestId("challenge")).toHaveText("How might we help commuters eat well?");
});

test("the board waits for the agent before its first read", async ({ page }) => {
  await connect(page, { query: "?agent=none" });
  await expect(page.getByText("Waiting for the coach to share the board")).toBeVisible();
  await expect(page.getByTestId("agent-state")).toHaveText("Waiting for the coach");
  expect(await rpcCalls(page)).toHaveLength(0);
  await setServerState(page, snapshot(SESSION_A, 2, { data: data({ challenge: "Joined" }) }));
  await page.evaluate(() => window.coachTest.fake.setAgent({ identity: "agent-coach", attributes: { "lk.agent.state": "listening" } }));
  await expect(page.getByTestId("challenge")).toHaveText("Joined");
  await expect(page.getByTestId("agent-state")).toHaveText("Listening");
});

test("clicking an idea sends coach.focus with its id; the view delta highlights it", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await pushState(page, delta(SESSION_A, 1, "data", fullData()));
  const idea = page.locator('[data-item-id="idea-2"]');
  await idea.click();
  await expect.poll(async () => (await rpcCalls(page, "coach.focus")).map((c) => c.request)).toEqual([{ item: "idea-2" }]);
  await expect(idea).toHaveAttribute("aria-pressed", "false"); // the server decides
  await pushState(page, delta(SESSION_A, 2, "view", view({ focus: { kind: "idea", id: "idea-2" } }), { trigger: "user_action", source: "user", path: "view.focus" }));
  await expect(idea).toHaveAttribute("aria-pressed", "true");
  await expect(idea).toHaveClass(/focused/);
  // An insight too; an error is one line.
  await page.evaluate(() => window.coachTest.fake.failNext.set("coach.focus", "no such item"));
  await page.locator('[data-item-id="ins-1"]').click();
  await expect(page.getByTestId("focus-error")).toHaveText("no such item");
  expect((await rpcCalls(page, "coach.focus")).map((c) => c.request)).toEqual([{ item: "idea-2" }, { item: "ins-1" }]);
});

test("a fresh read whose snapshot comes after the answer: the board waits for it", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await setServerState(page, snapshot(SESSION_A, 3, { data: data({ challenge: "Read at three" }) }));
  await page.evaluate(() => {
    window.coachTest.fake.holdSnapshots();
    window.coachTest.fake.reconnect();
  });
  // The answer ({session_id, step}) has been given back; the snapshot is still held.
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(2);
  await expectBoardAt(page, SESSION_A, 0);
  await expect(page.getByText("Updating…")).toBeVisible();
  await page.evaluate(() => window.coachTest.fake.releaseSnapshots());
  await expectBoardAt(page, SESSION_A, 3);
  await expect(page.getByTestId("challenge")).toHaveText("Read at three");
  await expect(page.getByText("Updating…")).toHaveCount(0);
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(2);
});

test("a fresh read whose snapshot comes before the answer: shown at once, over with the answer", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await setServerState(page, snapshot(SESSION_A, 3, { data: data({ challenge: "Read at three" }) }));
  await page.evaluate(() => {
    window.coachTest.fake.hold("coach.get_state");
    window.coachTest.fake.reconnect();
  });
  // The snapshot is on the stream; the answer is held.
  await expectBoardAt(page, SESSION_A, 3);
  await expect(page.getByTestId("challenge")).toHaveText("Read at three");
  await expect(page.getByText("Updating…")).toBeVisible();
  expect(await answeredCount(page, "coach.get_state")).toBe(1);
  await page.evaluate(() => window.coachTest.fake.release("coach.get_state"));
  await expect(page.getByText("Updating…")).toHaveCount(0);
  await expectBoardAt(page, SESSION_A, 3);
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(2);
});

test("a coach.state message from another participant is not shown", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await page.evaluate(
    ([forged, forgedSnapshot]) => {
      const fake = window.coachTest.fake;
      fake.sendStream("coach.state", "mallory", JSON.stringify(forged));
      fake.sendStream("coach.state", "ada", JSON.stringify(forgedSnapshot));
    },
    [
      delta(SESSION_A, 1, "data", data({ challenge: "Forged by mallory" })),
      { type: "snapshot", ...snapshot(SESSION_B, 9, { data: data({ challenge: "Forged snapshot" }) }) },
    ],
  );
  // The agent's own step 1 comes after them: had the forged step 1 been taken, this one
  // would be a duplicate and not shown.
  await pushState(page, delta(SESSION_A, 1, "data", data({ challenge: "From the coach" })));
  await expectBoardAt(page, SESSION_A, 1);
  await expect(page.getByTestId("challenge")).toHaveText("From the coach");
});

test("the worker died and another agent resumed the session behind it: its board replaces the old one", async ({ page }) => {
  await connect(page);
  await expectBoardAt(page, SESSION_A, 0);
  await pushState(
    page,
    delta(SESSION_A, 1, "data", data({ challenge: "Eat well" })),
    delta(SESSION_A, 2, "data", data({ challenge: "Eat well", ideas: IDEAS })),
    delta(SESSION_A, 3, "template", template(BRIEF)),
  );
  await expectBoardAt(page, SESSION_A, 3);
  // Steps 2 and 3 were published but never committed: the new agent resumes at 1.
  await setServerState(page, snapshot(SESSION_A, 1, { data: data({ challenge: "Eat well" }) }));
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.holdSnapshots();
    fake.setAgent(null);
    fake.setAgent({ identity: "agent-coach-2", attributes: { "lk.agent.state": "listening" } });
  });
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(2);
  // A late message of the dead worker is not read.
  await page.evaluate((late) => {
    window.coachTest.fake.sendStream("coach.state", "agent-coach", JSON.stringify(late));
  }, delta(SESSION_A, 4, "data", data({ challenge: "From the dead worker" })));
  await page.evaluate(() => window.coachTest.fake.releaseSnapshots());
  await expectBoardAt(page, SESSION_A, 1);
  await expect(page.getByTestId("challenge")).toHaveText("Eat well");
  await expect(page.getByRole("list", { name: "Ideas" })).toHaveCount(0);
  await expect(page.locator(".brief .markdown")).toHaveCount(0);
  // The new agent carries on from its own step.
  await pushState(page, delta(SESSION_A, 2, "data", data({ challenge: "Eat well, again" })));
  await expectBoardAt(page, SESSION_A, 2);
  await expect(page.getByTestId("challenge")).toHaveText("Eat well, again");
  await expect(page.getByText("Updating…")).toHaveCount(0);
});

test("an agent without coach.get_state: one line, and it is not asked again", async ({ page }) => {
  await page.clock.install({ time: CLOCK_START });
  await connect(page, { query: "?agent=none" });
  await pauseClock(page);
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.failNext.set("coach.get_state", { message: "Method not supported at destination", code: 1400 });
    fake.setAgent({ identity: "agent-old", attributes: {} });
  });
  await expect(page.getByTestId("board-unsupported")).toHaveText("This coach does not send its board; update the worker.");
  await expect(page.getByText("Waiting for the coach to share the board")).toHaveCount(0);
  await page.clock.runFor(120_000);
  await page.evaluate(() => window.coachTest.fake.reconnect());
  await page.clock.runFor(120_000);
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(1);
  // A new agent (an updated worker) is asked.
  await page.evaluate(() => window.coachTest.fake.setAgent({ identity: "agent-new", attributes: {} }));
  await expectBoardAt(page, SESSION_A, 0);
  await expect(page.getByTestId("board-unsupported")).toHaveCount(0);
  expect(await rpcCalls(page, "coach.get_state")).toHaveLength(2);
});

test("a failed fresh read is asked again after 1 s, then 2 s; a lost snapshot too; nothing once the view is gone", async ({ page }) => {
  await page.clock.install({ time: CLOCK_START });
  await connect(page, { query: "?agent=none" });
  await pauseClock(page);
  const getStateCalls = async () => (await rpcCalls(page, "coach.get_state")).length;
  const fail = () => page.evaluate(() => window.coachTest.fake.failNext.set("coach.get_state", "the store is busy"));

  await fail();
  await page.evaluate(() => window.coachTest.fake.setAgent({ identity: "agent-coach", attributes: {} }));
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(1);
  await fail();
  await page.clock.runFor(999);
  expect(await getStateCalls()).toBe(1);
  await page.clock.runFor(1);
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(2);
  await page.clock.runFor(1_999);
  expect(await getStateCalls()).toBe(2);
  await page.clock.runFor(1);
  await expectBoardAt(page, SESSION_A, 0);
  expect(await getStateCalls()).toBe(3);
  // Read: no timer is left to ask again.
  await page.clock.runFor(120_000);
  expect(await getStateCalls()).toBe(3);

  // The answer comes, its snapshot never does: asked again 10 s after the answer, then 1 s later.
  await setServerState(page, snapshot(SESSION_A, 2, { data: data({ challenge: "Read at two" }) }));
  await page.evaluate(() => {
    window.coachTest.fake.holdSnapshots();
    window.coachTest.fake.reconnect();
  });
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(4);
  await page.clock.runFor(9_999);
  expect(await getStateCalls()).toBe(4);
  await page.clock.runFor(1);
  await page.clock.runFor(1_000);
  await expect.poll(getStateCalls).toBe(5);

  // A failure, then the view goes away before the retry: nothing is asked after it.
  await expectBoardAt(page, SESSION_A, 0);
  await page.evaluate(() => window.coachTest.fake.releaseSnapshots());
  await expectBoardAt(page, SESSION_A, 2);
  await expect(page.getByText("Updating…")).toHaveCount(0);
  await fail();
  await page.evaluate(() => window.coachTest.fake.reconnect());
  await expect.poll(() => answeredCount(page, "coach.get_state")).toBe(6);
  await page.getByRole("button", { name: "Disconnect" }).click();
  await expect(page.getByLabel("Your name")).toBeVisible();
  await page.clock.runFor(120_000);
  expect(await getStateCalls()).toBe(6);
});
