import { useCallback, useState } from "react";
import { Board } from "./Board";
import { ForgetMe } from "./ForgetMe";
import { useAgent, useBoard, useConnectionStatus, useTranscript } from "./hooks";
import { LivekitRoomLayer, LivekitVisualizer } from "./LivekitParts";
import { ATTR_AGENT_STATE, ATTR_COACH_AGENT, ATTR_COACH_PHASE, type CoachRoom, type Connect } from "./room";
import { callRpc } from "./rpcClient";
import { SessionsPanel } from "./Sessions";
import { StartScreen } from "./StartScreen";
import { StateBars, Talk } from "./Talk";

export interface AppProps {
  /** Makes a connected room for an identity (main.tsx: a token from the server, then livekit). */
  connect: Connect;
}

export function App({ connect }: AppProps) {
  const [room, setRoom] = useState<CoachRoom | null>(null);
  const [lastIdentity, setLastIdentity] = useState("");
  const [notice, setNotice] = useState<string | null>(null);

  const leave = useCallback(async (current: CoachRoom, message: string | null = null) => {
    setLastIdentity(message === null ? current.localIdentity : "");
    setNotice(message);
    setRoom(null);
    try {
      await current.disconnect();
    } catch {
      // Gone already.
    }
  }, []);

  if (!room) {
    return <StartScreen connect={connect} onConnected={setRoom} initialIdentity={lastIdentity} notice={notice} />;
  }
  const erased = (sessions: number) =>
    void leave(room, `${room.localIdentity} was erased, with ${sessions} session${sessions === 1 ? "" : "s"}.`);
  const view = <SessionView room={room} onLeave={() => void leave(room)} onErased={erased} />;
  return room.livekitRoom ? <LivekitRoomLayer room={room.livekitRoom}>{view}</LivekitRoomLayer> : view;
}

const STATUS_LABEL = {
  connecting: "Connecting",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  disconnected: "Disconnected",
} as const;

interface SessionViewProps {
  room: CoachRoom;
  onLeave: () => void;
  onErased: (sessions: number) => void;
}

function SessionView({ room, onLeave, onErased }: SessionViewProps) {
  const agent = useAgent(room);
  const status = useConnectionStatus(room);
  const [board] = useBoard(room);
  const [transcript, sendTyped] = useTranscript(room);
  const agentState = agent?.attributes[ATTR_AGENT_STATE] ?? null;

  const focus = useCallback(async (item: string) => {
    await callRpc(room, "coach.focus", { item });
  }, [room]);

  return (
    <div className="app">
      <header className="topbar">
        <div className="brand">
          <span className="brand-mark" aria-hidden="true" />
          coach
        </div>
        <div className="topbar-info">
          <span className={`conn ${status}`} data-testid="connection">
            <span className="dot" aria-hidden="true" />
            {STATUS_LABEL[status]}
          </span>
          <span className="who-am-i">
            as <strong>{room.localIdentity}</strong>
          </span>
        </div>
        <div className="topbar-actions">
          <ForgetMe room={room} agentPresent={agent !== null} onErased={onErased} />
          <button type="button" className="danger" onClick={onLeave}>
            Disconnect
          </button>
        </div>
      </header>
      {status === "disconnected" && (
        <div className="banner" role="status">
          The connection to the room has ended. Disconnect and connect again to carry on.
        </div>
      )}
      <main className="layout">
        <Talk
          room={room}
          agentPresent={agent !== null}
          agentState={agentState}
          visualizer={room.livekitRoom ? <LivekitVisualizer /> : <StateBars state={agent ? agentState : null} />}
          transcript={transcript}
          sendTyped={sendTyped}
        />
        <Board
          board={board}
          agentAttr={agent?.attributes[ATTR_COACH_AGENT]}
          phaseAttr={agent?.attributes[ATTR_COACH_PHASE]}
          onFocus={focus}
        />
        <SessionsPanel room={room} agentPresent={agent !== null} currentSessionId={board.session_id} />
      </main>
    </div>
  );
}
