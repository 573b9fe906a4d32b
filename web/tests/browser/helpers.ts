import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { expect, type Page } from "@playwright/test";
import type { Snapshot } from "../../src/state";
import type { RpcCall } from "../fake-room";

export const SCREENSHOT_DIR = process.env.SCREENSHOT_DIR ?? "test-results/screenshots";

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`), fullPage: false });
}

/** Answer POST /api/token like the Python server does. */
export async function routeToken(page: Page, answer: { status: number; body: unknown } | null = null): Promise<void> {
  await page.route("**/api/token", async (route) => {
    const request = route.request();
    const { identity } = JSON.parse(request.postData() ?? "{}") as { identity: string };
    const reply = answer ?? {
      status: 200,
      body: { server_url: "ws://127.0.0.1:7880", participant_token: "token", room_name: "coach-test", identity },
    };
    await route.fulfill({ status: reply.status, contentType: "application/json", body: JSON.stringify(reply.body) });
  });
}

/** Open the harness, connect as `identity`, and wait for the talk screen. */
export async function connect(page: Page, { query = "", identity = "ada" } = {}): Promise<void> {
  await routeToken(page);
  await page.goto(`/tests/harness/index.html${query}`);
  await page.getByLabel("Your name").fill(identity);
  await page.getByRole("button", { name: "Connect" }).click();
  await expect(page.getByRole("region", { name: "Design board" })).toBeVisible();
}

/** Set what coach.get_state reads. */
export async function setServerState(page: Page, state: Snapshot): Promise<void> {
  await page.evaluate((s) => {
    window.coachTest.fake.fixtures.state = s;
  }, state);
}

export async function pushState(page: Page, ...messages: unknown[]): Promise<void> {
  await page.evaluate((ms) => {
    for (const m of ms) window.coachTest.fake.pushState(m);
  }, messages);
}

export async function rpcCalls(page: Page, method?: string): Promise<RpcCall[]> {
  const calls = await page.evaluate(() => window.coachTest.fake.calls);
  return method ? calls.filter((c) => c.method === method) : calls;
}

/** Wait until the board shows this session at this step. */
export async function expectBoardAt(page: Page, session: string, step: number): Promise<void> {
  const board = page.getByTestId("board");
  await expect(board).toHaveAttribute("data-session", session);
  await expect(board).toHaveAttribute("data-step", String(step));
}

/** How many calls of a method the fake has answered (or failed), in any order. */
export async function answeredCount(page: Page, method: string): Promise<number> {
  return page.evaluate((m) => window.coachTest.fake.answered.filter((a) => a === m).length, method);
}

/** How many calls of a method are held by the fake, waiting for the test. */
export async function heldCount(page: Page, method: string): Promise<number> {
  return page.evaluate((m) => window.coachTest.fake.heldCount(m), method);
}

/** Install Playwright's clock before the page loads; `pauseClock` then stops time for `runFor`. */
export const CLOCK_START = new Date("2030-01-07T09:00:00Z");

export async function pauseClock(page: Page): Promise<void> {
  await page.clock.pauseAt(new Date(CLOCK_START.getTime() + 3_600_000));
}
