import { createRoot } from "react-dom/client";
import { App } from "./App";
import { connectLivekit } from "./livekitRoom";
import "./styles.css";

createRoot(document.getElementById("root")!).render(<App connect={connectLivekit} />);
