import { fileURLToPath } from "node:url";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The built client is shipped inside the Python package, which serves it at "/".
const outDir = fileURLToPath(new URL("../src/coach/surfaces/web_client", import.meta.url));

export default defineConfig({
  plugins: [react()],
  base: "./",
  build: {
    outDir,
    emptyOutDir: true,
    sourcemap: false,
    // Only the app: the test harness under tests/ is served by the dev server, never built.
    rollupOptions: { input: fileURLToPath(new URL("./index.html", import.meta.url)) },
    chunkSizeWarningLimit: 1200,
  },
  optimizeDeps: {
    // Pre-bundle up front so the dev server never reloads a page mid-test.
    entries: ["index.html", "tests/harness/index.html"],
    include: [
      "react",
      "react-dom",
      "react-dom/client",
      "react/jsx-runtime",
      "react/jsx-dev-runtime",
      "livekit-client",
      "@livekit/components-react",
    ],
  },
  server: { host: "127.0.0.1" },
});
