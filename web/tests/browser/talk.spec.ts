import { expect, test } from "@playwright/test";
import { connect, screenshot } from "./helpers";

test("the transcript shows user and agent segments, an interim one updated in place", async ({ page }) => {
  await connect(page);
  const transcript = page.getByRole("list", { name: "Transcript" });

  // The user's interim text is re-sent whole, in a new stream each time, with one segment id.
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.sendStream("lk.transcription", "ada", "I want to", { "lk.segment_id": "SG_user_1", "lk.transcription_final": "false", "lk.transcribed_track_id": "TR_mic" });
  });
  const user = transcript.locator('[data-segment-id="SG_user_1"]');
  await expect(user).toContainText("I want to");
  await expect(user).toHaveAttribute("data-final", "false");
  await expect(user).toHaveClass(/user/);
  await expect(user).toHaveClass(/interim/);

  await page.evaluate(() => {
    window.coachTest.fake.sendStream("lk.transcription", "ada", "I want to help commuters eat well.", { "lk.segment_id": "SG_user_1", "lk.transcription_final": "true", "lk.transcribed_track_id": "TR_mic" });
  });
  await expect(user).toHaveAttribute("data-final", "true");
  await expect(user.locator(".said")).toHaveText("I want to help commuters eat well.");

  // The agent's segment grows chunk by chunk in one stream; the trailer makes it final.
  const id = await page.evaluate(() =>
    window.coachTest.fake.openStream("lk.transcription", "agent-coach", { "lk.segment_id": "SG_agent_1", "lk.transcription_final": "false", "lk.transcribed_track_id": "TR_agent" }),
  );
  await page.evaluate((s) => window.coachTest.fake.write(s, "Great — who "), id);
  const agent = transcript.locator('[data-segment-id="SG_agent_1"]');
  await expect(agent.locator(".said")).toHaveText("Great — who");
  await expect(agent).toHaveAttribute("data-final", "false");
  await page.evaluate((s) => window.coachTest.fake.write(s, "are your commuters?"), id);
  await expect(agent.locator(".said")).toHaveText("Great — who are your commuters?");
  await page.evaluate((s) => window.coachTest.fake.close(s, { "lk.transcription_final": "true" }), id);
  await expect(agent).toHaveAttribute("data-final", "true");
  await expect(agent).toHaveClass(/agent/);
  await expect(agent.locator(".who")).toHaveText("Coach");

  await expect(transcript.locator("li.turn")).toHaveCount(2);
  await expect(transcript.locator("li.turn .said")).toHaveText(["I want to help commuters eat well.", "Great — who are your commuters?"]);
});

test("typing a message sends it as text on lk.chat and shows it as a turn", async ({ page }) => {
  await connect(page);
  await page.getByLabel("Message").fill("Let's look at breakfast ideas");
  await page.getByRole("button", { name: "Send" }).click();
  await expect(page.getByLabel("Message")).toHaveValue("");
  const sent = await page.evaluate(() => window.coachTest.fake.sent);
  expect(sent).toEqual([{ topic: "lk.chat", text: "Let's look at breakfast ideas" }]);
  await expect(page.getByRole("list", { name: "Transcript" }).locator("li.turn.user .said")).toHaveText(["Let's look at breakfast ideas"]);
  // Enter sends too; an empty message is not sent.
  await page.getByLabel("Message").fill("   ");
  await expect(page.getByRole("button", { name: "Send" })).toBeDisabled();
  await page.getByLabel("Message").fill("And lunch?");
  await page.getByLabel("Message").press("Enter");
  await expect.poll(() => page.evaluate(() => window.coachTest.fake.sent.length)).toBe(2);
});

test("the microphone toggles, and disconnect returns to the start screen", async ({ page }) => {
  await connect(page);
  const mic = page.getByRole("button", { name: /Microphone/ });
  await expect(mic).toHaveText("Microphone on");
  await mic.click();
  await expect(mic).toHaveText("Microphone off");
  expect(await page.evaluate(() => window.coachTest.fake.microphoneEnabled())).toBe(false);
  await mic.click();
  await expect(mic).toHaveText("Microphone on");

  await page.getByRole("button", { name: "Disconnect" }).click();
  await expect(page.getByLabel("Your name")).toHaveValue("ada");
  expect(await page.evaluate(() => window.coachTest.fake.status())).toBe("disconnected");
});

test("the connection's state is shown", async ({ page }) => {
  await connect(page);
  await expect(page.getByTestId("connection")).toHaveText("Connected");
  await page.evaluate(() => window.coachTest.fake.setStatus("reconnecting"));
  await expect(page.getByTestId("connection")).toHaveText("Reconnecting…");
  await page.evaluate(() => window.coachTest.fake.setStatus("disconnected"));
  await expect(page.getByRole("status")).toContainText("The connection to the room has ended");
});

test("show steps lists the agents' tool calls and handoffs in the transcript, live", async ({ page }) => {
  await connect(page);
  const transcript = page.getByRole("list", { name: "Transcript" });
  const toggle = page.getByLabel("Show steps");
  await expect(toggle).not.toBeChecked(); // what was said, only, unless asked
  await toggle.check();
  await page.evaluate(() => {
    const fake = window.coachTest.fake;
    fake.sendStream("lk.transcription", "ada", "Bike parking at the office.", { "lk.segment_id": "SG_u", "lk.transcription_final": "true" });
    fake.sendStream("coach.steps", "agent-coach", JSON.stringify({ type: "tool", tool: "capture_design_challenge", arguments: '{"challenge":"Bike parking"}', ok: true }));
    fake.sendStream("coach.steps", "agent-coach", JSON.stringify({ type: "handoff", from_agent: "design_coach", to_agent: "design_strategist" }));
    fake.sendStream("coach.steps", "agent-coach", JSON.stringify({ type: "tool", tool: "add_idea", arguments: "{}", ok: false }));
    fake.sendStream("coach.steps", "someone-else", JSON.stringify({ type: "tool", tool: "forged", arguments: "{}", ok: true }));
    fake.sendStream("coach.steps", "agent-coach", "not a step");
  });
  const steps = [
    'capture_design_challenge({"challenge":"Bike parking"}) → ok',
    "handoff: design_coach → design_strategist",
    "add_idea({}) → failed",
  ];
  await expect(transcript.locator("li.turn .said")).toHaveText(["Bike parking at the office.", ...steps]);
  await page.evaluate(() => {
    window.coachTest.fake.sendStream("lk.transcription", "agent-coach", "Strategist here.", { "lk.segment_id": "SG_a", "lk.transcription_final": "true" });
  });
  await expect(transcript.locator("li.turn .said")).toHaveText(["Bike parking at the office.", ...steps, "Strategist here."]);
  await expect(transcript.locator("li.turn.step .who").first()).toHaveText("Step");
  await screenshot(page, "transcript-steps");
  await toggle.uncheck();
  await expect(transcript.locator("li.turn .said")).toHaveText(["Bike parking at the office.", "Strategist here."]);
});

test("stop interrupts the coach while it speaks or thinks, through coach.interrupt", async ({ page }) => {
  await connect(page);
  const stop = page.getByRole("button", { name: "Stop" });
  await expect(stop).toBeDisabled(); // nothing to stop
  await page.evaluate(() => window.coachTest.fake.setAgentAttributes({ "lk.agent.state": "speaking" }));
  await expect(stop).toBeEnabled();
  await stop.click();
  await expect(page.getByTestId("agent-state")).toHaveAttribute("data-state", "listening");
  await expect(stop).toBeDisabled();
  const calls = await page.evaluate(() => window.coachTest.fake.calls.filter((c) => c.method === "coach.interrupt"));
  expect(calls).toEqual([{ method: "coach.interrupt", request: {} }]);

  // A failed call is one line, and the button can be pressed again.
  await page.evaluate(() => {
    window.coachTest.fake.setAgentAttributes({ "lk.agent.state": "thinking" });
    window.coachTest.fake.failNext.set("coach.interrupt", "No live conversation to interrupt.");
  });
  await stop.click();
  await expect(page.getByRole("alert")).toHaveText("No live conversation to interrupt.");
  await expect(stop).toBeEnabled();
});
