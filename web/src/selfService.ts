// Self-service: the caller's export (coach.export_my_data, in chunks) and its file.

import type { ExportMyDataRequest, ExportMyDataResponse } from "./rpc";

/** One call of coach.export_my_data (callRpc bound to a room, or a test's fake). */
export type ExportCall = (request: ExportMyDataRequest) => Promise<ExportMyDataResponse>;

/** Fetch every chunk of the caller's export, in order, and join them: one JSON text. */
export async function fetchExport(call: ExportCall): Promise<string> {
  const chunks: string[] = [];
  let answer = await call({});
  for (;;) {
    if (answer.index !== chunks.length || answer.total_chunks <= answer.index) {
      throw new Error("The export came out of order; try again.");
    }
    chunks.push(answer.chunk);
    if (answer.next_cursor === null) break;
    answer = await call({ cursor: answer.next_cursor });
  }
  if (chunks.length !== answer.total_chunks) throw new Error("The export ended early; try again.");
  return chunks.join("");
}

/** The export's file name: `coach-export-<identity>.json`, the identity made file-safe. */
export function exportFileName(identity: string): string {
  const safe = identity.trim().replace(/[^\p{L}\p{N}._-]+/gu, "_").replace(/^[._]+/, "");
  return `coach-export-${safe || "me"}.json`;
}

/** Have the browser save `text` as a file called `name`. */
export function saveText(text: string, name: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}
