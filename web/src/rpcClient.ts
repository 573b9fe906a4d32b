// Typed RPC calls on the agent participant.

import type { CoachRpc } from "./rpc";
import { type AgentInfo, type CoachRoom, RPC_UNSUPPORTED_METHOD, RpcCallError } from "./room";

export type Method = keyof CoachRpc;
export type RpcRequest<M extends Method> = CoachRpc[M]["request"];
export type RpcResponse<M extends Method> = CoachRpc[M]["response"];

/** How long a call waits for the agent to join the room. */
export const AGENT_WAIT_MS = 15_000;

/** The agent participant, waiting for it to join (rejects after `timeoutMs`). */
export function waitForAgent(room: CoachRoom, timeoutMs = AGENT_WAIT_MS): Promise<AgentInfo> {
  const present = room.agent();
  if (present) return Promise.resolve(present);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe();
      reject(new Error("The coach has not joined the room yet."));
    }, timeoutMs);
    const unsubscribe = room.onAgentChange((agent) => {
      if (!agent) return;
      clearTimeout(timer);
      unsubscribe();
      resolve(agent);
    });
  });
}

/** Call a coach RPC method on the agent participant; the answer is parsed JSON. */
export async function callRpc<M extends Method>(
  room: CoachRoom,
  method: M,
  request: RpcRequest<M>,
): Promise<RpcResponse<M>> {
  const agent = await waitForAgent(room);
  const answer = await room.performRpc(agent.identity, method, JSON.stringify(request));
  try {
    return JSON.parse(answer) as RpcResponse<M>;
  } catch {
    throw new Error(`The coach's answer to ${method} is not JSON.`);
  }
}

/** An error as one line of text (an RpcError's message, never a stack). */
export function errorLine(error: unknown): string {
  const text = error instanceof Error ? error.message : typeof error === "string" ? error : "";
  const line = text.split("\n").find((l) => l.trim())?.trim();
  return line || "Something went wrong.";
}

/** The call was refused because the agent does not have the method (an older worker). */
export function isUnsupportedMethod(error: unknown): boolean {
  return error instanceof RpcCallError && error.code === RPC_UNSUPPORTED_METHOD;
}
