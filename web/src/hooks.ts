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
  TOPIC_STEPS,
  TOPIC_TRANSCRIPTION,
} from "./room";
import { callRpc, isUnsupportedMethod } from "./rpcClient";
import {
  type BoardAction,
  type BoardState,
  boardReducer,
  initialBoard,
  parseStateMessage,
  readGetStateAnswer,
} from "./state";
import {
  describeStep,
  emptyTranscript,
  parseStepMessage,
  transcriptReducer,
  type TranscriptState,
} from "./transcript";

/**
 * How long the snapshot of a fresh read may take to come on the stream once
 * `coach.get_state` has answered, before the read is asked for again. (The call itself
 * ends by its own limits: the wait for the agent, LiveKit's response timeout.)
 */
export const SNAPSHOT_WAIT_MS = 10_000;

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
 * The design board: coach.state messages of the agent participant through the reducer,
 * and a fresh read (`coach.get_state`) whenever the reducer wants one and the agent is
 * there. Never two reads at once; a failed one is asked again after a growing pause.
 */
export function useBoard(room: CoachRoom): [BoardState, Dispatch<BoardAction>] {
  const [board, dispatch] = useReducer(boardReducer, room, (r: CoachRoom) => initialBoard(r.agent()?.identity ?? null));

  // The agent, as the room says, in the same order as its messages: a new agent's
  // messages are read only after the reducer knows it is the agent.
  useEffect(() => {
    dispatch({ type: "agent", identity: room.agent()?.identity ?? null });
    return room.onAgentChange((agent) => dispatch({ type: "agent", identity: agent?.identity ?? null }));
  }, [room]);

  // Messages are read one after the other, so they reach the reducer in arrival order.
  useEffect(() => {
    let queue = Promise.resolve();
    let live = true;
    const unsubscribe = room.onTextStream(TOPIC_STATE, (stream) => {
      const sender = stream.senderIdentity;
      if (sender !== room.agent()?.identity) {
        console.warn(`coach.state: a stream from ${JSON.stringify(sender)}, not the agent: ignored`);
        return;
      }
      queue = queue.then(async () => {
        try {
          const text = await readAll(stream);
          const message = parseStateMessage(text);
          if (!message) console.warn("coach.state: not a state message, ignored");
          else if (live) dispatch({ type: "message", sender, message });
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

  // Start a fresh read when one is wanted: at once, or once the pause after a failure is over.
  const wanted = board.needsSync && board.sync === null && board.agent !== null && !board.unsupported;
  const retryAt = board.retryAt;
  useEffect(() => {
    if (!wanted) return;
    const wait = retryAt === null ? 0 : retryAt - Date.now();
    if (wait <= 0) {
      dispatch({ type: "syncStarted" });
      return;
    }
    const timer = setTimeout(() => dispatch({ type: "syncStarted" }), wait);
    return () => clearTimeout(timer);
  }, [wanted, retryAt]);

  // One call per sync, each after the one before has ended. The reducer ignores the
  // answers of a sync that is over; its timer ends with it (or with the component).
  const calls = useRef<Promise<void>>(Promise.resolve());
  const syncId = board.sync?.id ?? null;
  useEffect(() => {
    if (syncId === null) return;
    let live = true;
    let snapshotTimer: ReturnType<typeof setTimeout> | undefined;
    calls.current = calls.current.then(async () => {
      if (!live) return; // over before its turn came
      try {
        const answer = readGetStateAnswer(await callRpc(room, "coach.get_state", {}));
        if (!answer) throw new Error("The coach's answer to coach.get_state is not {session_id, step}.");
        if (!live) return;
        snapshotTimer = setTimeout(() => dispatch({ type: "syncFailed", syncId, at: Date.now() }), SNAPSHOT_WAIT_MS);
        dispatch({ type: "syncAnswered", syncId, session_id: answer.session_id, step: answer.step });
      } catch (error) {
        if (!live) return;
        if (isUnsupportedMethod(error)) {
          console.warn("coach.get_state: the agent does not have it", error);
          dispatch({ type: "syncUnsupported", syncId });
        } else {
          console.warn("coach.get_state failed", error);
          dispatch({ type: "syncFailed", syncId, at: Date.now() });
        }
      }
    });
    return () => {
      live = false;
      clearTimeout(snapshotTimer);
    };
  }, [room, syncId]);

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
    // The agents' steps, in arrival order, from the agent only.
    let steps = Promise.resolve();
    const unsubscribeSteps = room.onTextStream(TOPIC_STEPS, (stream) => {
      if (stream.senderIdentity !== room.agent()?.identity) return;
      steps = steps.then(async () => {
        try {
          const step = parseStepMessage(await readAll(stream));
          if (!step) console.warn("coach.steps: not a step message, ignored");
          else if (live) dispatch({ type: "step", id: `step-${stream.streamId}`, text: describeStep(step) });
        } catch (error) {
          console.warn("coach.steps: a message could not be read", error);
        }
      });
    });
    return () => {
      live = false;
      unsubscribe();
      unsubscribeSteps();
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
