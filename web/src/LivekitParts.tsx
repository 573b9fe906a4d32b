// The parts of the talk screen that need a real livekit Room (components-react).

import {
  BarVisualizer,
  RoomAudioRenderer,
  RoomContext,
  StartAudio,
  useVoiceAssistant,
} from "@livekit/components-react";
import type { ReactNode } from "react";
import type { Room } from "livekit-client";

/** Gives components-react the room, plays the agent's audio, and asks to start audio if blocked. */
export function LivekitRoomLayer({ room, children }: { room: Room; children: ReactNode }) {
  return (
    <RoomContext.Provider value={room}>
      {children}
      <RoomAudioRenderer />
      <StartAudio className="start-audio" label="Click to hear the coach" />
    </RoomContext.Provider>
  );
}

/** The agent's voice as bars, following its state. */
export function LivekitVisualizer() {
  const { state, audioTrack } = useVoiceAssistant();
  return <BarVisualizer className="visualizer" state={state} barCount={7} track={audioTrack} />;
}
