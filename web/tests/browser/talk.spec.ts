import { expect, test } from "@playwright/test";
import { connect } from "./helpers";

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
