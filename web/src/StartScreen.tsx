import { type FormEvent, useState } from "react";
import type { CoachRoom, Connect } from "./room";
import { RoomUnreachable } from "./livekitRoom";
import { errorLine } from "./rpcClient";

interface Props {
  connect: Connect;
  onConnected: (room: CoachRoom) => void;
  initialIdentity?: string;
  /** A line about how the last conversation ended (e.g. the person was erased). */
  notice?: string | null;
}

export function StartScreen({ connect, onConnected, initialIdentity = "", notice = null }: Props) {
  const [identity, setIdentity] = useState(initialIdentity);
  const [error, setError] = useState<string | null>(null);
  // A room that could not be joined is no fault of the name: the field is not marked.
  const [aboutName, setAboutName] = useState(true);
  const [busy, setBusy] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const name = identity.trim();
    if (!name) {
      setAboutName(true);
      setError("Enter your name to start.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      onConnected(await connect(name));
    } catch (e) {
      setAboutName(!(e instanceof RoomUnreachable));
      setError(errorLine(e));
      setBusy(false);
    }
  };

  return (
    <main className="start">
      <form className="start-card" onSubmit={submit} noValidate>
        <div className="brand brand-large">
          <span className="brand-mark" aria-hidden="true" />
          coach
        </div>
        {notice && (
          <p className="ok" role="status">
            {notice}
          </p>
        )}
        <p className="start-lead">
          Talk a design challenge through with your coach. The board fills in as you go: insights, ideas, an
          evaluation and a brief.
        </p>
        <label className="field">
          <span>Your name</span>
          <input
            name="identity"
            autoComplete="username"
            autoFocus
            value={identity}
            onChange={(e) => setIdentity(e.target.value)}
            aria-invalid={error && aboutName ? true : undefined}
            aria-describedby={error && aboutName ? "identity-error" : undefined}
            placeholder="e.g. ada"
            disabled={busy}
          />
        </label>
        {error && (
          <p className="error" id={aboutName ? "identity-error" : "join-error"} role="alert">
            {error}
          </p>
        )}
        <button className="primary" type="submit" disabled={busy}>
          {busy ? "Connecting…" : "Connect"}
        </button>
        <p className="hint">Your microphone is used once you connect; you can also type.</p>
      </form>
    </main>
  );
}
