import { describe, expect, it } from "vitest";
import type { ExportMyDataRequest, ExportMyDataResponse } from "../../src/rpc";
import { exportFileName, fetchExport } from "../../src/selfService";

/** Answers coach.export_my_data like the server: `parts` in order, cursors "e.<index>". */
function server(parts: string[], asked: ExportMyDataRequest[] = []) {
  return async (request: ExportMyDataRequest): Promise<ExportMyDataResponse> => {
    asked.push(request);
    const index = request.cursor ? Number(request.cursor.split(".")[1]) : 0;
    const last = index + 1 === parts.length;
    return { chunk: parts[index]!, index, total_chunks: parts.length, next_cursor: last ? null : `e.${index + 1}` };
  };
}

describe("fetchExport", () => {
  it("asks with each next cursor and joins the chunks in order", async () => {
    const asked: ExportMyDataRequest[] = [];
    const text = await fetchExport(server(['{"user": {"identity": "ad', 'a"}, "sessions"', ": []}\n"], asked));
    expect(JSON.parse(text)).toEqual({ user: { identity: "ada" }, sessions: [] });
    expect(asked).toEqual([{}, { cursor: "e.1" }, { cursor: "e.2" }]);
  });

  it("a single chunk is the whole export", async () => {
    await expect(fetchExport(server(["{}"]))).resolves.toBe("{}");
  });

  it("an answer out of order, or an end before the last chunk, is an error", async () => {
    const skipping = async (request: ExportMyDataRequest): Promise<ExportMyDataResponse> => ({
      chunk: "x",
      index: request.cursor ? 2 : 0,
      total_chunks: 3,
      next_cursor: "e.2",
    });
    await expect(fetchExport(skipping)).rejects.toThrow("out of order");
    const early = async (): Promise<ExportMyDataResponse> => ({ chunk: "x", index: 0, total_chunks: 2, next_cursor: null });
    await expect(fetchExport(early)).rejects.toThrow("ended early");
  });
});

describe("exportFileName", () => {
  it("is coach-export-<identity>.json, the identity made safe for a file name", () => {
    expect(exportFileName("ada")).toBe("coach-export-ada.json");
    expect(exportFileName("Zoë Müller")).toBe("coach-export-Zoë_Müller.json");
    expect(exportFileName("../etc/passwd")).toBe("coach-export-etc_passwd.json");
    expect(exportFileName("  ")).toBe("coach-export-me.json");
  });
});
