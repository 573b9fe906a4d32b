import { describe, expect, it } from "vitest";
import { fetchToken, RoomUnreachable, roomUnreachable } from "../../src/livekitRoom";
import { errorLine } from "../../src/rpcClient";
import { sessionTree } from "../../src/Sessions";
import { SESSION_A, SESSION_B, SESSION_C, sessionsList } from "../fixtures";

function fakeFetch(status: number, body: string | null): typeof fetch {
  return (async (_url: RequestInfo | URL, init?: RequestInit) => {
    expect(init?.method).toBe("POST");
    expect(JSON.parse(String(init?.body))).toEqual({ identity: "ada" });
    return new Response(body, { status, headers: { "content-type": "application/json" } });
  }) as typeof fetch;
}

describe("fetchToken", () => {
  it("returns the server's answer", async () => {
    const answer = { server_url: "wss://lk", participant_token: "t", room_name: "coach-1", identity: "ada" };
    await expect(fetchToken("ada", fakeFetch(200, JSON.stringify(answer)))).resolves.toEqual(answer);
  });

  it("a refusal is the server's one line (400, 413)", async () => {
    await expect(
      fetchToken("ada", fakeFetch(400, '{"error":"An identity must not start or end with a space."}')),
    ).rejects.toThrow("An identity must not start or end with a space.");
    await expect(fetchToken("ada", fakeFetch(413, '{"error":"The request is over 4096 bytes."}'))).rejects.toThrow(
      "The request is over 4096 bytes.",
    );
  });

  it("an answer that is not the server's says so", async () => {
    await expect(fetchToken("ada", fakeFetch(502, "<html>bad gateway</html>"))).rejects.toThrow("The server answered 502.");
    await expect(fetchToken("ada", fakeFetch(200, "{}"))).rejects.toThrow("The server's answer has no token.");
    const offline = (async () => {
      throw new TypeError("Failed to fetch");
    }) as typeof fetch;
    await expect(fetchToken("ada", offline)).rejects.toThrow("The server cannot be reached.");
  });
});

describe("errorLine", () => {
  it("is the first non-empty line of the message", () => {
    expect(errorLine(new Error("\nno such session\nTraceback …"))).toBe("no such session");
    expect(errorLine("plain")).toBe("plain");
    expect(errorLine(null)).toBe("Something went wrong.");
  });
});

describe("sessionTree", () => {
  it("puts a branch under its parent, and an orphan branch at the top", () => {
    const tree = sessionTree(sessionsList().sessions);
    expect(tree.map((n) => n.session.id)).toEqual([SESSION_A, SESSION_C]);
    expect(tree[0]!.children.map((n) => n.session.id)).toEqual([SESSION_B]);
    const orphan = sessionTree(sessionsList().sessions.filter((s) => s.id !== SESSION_A));
    expect(orphan.map((n) => n.session.id)).toEqual([SESSION_B, SESSION_C]);
  });
});

describe("roomUnreachable", () => {
  it("names the URL it dialled and what must run there, in one line", () => {
    const error = roomUnreachable(
      "ws://localhost:7880",
      new Error("could not establish signal connection: Failed to fetch\nat stack"),
    );
    expect(error).toBeInstanceOf(RoomUnreachable);
    expect(errorLine(error)).toBe(
      "Could not join the room at ws://localhost:7880 (could not establish signal connection: " +
        'Failed to fetch): a LiveKit server must run there, and the coach worker with it (README: ' +
        '"Running with LiveKit").',
    );
  });
});
