// React hooks over the CoachRoom: the agent, the connection, the board, the transcript.

import { type Dispatch, useCallback, useEffect, useReducer, useRef, useState } from "react";
import {
  ATTR_SEGMENT_ID,
  ATTR_TRANSCRIPTION_FINAL,
  type AgentInfo,
  type CoachRoom,
  type ConnectionStatus,
  type IncomingText,
  TOPIC_CHAT,
  TOPIC_STATE,
  TOPIC_TRANSCRIPTION,
} from "./room";
import { callRpc } from "./rpcClient";
import { type BoardAction, type BoardState, boardReducer, initialBoard, parseStateMessage, snapshotFromAnswer } from "./state";
import { emptyTranscript, transcriptReducer, type TranscriptState } from "./transcript";

/** How long a fresh read may take before it is asked for again. */
export const SYNC_TIMEOUT_MS = 10_000;
/** The pause before asking again after a fresh read failed. */
export const SYNC_RETRY_MS = 2_000;

export function useAgent(room: CoachRoom): AgentInfo | null {
  const [agent, setAgent] = useState<AgentInfo | null>(() => room.agent());
  useEffect(() => {
    setAgent(room.agent());
    return room.onAgentChange(setAgent);
  }, [room]);
  return agent;
}

export function useConnectionStatus(room: CoachRoom): ConnectionStatus {
  const [status, setStatus] = useState<ConnectionStatus>(() => room.status());
  useEffect(() => {
    setStatus(room.status());
    return room.onStatusChange(setStatus);
  }, [room]);
  return status;
}

async function readAll(stream: IncomingText): Promise<string> {
  let text = "";
  for await (const chunk of stream.chunks()) text += chunk;
  return text;
}

/**
 * The design board: coach.state messages through the reducer, and a fresh read
 * (`coach.get_state`) whenever the reducer wants one and the agent is there.
 */
export function useBoard(room: CoachRoom, agentIdentity: string | null): [BoardState, Dispatch<BoardAction>] {
  const [board, dispatch] = useReducer(boardReducer, undefined, initialBoard);

  // Messages are read one after the other, so they reach the reducer in arrival order.
  useEffect(() => {
    let queue = Promise.resolve();
    let live = true;
    const unsubscribe = room.onTextStream(TOPIC_STATE, (stream) => {
      queue = queue.then(async () => {
        try {
          const text = await readAll(stream);
          const message = parseStateMessage(text);
          if (!message) console.warn("coach.state: not a state message, ignored");
          else if (live) dispatch({ type: "message", message });
        } catch (error) {
          console.warn("coach.state: a message could not be read", error);
        }
      });
    });
    return () => {
      live = false;
      unsubscribe();
    };
  }, [room]);

  useEffect(() => room.onReconnected(() => dispatch({ type: "reconnect" })), [room]);

  // Another agent (a new job after the first left) has its own state: read it afresh.
  const lastAgent = useRef<string | null>(null);
  useEffect(() => {
    if (!agentIdentity) return;
    if (lastAgent.current !== null) dispatch({ type: "reconnect" });
    lastAgent.current = agentIdentity;
  }, [agentIdentity]);

  useEffect(() => {
    if (board.needsSync && board.sync === null && agentIdentity) dispatch({ type: "syncStarted" });
  }, [board.needsSync, board.sync, agentIdentity]);

  // One call per sync id: the reducer ignores the answers of a sync that is over.
  const asked = useRef<number | null>(null);
  useEffect(() => {
    const sync = board.sync;
    if (!sync || asked.current === sync.id) return;
    asked.current = sync.id;
    const syncId = sync.id;
    const timer = setTimeout(() => dispatch({ type: "syncFailed", syncId }), SYNC_TIMEOUT_MS);
    callRpc(room, "coach.get_state", {}).then(
      (answer) => {
        const snapshot = snapshotFromAnswer(answer);
        if (snapshot) dispatch({ type: "snapshot", snapshot, syncId });
        else dispatch({ type: "syncAnswered", syncId, session_id: answer.session_id, step: answer.step });
      },
      (error) => {
        console.warn("coach.get_state failed", error);
        clearTimeout(timer);
        setTimeout(() => dispatch({ type: "syncFailed", syncId }), SYNC_RETRY_MS);
      },
    );
  }, [room, board.sync]);

  return [board, dispatch];
}

/** The live transcript, and a way to send a typed turn. */
export function useTranscript(room: CoachRoom): [TranscriptState, (text: string) => Promise<void>] {
  const [transcript, dispatch] = useReducer(transcriptReducer, emptyTranscript);

  useEffect(() => {
    let live = true;
    const unsubscribe = room.onTextStream(TOPIC_TRANSCRIPTION, (stream) => {
      const speaker = stream.senderIdentity === room.localIdentity ? "user" : "agent";
      const id = stream.attributes()[ATTR_SEGMENT_ID] || stream.streamId;
      const isFinal = () => stream.attributes()[ATTR_TRANSCRIPTION_FINAL] === "true";
      void (async () => {
        let text = "";
        try {
          for await (const chunk of stream.chunks()) {
            text += chunk;
            if (live && text) dispatch({ type: "segment", id, speaker, text, final: isFinal() });
          }
        } catch (error) {
          console.warn("lk.transcription: a stream broke off", error);
        }
        if (live && text) dispatch({ type: "segment", id, speaker, text, final: isFinal() });
      })();
    });
    return () => {
      live = false;
      unsubscribe();
    };
  }, [room]);

  const typed = useRef(0);
  const send = useCallback(
    async (text: string) => {
      await room.sendText(text, TOPIC_CHAT);
      typed.current += 1;
      dispatch({ type: "typed", id: `typed-${typed.current}`, text });
    },
    [room],
  );
  return [transcript, send];
}
