// The adapter from a real livekit-client Room to the app's CoachRoom.

import {
  ConnectionState,
  ParticipantKind,
  type RemoteParticipant,
  Room,
  RoomEvent,
  RpcError,
  type TextStreamReader,
} from "livekit-client";
import {
  type AgentInfo,
  type CoachRoom,
  type Connect,
  type ConnectionStatus,
  type IncomingText,
  RpcCallError,
  type TextStreamHandler,
  TOPIC_STATE,
  TOPIC_TRANSCRIPTION,
  type Unsubscribe,
} from "./room";

/** What `POST /api/token` answers. */
export interface TokenAnswer {
  server_url: string;
  participant_token: string;
  room_name: string;
  identity: string;
}

/** Fetch a token for an identity; an error's message is the server's one line. */
export async function fetchToken(identity: string, fetcher: typeof fetch = fetch): Promise<TokenAnswer> {
  let response: Response;
  try {
    response = await fetcher("/api/token", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ identity }),
    });
  } catch {
    throw new Error("The server cannot be reached.");
  }
  let body: unknown = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const line =
      body && typeof body === "object" && typeof (body as { error?: unknown }).error === "string"
        ? (body as { error: string }).error
        : `The server answered ${response.status}.`;
    throw new Error(line);
  }
  const answer = body as Partial<TokenAnswer> | null;
  if (!answer || typeof answer.server_url !== "string" || typeof answer.participant_token !== "string") {
    throw new Error("The server's answer has no token.");
  }
  return answer as TokenAnswer;
}

/** Joining the room failed: the name was fine, the LiveKit server was not reached. */
export class RoomUnreachable extends Error {}

/** The one line for a room that could not be joined: the URL dialled and what must run. */
export function roomUnreachable(serverUrl: string, error: unknown): RoomUnreachable {
  return new RoomUnreachable(
    `Could not join the room at ${serverUrl} (${oneLine(error)}): a LiveKit server must run there, ` +
      'and the coach worker with it (README: "Running with LiveKit").',
  );
}

/** The production connect: a token from the server, then a livekit Room with the microphone on. */
export const connectLivekit: Connect = async (identity) => {
  const token = await fetchToken(identity);
  const room = new Room({ adaptiveStream: true, dynacast: true });
  // Handlers are registered before connecting so that no early stream is dropped.
  const coachRoom = new LivekitCoachRoom(room, [TOPIC_STATE, TOPIC_TRANSCRIPTION]);
  try {
    await room.connect(token.server_url, token.participant_token);
  } catch (error) {
    coachRoom.close();
    throw roomUnreachable(token.server_url, error);
  }
  try {
    await room.localParticipant.setMicrophoneEnabled(true);
  } catch {
    // No microphone (or no permission): the user can still type.
  }
  return coachRoom;
};

function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split("\n")[0]?.trim() || "unknown error";
}

function toStatus(state: ConnectionState): ConnectionStatus {
  switch (state) {
    case ConnectionState.Connected:
      return "connected";
    case ConnectionState.Connecting:
      return "connecting";
    case ConnectionState.Reconnecting:
    case ConnectionState.SignalReconnecting:
      return "reconnecting";
    default:
      return "disconnected";
  }
}

function readerStream(reader: TextStreamReader, sender: string): IncomingText {
  return {
    streamId: reader.info.id,
    topic: reader.info.topic,
    senderIdentity: sender,
    attributes: () => ({ ...(reader.info.attributes ?? {}) }),
    chunks: () => reader,
  };
}

export class LivekitCoachRoom implements CoachRoom {
  readonly livekitRoom: Room;
  private readonly handlers = new Map<string, TextStreamHandler>();
  private readonly early = new Map<string, IncomingText[]>();
  private readonly agentListeners = new Set<(agent: AgentInfo | null) => void>();
  private readonly statusListeners = new Set<(status: ConnectionStatus) => void>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly detach: Array<() => void> = [];
  private closed = false;

  constructor(room: Room, topics: string[]) {
    this.livekitRoom = room;
    for (const topic of topics) {
      room.registerTextStreamHandler(topic, (reader, info) => {
        const stream = readerStream(reader, info.identity);
        const handler = this.handlers.get(topic);
        if (handler) handler(stream);
        else this.early.set(topic, [...(this.early.get(topic) ?? []), stream]);
      });
      this.detach.push(() => room.unregisterTextStreamHandler(topic));
    }
    const agentChanged = () => {
      const agent = this.agent();
      for (const listener of this.agentListeners) listener(agent);
    };
    const attributesChanged = (_changed: Record<string, string>, participant: { kind?: ParticipantKind }) => {
      if (participant.kind === ParticipantKind.AGENT) agentChanged();
    };
    const statusChanged = (state: ConnectionState) => {
      for (const listener of this.statusListeners) listener(toStatus(state));
    };
    const reconnected = () => {
      for (const listener of this.reconnectListeners) listener();
    };
    room.on(RoomEvent.ParticipantConnected, agentChanged);
    room.on(RoomEvent.ParticipantDisconnected, agentChanged);
    room.on(RoomEvent.ParticipantAttributesChanged, attributesChanged);
    room.on(RoomEvent.ConnectionStateChanged, statusChanged);
    room.on(RoomEvent.Reconnected, reconnected);
    this.detach.push(() => {
      room.off(RoomEvent.ParticipantConnected, agentChanged);
      room.off(RoomEvent.ParticipantDisconnected, agentChanged);
      room.off(RoomEvent.ParticipantAttributesChanged, attributesChanged);
      room.off(RoomEvent.ConnectionStateChanged, statusChanged);
      room.off(RoomEvent.Reconnected, reconnected);
    });
  }

  get localIdentity(): string {
    return this.livekitRoom.localParticipant.identity;
  }

  get roomName(): string {
    return this.livekitRoom.name;
  }

  onTextStream(topic: string, handler: TextStreamHandler): Unsubscribe {
    if (this.closed) return () => {};
    this.handlers.set(topic, handler);
    const early = this.early.get(topic) ?? [];
    this.early.delete(topic);
    for (const stream of early) handler(stream);
    return () => {
      if (this.handlers.get(topic) === handler) this.handlers.delete(topic);
    };
  }

  async sendText(text: string, topic: string): Promise<void> {
    await this.livekitRoom.localParticipant.sendText(text, { topic });
  }

  async performRpc(destinationIdentity: string, method: string, payload: string): Promise<string> {
    try {
      return await this.livekitRoom.localParticipant.performRpc({ destinationIdentity, method, payload });
    } catch (error) {
      throw new RpcCallError(oneLine(error), error instanceof RpcError ? error.code : null);
    }
  }

  agent(): AgentInfo | null {
    const agent = [...this.livekitRoom.remoteParticipants.values()].find(
      (p: RemoteParticipant) => p.kind === ParticipantKind.AGENT,
    );
    return agent ? { identity: agent.identity, attributes: { ...agent.attributes } } : null;
  }

  onAgentChange(listener: (agent: AgentInfo | null) => void): Unsubscribe {
    this.agentListeners.add(listener);
    return () => this.agentListeners.delete(listener);
  }

  status(): ConnectionStatus {
    return toStatus(this.livekitRoom.state);
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
    return this.livekitRoom.localParticipant.isMicrophoneEnabled;
  }

  async setMicrophoneEnabled(enabled: boolean): Promise<void> {
    await this.livekitRoom.localParticipant.setMicrophoneEnabled(enabled);
  }

  async disconnect(): Promise<void> {
    await this.livekitRoom.disconnect();
    this.close();
  }

  /** Drop the handlers and listeners (after a disconnect or a failed connect). */
  close(): void {
    this.closed = true;
    for (const undo of this.detach.splice(0)) undo();
    this.handlers.clear();
    this.early.clear();
  }
}
