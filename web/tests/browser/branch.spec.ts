import { expect, type Page, test } from "@playwright/test";
import { SESSION_A, SESSION_B } from "../fixtures";
import { connect, rpcCalls, screenshot } from "./helpers";

function session(page: Page, id: string) {
  return page.locator(`li.session-node[data-session-id="${id}"]`).locator("> .session");
}

function message(page: Page, id: string, messageId: number) {
  return session(page, id).locator(`li.entry.message[data-message-id="${messageId}"]`);
}

test("Branch from here on a message branches after its turn, once confirmed", async ({ page }) => {
  await connect(page);
  const panel = page.getByRole("region", { name: "Sessions" });
  await session(page, SESSION_B).locator(".session-main").click();
  const said = message(page, SESSION_B, 3);
  await expect(said).toContainText("message 3");

  // Cancel: nothing is asked of coach.
  await said.getByRole("button", { name: "Branch from here" }).click();
  await said.getByRole("button", { name: "Cancel" }).click();
  await expect(said.getByRole("alertdialog")).toHaveCount(0);
  expect(await rpcCalls(page, "coach.branch_session")).toEqual([]);

  await said.getByRole("button", { name: "Branch from here" }).click();
  const confirm = said.getByRole("alertdialog", { name: "Branch from this message" });
  await expect(confirm).toContainText("as it was after this turn");
  await said.scrollIntoViewIfNeeded();
  await screenshot(page, "sessions-branch-from-here");
  expect(await rpcCalls(page, "coach.branch_session")).toEqual([]);

  await confirm.getByRole("button", { name: "Branch", exact: true }).click();
  await expect(said.getByRole("status")).toHaveText(
    "Branched: a new session carries on from here with the strategist, next: ideate. This one stays as it is.",
  );
  expect((await rpcCalls(page, "coach.branch_session")).map((c) => c.request)).toEqual([
    { session_id: SESSION_B, after_message_id: 3 },
  ]);
  // The list again: the new branch under the session it came from.
  const branchId = `${SESSION_B.slice(0, 24)}00000003`;
  await expect(panel.locator(`li.session-node[data-session-id="${SESSION_B}"] ul.branches li[data-session-id="${branchId}"]`)).toBeVisible();
  await expect(session(page, SESSION_A)).toBeVisible(); // the original is still there
});

test("a refused branch says why in one line and changes nothing", async ({ page }) => {
  await connect(page);
  await page.evaluate(() =>
    window.coachTest.fake.failNext.set(
      "coach.branch_session",
      "The board changed during that part of the session and its state then was not recorded; branch from the end of a phase or from the latest turn.",
    ),
  );
  const panel = page.getByRole("region", { name: "Sessions" });
  const before = await panel.locator("li.session-node").count();
  await session(page, SESSION_B).locator(".session-main").click();
  const said = message(page, SESSION_B, 2);
  await said.getByRole("button", { name: "Branch from here" }).click();
  await said.getByRole("button", { name: "Branch", exact: true }).click();
  await expect(said.getByRole("alert")).toHaveText(
    "The board changed during that part of the session and its state then was not recorded; branch from the end of a phase or from the latest turn.",
  );
  await expect(panel.locator("li.session-node")).toHaveCount(before);
});
