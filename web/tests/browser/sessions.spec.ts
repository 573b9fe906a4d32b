import { expect, type Page, test } from "@playwright/test";
import { delta, fullData, SESSION_A, SESSION_B, SESSION_C, snapshot, template, view } from "../fixtures";
import { answeredCount, connect, expectBoardAt, heldCount, pushState, rpcCalls, screenshot, setServerState } from "./helpers";

function session(page: Page, id: string) {
  return page.locator(`li.session-node[data-session-id="${id}"]`);
}

test("the sessions panel lists the caller's sessions, a branch under its parent", async ({ page }) => {
  await connect(page);
  const panel = page.getByRole("region", { name: "Sessions" });
  await expect(panel.locator(".session-challenge")).toHaveText([
    "How might we help commuters eat well?",
    "How might we help commuters eat well? (lockers branch)",
    "Make the library quieter",
  ]);
  // The branch is drawn inside its parent's node.
  const branch = session(page, SESSION_A).locator(`ul.branches li[data-session-id="${SESSION_B}"]`);
  await expect(branch).toBeVisible();
  await expect(branch).toContainText("branch after define");
  await expect(session(page, SESSION_A).locator("> .session")).toContainText("2/5 phases");
  await expect(session(page, SESSION_A).locator("> .session")).toContainText("coach · define");
  await expect(session(page, SESSION_C).locator("> .session")).toContainText("Completed");
  await expect(session(page, SESSION_C).locator("> .session")).toContainText("5/5 phases");
  expect((await rpcCalls(page, "coach.list_sessions")).length).toBeGreaterThan(0);
});

test("a session expands to its phases, with and without prompts", async ({ page }) => {
  await connect(page);
  await pushState(page, delta(SESSION_A, 1, "data", fullData()), delta(SESSION_A, 2, "template", template()), delta(SESSION_A, 3, "view", view()));
  await expectBoardAt(page, SESSION_A, 3);
  const node = session(page, SESSION_A).locator("> .session");
  await node.locator(".session-main").click();
  const phases = node.getByTestId("phases");
  await expect(phases.locator(".phase-name")).toHaveText(["Empathize", "Define", "Ideate"]);
  await expect(phases.locator(".phase .status")).toHaveText(["Completed", "Completed", "Running"]);
  await expect(phases).toContainText("Two insights about rushed mornings.");
  await expect(phases.getByTestId("system-prompt")).toHaveCount(0);
  const first = (await rpcCalls(page, "coach.get_phase_outputs")).at(-1);
  expect(first?.request).toEqual({ session_id: SESSION_A, include_prompts: false });

  await phases.getByLabel("Show prompts").check();
  await expect(phases.getByTestId("system-prompt")).toHaveCount(3);
  await expect(phases.getByTestId("system-prompt").first()).toHaveText("You are the coach. Guide the user through the empathize phase.");
  await expect(phases.getByTestId("user-input").first()).toContainText("Challenge: help commuters eat well.");
  const second = (await rpcCalls(page, "coach.get_phase_outputs")).at(-1);
  expect(second?.request).toEqual({ session_id: SESSION_A, include_prompts: true });
  await phases.scrollIntoViewIfNeeded();
  await screenshot(page, "sessions-prompts");

  await phases.getByLabel("Show prompts").uncheck();
  await expect(phases.getByTestId("system-prompt")).toHaveCount(0);
});

test("the conversation, with and without steps, and older pages by `before`", async ({ page }) => {
  await connect(page);
  const node = session(page, SESSION_A).locator("> .session");
  await node.locator(".session-main").click();
  const conversation = node.getByTestId("conversation");
  const said = conversation.locator("li.entry.message .said");
  // The newest page: messages 7 … 26.
  await expect(said).toHaveCount(20);
  await expect(said.first()).toHaveText("message 7");
  await expect(said.last()).toHaveText("message 26");
  await expect(conversation.locator("li.entry.step")).toHaveCount(0);
  expect((await rpcCalls(page, "coach.get_session_conversation")).at(-1)?.request).toEqual({
    session_id: SESSION_A,
    include_steps: false,
    limit: 20,
  });

  await conversation.getByRole("button", { name: "Load older" }).click();
  await expect(said).toHaveCount(26);
  await expect(said.first()).toHaveText("message 1");
  expect((await rpcCalls(page, "coach.get_session_conversation")).at(-1)?.request).toEqual({
    session_id: SESSION_A,
    include_steps: false,
    limit: 20,
    before: 6,
  });
  await expect(conversation.getByRole("button", { name: "Load older" })).toHaveCount(0);

  await conversation.getByLabel("Show steps").check();
  await expect(conversation.locator("li.entry.step")).toHaveCount(3);
  // The newest page of 20 entries: messages 10 … 26 with the three steps between 24 and 25.
  const kinds = await conversation.locator("li.entry").evaluateAll((els) => els.map((e) => e.getAttribute("data-kind")));
  expect(kinds).toHaveLength(20);
  expect(kinds.slice(-6)).toEqual(["message", "tool_call", "tool_output", "handoff", "message", "message"]);
  await expect(conversation.locator('li.entry[data-kind="tool_call"]')).toContainText("add_idea");
  await expect(conversation.locator('li.entry[data-kind="tool_output"]')).toContainText("added idea-1");
  await expect(conversation.locator('li.entry[data-kind="handoff"]')).toContainText("coach → strategist");
  await expect(said.first()).toHaveText("message 10");
  expect((await rpcCalls(page, "coach.get_session_conversation")).at(-1)?.request).toEqual({
    session_id: SESSION_A,
    include_steps: true,
    limit: 20,
  });
});

test("Resume calls coach.resume_session with the id, then lists again; an error is one line", async ({ page }) => {
  await connect(page);
  await expect(page.locator(".session-challenge")).toHaveCount(3);
  const before = (await rpcCalls(page, "coach.list_sessions")).length;
  await session(page, SESSION_B).locator("> .session").getByRole("button", { name: "Resume" }).click();
  await expect(session(page, SESSION_B).locator("> .session .ok")).toHaveText("Resumed with the strategist, next: ideate.");
  expect((await rpcCalls(page, "coach.resume_session")).map((c) => c.request)).toEqual([{ session_id: SESSION_B }]);
  await expect.poll(async () => (await rpcCalls(page, "coach.list_sessions")).length).toBeGreaterThan(before);

  await session(page, SESSION_C).locator("> .session").getByRole("button", { name: "Resume" }).click();
  await expect(session(page, SESSION_C).getByRole("alert")).toHaveText(
    "That session is completed: branch it from one of its phases to carry on.",
  );
  expect((await rpcCalls(page, "coach.resume_session")).map((c) => c.request)).toEqual([
    { session_id: SESSION_B },
    { session_id: SESSION_C },
  ]);
});

test("an RPC error listing the sessions is shown as its one line", async ({ page }) => {
  await connect(page, { query: "?agent=none" });
  // No design session yet, so the list is not asked for again when the board's session changes.
  await setServerState(page, snapshot(null, 0));
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.failNext.set("coach.list_sessions", "the database did not answer; try again\nTraceback (most recent call last): …");
    fake.setAgent({ identity: "agent-coach", attributes: {} });
  });
  await expectBoardAt(page, "", 0);
  const panel = page.getByRole("region", { name: "Sessions" });
  await expect(panel.getByRole("alert")).toHaveText("the database did not answer; try again");
  await panel.getByRole("button", { name: "Refresh" }).click();
  await expect(panel.locator(".session-challenge")).toHaveCount(3);
  await expect(panel.getByRole("alert")).toHaveCount(0);
});

test("overlapping refreshes of the list: an older answer that comes last does not replace the newer", async ({ page }) => {
  await connect(page);
  const panel = page.getByRole("region", { name: "Sessions" });
  const challenges = panel.locator(".session-challenge");
  await expectBoardAt(page, SESSION_A, 0);
  // Listed when the agent came, and again when the board's session became A.
  await expect.poll(() => answeredCount(page, "coach.list_sessions")).toBe(2);
  await expect(challenges).toHaveCount(3);

  await page.evaluate(() => window.coachTest.fake.hold("coach.list_sessions"));
  // The board's session changes twice; each change lists again. The server's list
  // changed between the two calls.
  await pushState(page, { type: "snapshot", ...snapshot(SESSION_B, 1) });
  await expect.poll(() => heldCount(page, "coach.list_sessions")).toBe(1);
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    const list = window.coachTest.fixtures.sessionsList();
    fake.fixtures.sessions = {
      ...list,
      sessions: list.sessions.map((s) => (s.challenge === "Make the library quieter" ? { ...s, challenge: "A quieter library, renamed" } : s)),
    };
  });
  await pushState(page, { type: "snapshot", ...snapshot(SESSION_C, 1) });
  await expect.poll(() => heldCount(page, "coach.list_sessions")).toBe(2);
  const button = panel.getByRole("button", { name: /Refresh|Loading…/ });
  await expect(button).toHaveText("Loading…");

  // The newer answer first: shown, and the panel is no longer loading.
  await page.evaluate(() => window.coachTest.fake.releaseOne("coach.list_sessions", "newest"));
  await expect(challenges.last()).toHaveText("A quieter library, renamed");
  await expect(button).toHaveText("Refresh");
  // Then the older one: dropped.
  await page.evaluate(() => window.coachTest.fake.releaseOne("coach.list_sessions", "oldest"));
  await expect.poll(() => answeredCount(page, "coach.list_sessions")).toBe(4);
  // One more call, which fails: once its line is shown, the older answer has long been
  // handled (they update the same panel, in order).
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.release("coach.list_sessions");
    fake.failNext.set("coach.list_sessions", "the database did not answer");
  });
  await button.click();
  await expect(panel.getByRole("alert")).toHaveText("the database did not answer");
  await expect(challenges).toHaveText([
    "How might we help commuters eat well?",
    "How might we help commuters eat well? (lockers branch)",
    "A quieter library, renamed",
  ]);
});

test("an older page that comes after the steps toggle changed is dropped", async ({ page }) => {
  await connect(page);
  const node = session(page, SESSION_A).locator("> .session");
  await node.locator(".session-main").click();
  const conversation = node.getByTestId("conversation");
  const entries = conversation.locator("li.entry");
  await expect(entries).toHaveCount(20);

  await page.evaluate(() => window.coachTest.fake.hold("coach.get_session_conversation"));
  await conversation.getByRole("button", { name: "Load older" }).click();
  await expect.poll(() => heldCount(page, "coach.get_session_conversation")).toBe(1);
  await conversation.getByLabel("Show steps").check();
  await expect.poll(() => heldCount(page, "coach.get_session_conversation")).toBe(2);

  // The page with steps first, then the older page of the messages-only view.
  await page.evaluate(() => window.coachTest.fake.releaseOne("coach.get_session_conversation", "newest"));
  await expect(conversation.locator("li.entry.step")).toHaveCount(3);
  await page.evaluate(() => window.coachTest.fake.releaseOne("coach.get_session_conversation", "oldest"));
  await expect.poll(() => answeredCount(page, "coach.get_session_conversation")).toBe(3);
  // A later call that fails: once its line is shown, the older page has been handled.
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.release("coach.get_session_conversation");
    fake.failNext.set("coach.get_session_conversation", "the database did not answer");
  });
  await conversation.getByRole("button", { name: "Load older" }).click();
  await expect(conversation.getByRole("alert")).toHaveText("the database did not answer");
  await expect(entries).toHaveCount(20);
  await expect(conversation.locator("li.entry.message .said").first()).toHaveText("message 10");
  await expect(conversation.getByRole("button", { name: "Load older" })).toBeEnabled();
});
