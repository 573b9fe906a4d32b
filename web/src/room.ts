// The small room interface the app is written against. One adapter wraps a real
// livekit-client Room (livekitRoom.ts); a scripted fake lives under tests/.

import type { Room } from "livekit-client";

/** The topics of the text streams the app reads and writes. */
export const TOPIC_STATE = "coach.state";
export const TOPIC_STEPS = "coach.steps";
export const TOPIC_TRANSCRIPTION = "lk.transcription";
export const TOPIC_CHAT = "lk.chat";

/** Attributes on a transcription stream (set by livekit-agents). */
export const ATTR_SEGMENT_ID = "lk.segment_id";
export const ATTR_TRANSCRIPTION_FINAL = "lk.transcription_final";
export const ATTR_TRANSCRIBED_TRACK_ID = "lk.transcribed_track_id";

/** Attributes of the agent participant. */
export const ATTR_AGENT_STATE = "lk.agent.state";
export const ATTR_COACH_AGENT = "coach.agent";
export const ATTR_COACH_PHASE = "coach.phase";

/** One incoming text stream. */
export interface IncomingText {
  readonly streamId: string;
  readonly topic: string;
  /** The participant that sent it. */
  readonly senderIdentity: string;
  /** The stream's attributes now: the header's, merged with the trailer's once it ended. */
  attributes(): Record<string, string>;
  /** The text as it arrives, chunk by chunk (each a delta); ends with the stream. */
  chunks(): AsyncIterable<string>;
}

export type TextStreamHandler = (stream: IncomingText) => void;

/** The agent participant, as far as the app cares. */
export interface AgentInfo {
  readonly identity: string;
  readonly attributes: Readonly<Record<string, string>>;
}

/** LiveKit's RPC error code for a method the destination does not have. */
export const RPC_UNSUPPORTED_METHOD = 1400;

/** A failed RPC call: its one line, and LiveKit's error code (`RpcError.code`) when there is one. */
export class RpcCallError extends Error {
  constructor(
    message: string,
    readonly code: number | null = null,
  ) {
    super(message);
    this.name = "RpcCallError";
  }
}

export type ConnectionStatus = "connecting" | "connected" | "reconnecting" | "disconnected";

export type Unsubscribe = () => void;

export interface CoachRoom {
  /** This user's identity in the room. */
  readonly localIdentity: string;
  /** The name of the room (shown only). */
  readonly roomName: string;

  /** Handle every text stream on a topic; streams that came before are handed over now. */
  onTextStream(topic: string, handler: TextStreamHandler): Unsubscribe;
  sendText(text: string, topic: string): Promise<void>;

  /**
   * Call an RPC method on a participant; rejects with an Error whose message is one line
   * (an `RpcCallError` with LiveKit's code when the call itself was refused).
   */
  performRpc(destinationIdentity: string, method: string, payload: string): Promise<string>;

  /** The agent participant, once it has joined (null before, and after it left). */
  agent(): AgentInfo | null;
  /** Called when the agent joins, leaves, or its attributes change. */
  onAgentChange(listener: (agent: AgentInfo | null) => void): Unsubscribe;

  status(): ConnectionStatus;
  onStatusChange(listener: (status: ConnectionStatus) => void): Unsubscribe;
  /** Called after the connection came back: what was sent meanwhile may be lost. */
  onReconnected(listener: () => void): Unsubscribe;

  microphoneEnabled(): boolean;
  setMicrophoneEnabled(enabled: boolean): Promise<void>;
  disconnect(): Promise<void>;

  /** The real livekit Room, only to give components-react its RoomContext. */
  readonly livekitRoom?: Room;
}

/** Makes a connected room for an identity (the real one fetches a token first). */
export type Connect = (identity: string) => Promise<CoachRoom>;
