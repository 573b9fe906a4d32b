import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Unit tests only; the browser tests under tests/browser belong to Playwright.
    include: ["src/**/*.test.{ts,tsx}", "tests/unit/**/*.test.{ts,tsx}"],
    environment: "node",
  },
});
