import { readFileSync } from "node:fs";
import { expect, type Page, test } from "@playwright/test";
import { exportText, SESSION_A, SESSION_B, SESSION_C } from "../fixtures";
import { connect, rpcCalls, screenshot } from "./helpers";

function session(page: Page, id: string) {
  return page.locator(`li.session-node[data-session-id="${id}"]`).locator("> .session");
}

test("a session is deleted only after its confirmation step; the open one has no Delete", async ({ page }) => {
  await connect(page);
  const panel = page.getByRole("region", { name: "Sessions" });
  await expect(panel.locator(".session-challenge")).toHaveCount(3);
  await expect(session(page, SESSION_A).getByRole("button", { name: "Delete" })).toHaveCount(0); // open now

  // Cancel: nothing is asked of coach.
  await session(page, SESSION_B).getByRole("button", { name: "Delete" }).click();
  await session(page, SESSION_B).getByRole("button", { name: "Cancel" }).click();
  await expect(session(page, SESSION_B).getByRole("alertdialog")).toHaveCount(0);

  const target = session(page, SESSION_C);
  await target.getByRole("button", { name: "Delete" }).click();
  const confirm = target.getByRole("alertdialog", { name: "Delete this session" });
  await expect(confirm).toContainText("Delete “Make the library quieter” for good?");
  expect(await rpcCalls(page, "coach.delete_session")).toEqual([]);
  await screenshot(page, "sessions-delete-confirm");

  await confirm.getByRole("button", { name: "Delete for good" }).click();
  await expect(panel.locator(`li.session-node[data-session-id="${SESSION_C}"]`)).toHaveCount(0);
  await expect(panel.locator(".session-challenge")).toHaveCount(2);
  expect((await rpcCalls(page, "coach.delete_session")).map((c) => c.request)).toEqual([{ session_id: SESSION_C }]);
});

test("a refused delete says why in one line and keeps the session", async ({ page }) => {
  await connect(page);
  await page.evaluate(() => window.coachTest.fake.failNext.set("coach.delete_session", "The database is unavailable; try again."));
  const target = session(page, SESSION_C);
  await target.getByRole("button", { name: "Delete" }).click();
  await target.getByRole("button", { name: "Delete for good" }).click();
  await expect(target.getByRole("alert")).toHaveText("The database is unavailable; try again.");
  await expect(target).toBeVisible();
});

test("Export saves every chunk of the caller's data as coach-export-<identity>.json", async ({ page }) => {
  await connect(page);
  const panel = page.getByRole("region", { name: "Sessions" });
  const download = page.waitForEvent("download");
  await panel.getByRole("button", { name: "Export" }).click();
  const file = await download;
  expect(file.suggestedFilename()).toBe("coach-export-ada.json");
  expect(readFileSync(await file.path(), "utf-8")).toBe(exportText());
  await expect(panel.getByRole("status")).toHaveText("Saved coach-export-ada.json.");
  const calls = (await rpcCalls(page, "coach.export_my_data")).map((c) => c.request);
  expect(calls.length).toBe(Math.ceil(exportText().length / 64));
  expect(calls[0]).toEqual({});
  expect(calls.slice(1)).toEqual(calls.slice(1).map((_, i) => ({ cursor: `1.${i + 1}` })));
});

test("Forget me shows how many sessions go, and erases only once confirmed", async ({ page }) => {
  await connect(page);
  const header = page.locator("header.topbar");

  await header.getByRole("button", { name: "Forget me" }).click();
  const confirm = header.getByRole("alertdialog", { name: "Forget me" });
  await expect(confirm.getByTestId("forget-sessions")).toHaveText("3 sessions");
  await expect(confirm).toContainText("Erase ada for good");
  await screenshot(page, "forget-me-confirm");
  await confirm.getByRole("button", { name: "Cancel" }).click();
  await expect(confirm).toHaveCount(0);
  expect(await page.evaluate(() => window.coachTest.fake.erased)).toBe(false);

  // A refused confirmation erases nothing, and the next try asks again for a new token.
  await header.getByRole("button", { name: "Forget me" }).click();
  await page.evaluate(() =>
    window.coachTest.fake.failNext.set("coach.forget_me", "That confirmation is wrong or has expired; nothing was erased. Ask again."),
  );
  await confirm.getByRole("button", { name: "Erase everything" }).click();
  await expect(confirm.getByRole("alert")).toHaveText("That confirmation is wrong or has expired; nothing was erased. Ask again.");
  await expect(confirm.getByRole("button", { name: "Erase everything" })).toHaveCount(0);
  await confirm.getByRole("button", { name: "Close" }).click();
  await header.getByRole("button", { name: "Forget me" }).click();
  await confirm.getByRole("button", { name: "Erase everything" }).click();

  await expect(page.getByRole("status")).toHaveText("ada was erased, with 3 sessions.");
  await expect(page.getByLabel("Your name")).toHaveValue("");
  expect(await page.evaluate(() => window.coachTest.fake.erased)).toBe(true);
  const calls = (await rpcCalls(page, "coach.forget_me")).map((c) => c.request as { confirm_token?: string });
  // Three asks (the cancelled one, the refused one, the last) and two confirmations, each
  // with the token of the ask before it.
  expect(calls.map((c) => (c.confirm_token === undefined ? "ask" : "confirm"))).toEqual(["ask", "ask", "confirm", "ask", "confirm"]);
  expect(calls[2]!.confirm_token).not.toBe(calls[4]!.confirm_token);
  expect(await page.evaluate(() => window.coachTest.fake.status())).toBe("disconnected");
});
