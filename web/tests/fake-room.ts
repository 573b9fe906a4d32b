// A scripted CoachRoom for the browser tests: text streams, the agent's attributes and
// connection events are pushed by the test; RPCs are answered from fixtures and recorded.

import type { Snapshot } from "../src/state";
import {
  type AgentInfo,
  type CoachRoom,
  type ConnectionStatus,
  type IncomingText,
  RpcCallError,
  type TextStreamHandler,
  type Unsubscribe,
} from "../src/room";
import type {
  ConversationEntry,
  ListSessionsResponse,
  PhaseOutputView,
  ResumeSessionResponse,
} from "../src/rpc";

export interface FakeFixtures {
  sessions: ListSessionsResponse;
  /** By session id. */
  phases: Record<string, PhaseOutputView[]>;
  /** By session id: the whole conversation with its steps, oldest first. */
  conversation: Record<string, ConversationEntry[]>;
  /** By session id: an answer, or an error's one line. */
  resume: Record<string, ResumeSessionResponse | { error: string }>;
  /**
   * The agent's state. `coach.get_state` answers like the server: `{session_id, step}`,
   * with this snapshot sent on coach.state (at once, or when the test releases it).
   */
  state: Snapshot;
  /** What coach.export_my_data sends, in chunks of `exportChunk` characters. */
  exportText: string;
  exportChunk: number;
}

export interface RpcCall {
  method: string;
  request: unknown;
}

class FakeStream implements IncomingText {
  private readonly queue: string[] = [];
  private done = false;
  private wake: (() => void) | null = null;
  private attrs: Record<string, string>;

  constructor(
    readonly streamId: string,
    readonly topic: string,
    readonly senderIdentity: string,
    attributes: Record<string, string>,
  ) {
    this.attrs = { ...attributes };
  }

  attributes(): Record<string, string> {
    return { ...this.attrs };
  }

  write(text: string): void {
    this.queue.push(text);
    this.wake?.();
  }

  close(trailer: Record<string, string> = {}): void {
    this.attrs = { ...this.attrs, ...trailer };
    this.done = true;
    this.wake?.();
  }

  async *chunks(): AsyncIterable<string> {
    for (;;) {
      if (this.queue.length) {
        yield this.queue.shift()!;
        continue;
      }
      if (this.done) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = null;
    }
  }
}

export class FakeRoom implements CoachRoom {
  localIdentity = "";
  readonly roomName = "coach-test";
  readonly calls: RpcCall[] = [];
  readonly sent: Array<{ topic: string; text: string }> = [];
  /** The methods whose answers (or errors) have been given back, in that order. */
  readonly answered: string[] = [];
  /** The next call of a method fails with this one line (and LiveKit's error code). */
  readonly failNext = new Map<string, string | { message: string; code: number }>();
  /** Calls of these methods are answered when the test releases them (`release`). */
  readonly held = new Map<string, Array<() => void>>();
  readonly holding = new Set<string>();
  /** While set, the snapshots of coach.get_state wait for `releaseSnapshots()`. */
  holdingSnapshots = false;
  readonly heldSnapshots: Snapshot[] = [];

  private readonly handlers = new Map<string, TextStreamHandler>();
  private readonly early = new Map<string, FakeStream[]>();
  private readonly streams = new Map<string, FakeStream>();
  private readonly agentListeners = new Set<(agent: AgentInfo | null) => void>();
  private readonly statusListeners = new Set<(status: ConnectionStatus) => void>();
  private readonly reconnectListeners = new Set<() => void>();
  private currentAgent: AgentInfo | null;
  private currentStatus: ConnectionStatus = "connected";
  private mic = true;
  private streamCount = 0;
  private exportCount = 0;
  /** The forget-me token given out and not yet tried (a token is tried once). */
  private forgetToken: string | null = null;
  /** Set once coach.forget_me erased the caller. */
  erased = false;

  constructor(
    public fixtures: FakeFixtures,
    agent: AgentInfo | null = { identity: "agent-coach", attributes: { "lk.agent.state": "listening" } },
  ) {
    this.currentAgent = agent;
  }

  // --- CoachRoom ------------------------------------------------------------

  onTextStream(topic: string, handler: TextStreamHandler): Unsubscribe {
    this.handlers.set(topic, handler);
    for (const stream of this.early.get(topic) ?? []) handler(stream);
    this.early.delete(topic);
    return () => {
      if (this.handlers.get(topic) === handler) this.handlers.delete(topic);
    };
  }

  async sendText(text: string, topic: string): Promise<void> {
    this.sent.push({ topic, text });
  }

  async performRpc(destinationIdentity: string, method: string, payload: string): Promise<string> {
    const request: unknown = JSON.parse(payload);
    this.calls.push({ method, request });
    if (destinationIdentity !== this.currentAgent?.identity) throw new RpcCallError("Recipient not found", 1401);
    // The agent reads its state when the call comes; a held call gives it back later.
    let outcome: { answer: string } | { error: Error };
    const failure = this.failNext.get(method);
    if (failure !== undefined) {
      this.failNext.delete(method);
      outcome = {
        error: typeof failure === "string" ? new RpcCallError(failure, 1500) : new RpcCallError(failure.message, failure.code),
      };
    } else {
      try {
        outcome = { answer: JSON.stringify(this.answer(method, request as Record<string, unknown>)) };
      } catch (error) {
        // A handler's error is an application error (1500), unless the call never reached one.
        outcome = {
          error: error instanceof RpcCallError ? error : new RpcCallError(error instanceof Error ? error.message : String(error), 1500),
        };
      }
    }
    if (this.holding.has(method)) {
      await new Promise<void>((resolve) => this.held.set(method, [...(this.held.get(method) ?? []), resolve]));
    }
    this.answered.push(method);
    if ("error" in outcome) throw outcome.error;
    return outcome.answer;
  }

  agent(): AgentInfo | null {
    return this.currentAgent;
  }

  onAgentChange(listener: (agent: AgentInfo | null) => void): Unsubscribe {
    this.agentListeners.add(listener);
    return () => this.agentListeners.delete(listener);
  }

  status(): ConnectionStatus {
    return this.currentStatus;
  }

  onStatusChange(listener: (status: ConnectionStatus) => void): Unsubscribe {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  onReconnected(listener: () => void): Unsubscribe {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  microphoneEnabled(): boolean {
    return this.mic;
  }

  async setMicrophoneEnabled(enabled: boolean): Promise<void> {
    this.mic = enabled;
  }

  async disconnect(): Promise<void> {
    this.setStatus("disconnected");
  }

  // --- what a test does -------------------------------------------------------

  /** Open a text stream; write to it and close it by its id. */
  openStream(topic: string, sender: string, attributes: Record<string, string> = {}): string {
    this.streamCount += 1;
    const id = `stream-${this.streamCount}`;
    const stream = new FakeStream(id, topic, sender, attributes);
    this.streams.set(id, stream);
    const handler = this.handlers.get(topic);
    if (handler) handler(stream);
    else this.early.set(topic, [...(this.early.get(topic) ?? []), stream]);
    return id;
  }

  write(streamId: string, text: string): void {
    this.streams.get(streamId)?.write(text);
  }

  close(streamId: string, trailer: Record<string, string> = {}): void {
    this.streams.get(streamId)?.close(trailer);
    this.streams.delete(streamId);
  }

  /** A whole text stream at once. */
  sendStream(topic: string, sender: string, text: string, attributes: Record<string, string> = {}): void {
    const id = this.openStream(topic, sender, attributes);
    this.write(id, text);
    this.close(id);
  }

  /** One coach.state message, from the agent. */
  pushState(message: unknown): void {
    this.sendStream("coach.state", this.currentAgent?.identity ?? "agent-coach", JSON.stringify(message));
  }

  setAgent(agent: AgentInfo | null): void {
    this.currentAgent = agent;
    for (const listener of this.agentListeners) listener(agent);
  }

  setAgentAttributes(attributes: Record<string, string>): void {
    if (!this.currentAgent) return;
    this.setAgent({ ...this.currentAgent, attributes: { ...this.currentAgent.attributes, ...attributes } });
  }

  setStatus(status: ConnectionStatus): void {
    this.currentStatus = status;
    for (const listener of this.statusListeners) listener(status);
  }

  /** The connection dropped and came back. */
  reconnect(): void {
    this.setStatus("reconnecting");
    this.setStatus("connected");
    for (const listener of this.reconnectListeners) listener();
  }

  hold(method: string): void {
    this.holding.add(method);
  }

  /** Answer the held calls of a method and stop holding it. */
  release(method: string): void {
    this.holding.delete(method);
    for (const resolve of this.held.get(method) ?? []) resolve();
    this.held.delete(method);
  }

  /** Answer one held call (the oldest or the newest); later calls are still held. */
  releaseOne(method: string, which: "oldest" | "newest"): void {
    const waiting = this.held.get(method) ?? [];
    const resolve = which === "oldest" ? waiting.shift() : waiting.pop();
    resolve?.();
  }

  /** How many calls of a method are waiting to be answered. */
  heldCount(method: string): number {
    return this.held.get(method)?.length ?? 0;
  }

  holdSnapshots(): void {
    this.holdingSnapshots = true;
  }

  /** Send the held snapshots on coach.state, and the next ones at once. */
  releaseSnapshots(): void {
    this.holdingSnapshots = false;
    for (const s of this.heldSnapshots.splice(0)) this.pushState({ type: "snapshot", ...s });
  }

  private answer(method: string, request: Record<string, unknown>): unknown {
    const f = this.fixtures;
    const sessionId = typeof request["session_id"] === "string" ? request["session_id"] : "";
    switch (method) {
      case "coach.get_state": {
        // Like the server: the snapshot goes on the stream, the answer says where it is.
        const s = f.state;
        if (this.holdingSnapshots) this.heldSnapshots.push(s);
        else this.pushState({ type: "snapshot", ...s });
        return { session_id: s.session_id, step: s.step };
      }
      case "coach.focus":
        return { ok: true, step: null };
      case "coach.interrupt": {
        // Like the server: an agent that is speaking or thinking stops and listens.
        const state = this.currentAgent?.attributes["lk.agent.state"];
        const busy = state === "speaking" || state === "thinking";
        if (busy) this.setAgentAttributes({ "lk.agent.state": "listening" });
        return { interrupted: busy };
      }
      case "coach.list_sessions":
        return f.sessions;
      case "coach.get_phase_outputs": {
        const phases = f.phases[sessionId];
        if (!phases) throw new Error("no such session");
        const prompts = request["include_prompts"] === true;
        return {
          session_id: sessionId,
          phases: phases.map((p) => (prompts ? p : { ...p, system_prompt: null, user_input: null })),
        };
      }
      case "coach.get_session_conversation": {
        const all = f.conversation[sessionId];
        if (!all) throw new Error("no such session");
        const entries = request["include_steps"] === true ? all : all.filter((e) => e.kind === "message");
        const limit = typeof request["limit"] === "number" ? request["limit"] : 50;
        const end = typeof request["before"] === "number" ? request["before"] : entries.length;
        const start = Math.max(0, end - limit);
        return { session_id: sessionId, entries: entries.slice(start, end), before: start > 0 ? start : null };
      }
      case "coach.resume_session": {
        const answer = f.resume[sessionId];
        if (!answer) throw new Error("no such session");
        if ("error" in answer) throw new Error(answer.error);
        return answer;
      }
      case "coach.branch_session": {
        // Like the server: from a message of the session (its turn), a new session under it.
        const list = f.sessions.sessions;
        const source = list.find((s) => s.id === sessionId);
        if (!source) throw new Error("No such session.");
        const messageId = request["after_message_id"];
        const said = (f.conversation[sessionId] ?? []).some((e) => e.kind === "message" && e.message_id === messageId);
        if (typeof messageId !== "number" || !said) {
          throw new Error(`Message ${String(messageId)} is not in this session, so it cannot be branched from.`);
        }
        const id = `${sessionId.slice(0, 24)}${String(messageId).padStart(8, "0")}`;
        const branch = {
          ...source,
          id,
          parent_session_id: sessionId,
          branched_from_phase: source.current_phase_id,
          updated_at: "2026-05-03T08:00:00Z",
        };
        f.sessions = { ...f.sessions, sessions: [branch, ...list] };
        return {
          session_id: id,
          parent_session_id: sessionId,
          branched_from_phase: branch.branched_from_phase ?? "",
          after_message_id: messageId,
          agent: "strategist",
          next_phase_id: "ideate",
        };
      }
      case "coach.delete_session": {
        const list = f.sessions.sessions;
        if (!list.some((s) => s.id === sessionId)) throw new Error("No such session.");
        if (sessionId === f.state.session_id) {
          throw new Error("This session is open in this conversation; it cannot be erased now.");
        }
        f.sessions = { ...f.sessions, sessions: list.filter((s) => s.id !== sessionId) };
        return { session_id: sessionId, deleted: true };
      }
      case "coach.export_my_data": {
        // Like the server: a first call starts an export; cursors name it and the next chunk.
        const cursor = typeof request["cursor"] === "string" ? request["cursor"] : null;
        if (cursor === null) this.exportCount += 1;
        const [id, at] = cursor === null ? [String(this.exportCount), "0"] : cursor.split(".");
        const index = Number(at);
        const total = Math.max(1, Math.ceil(f.exportText.length / f.exportChunk));
        if (id !== String(this.exportCount) || !(index >= 0 && index < total)) {
          throw new Error("No such export chunk; start the export again without a cursor.");
        }
        const chunk = f.exportText.slice(index * f.exportChunk, (index + 1) * f.exportChunk);
        return { chunk, index, total_chunks: total, next_cursor: index + 1 < total ? `${id}.${index + 1}` : null };
      }
      case "coach.forget_me": {
        if (this.erased) throw new Error("Nothing is stored about you.");
        const sessions = f.sessions.sessions.length;
        const token = typeof request["confirm_token"] === "string" ? request["confirm_token"] : null;
        if (token === null) {
          this.forgetToken = `token-${this.calls.length}`;
          return { erased: false, sessions, confirm_token: this.forgetToken, expires_in: 120 };
        }
        const expected = this.forgetToken;
        this.forgetToken = null;
        if (token !== expected) throw new Error("That confirmation is wrong or has expired; nothing was erased. Ask again.");
        this.erased = true;
        f.sessions = { sessions: [], more: false };
        return { erased: true, sessions, confirm_token: null, expires_in: null };
      }
      default:
        throw new RpcCallError("Method not supported at destination", 1400);
    }
  }
}
