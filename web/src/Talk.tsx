import { type FormEvent, type ReactNode, useEffect, useRef, useState } from "react";
import type { CoachRoom } from "./room";
import { callRpc, errorLine } from "./rpcClient";
import type { TranscriptState } from "./transcript";

export type AgentState = "initializing" | "listening" | "thinking" | "speaking" | "idle" | string;

const STATE_LABEL: Record<string, string> = {
  initializing: "Getting ready",
  listening: "Listening",
  thinking: "Thinking",
  speaking: "Speaking",
  idle: "Idle",
};

/** Bars that follow the agent's state, for a room without audio tracks (the same markup as BarVisualizer's). */
export function StateBars({ state }: { state: AgentState | null }) {
  return (
    <div className="visualizer state-bars lk-audio-bar-visualizer" data-lk-va-state={state ?? "disconnected"}>
      {Array.from({ length: 7 }, (_, i) => (
        <span key={i} className="lk-audio-bar" style={{ animationDelay: `${i * 90}ms` }} />
      ))}
    </div>
  );
}

const WHO: Record<TranscriptState["segments"][number]["speaker"], string> = {
  user: "You",
  agent: "Coach",
  step: "Step",
};

interface TalkProps {
  room: CoachRoom;
  agentPresent: boolean;
  agentState: AgentState | null;
  visualizer: ReactNode;
  transcript: TranscriptState;
  sendTyped: (text: string) => Promise<void>;
}

export function Talk({ room, agentPresent, agentState, visualizer, transcript, sendTyped }: TalkProps) {
  const [micOn, setMicOn] = useState(() => room.microphoneEnabled());
  const [micError, setMicError] = useState<string | null>(null);
  const [draft, setDraft] = useState("");
  const [sendError, setSendError] = useState<string | null>(null);
  const [showSteps, setShowSteps] = useState(false);
  const [stopping, setStopping] = useState(false);
  const [stopError, setStopError] = useState<string | null>(null);
  const list = useRef<HTMLOListElement>(null);

  // Keep the newest turn in view (scrolling the list only, never the page).
  useEffect(() => {
    const el = list.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [transcript]);

  const toggleMic = async () => {
    setMicError(null);
    try {
      await room.setMicrophoneEnabled(!micOn);
      setMicOn(room.microphoneEnabled());
    } catch (e) {
      setMicError(errorLine(e));
    }
  };

  // Stop: interrupt what the coach is saying or preparing (as talking over it would).
  const busy = agentPresent && (agentState === "speaking" || agentState === "thinking");
  const stop = async () => {
    setStopError(null);
    setStopping(true);
    try {
      await callRpc(room, "coach.interrupt", {});
    } catch (e) {
      setStopError(errorLine(e));
    } finally {
      setStopping(false);
    }
  };

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const text = draft.trim();
    if (!text) return;
    setSendError(null);
    try {
      await sendTyped(text);
      setDraft("");
    } catch (e) {
      setSendError(errorLine(e));
    }
  };

  const stateLabel = !agentPresent ? "Waiting for the coach" : STATE_LABEL[agentState ?? ""] ?? agentState ?? "Connected";

  return (
    <section className="panel talk" aria-label="Talk">
      <div className="talk-stage">
        {visualizer}
        <div className="agent-state" data-testid="agent-state" data-state={agentPresent ? agentState ?? "" : "absent"}>
          <span className="dot" aria-hidden="true" />
          {stateLabel}
        </div>
        <button
          type="button"
          className={micOn ? "mic on" : "mic off"}
          aria-pressed={micOn}
          onClick={toggleMic}
        >
          {micOn ? "Microphone on" : "Microphone off"}
        </button>
        <button type="button" className="stop" onClick={stop} disabled={!busy || stopping}>
          Stop
        </button>
        {micError && (
          <p className="error" role="alert">
            {micError}
          </p>
        )}
        {stopError && (
          <p className="error" role="alert">
            {stopError}
          </p>
        )}
      </div>

      <div className="transcript-head">
        <h2 className="panel-title">Transcript</h2>
        <label className="toggle">
          <input type="checkbox" checked={showSteps} onChange={(e) => setShowSteps(e.target.checked)} />
          Show steps
        </label>
      </div>
      <ol ref={list} className="transcript" aria-label="Transcript" aria-live="polite">
        {transcript.segments.length === 0 && <li className="empty">What you and the coach say shows up here.</li>}
        {transcript.segments
          .filter((s) => showSteps || s.speaker !== "step")
          .map((s) => (
            <li
              key={s.id}
              className={`turn ${s.speaker}${s.final ? "" : " interim"}`}
              data-segment-id={s.id}
              data-final={s.final}
            >
              <span className="who">{WHO[s.speaker]}</span>
              <span className="said">{s.text}</span>
            </li>
          ))}
      </ol>

      <form className="compose" onSubmit={submit}>
        <input
          aria-label="Message"
          placeholder="Type to the coach…"
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
        />
        <button type="submit" className="primary" disabled={!draft.trim()}>
          Send
        </button>
      </form>
      {sendError && (
        <p className="error" role="alert">
          {sendError}
        </p>
      )}
    </section>
  );
}
