import { useState } from "react";
import type { CoachRoom } from "./room";
import { callRpc, errorLine } from "./rpcClient";

interface Props {
  room: CoachRoom;
  agentPresent: boolean;
  /** Everything of the caller was erased (the conversation has ended). */
  onErased: (sessions: number) => void;
}

/** "Forget me": asks coach what would be erased, then erases with its confirmation token. */
export function ForgetMe({ room, agentPresent, onErased }: Props) {
  const [asked, setAsked] = useState<{ token: string; sessions: number } | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const ask = async () => {
    setBusy(true);
    setError(null);
    try {
      const answer = await callRpc(room, "coach.forget_me", {});
      if (answer.confirm_token !== null) setAsked({ token: answer.confirm_token, sessions: answer.sessions });
    } catch (e) {
      setError(errorLine(e));
    } finally {
      setBusy(false);
    }
  };

  const erase = async () => {
    if (!asked) return;
    setBusy(true);
    setError(null);
    try {
      const answer = await callRpc(room, "coach.forget_me", { confirm_token: asked.token });
      if (answer.erased) {
        onErased(answer.sessions);
        return;
      }
      setError("Nothing was erased; try again.");
    } catch (e) {
      setAsked(null); // a token is tried once: ask again
      setError(errorLine(e));
    }
    setBusy(false);
  };

  return (
    <div className="forget-me">
      <button type="button" className="ghost" onClick={() => void ask()} disabled={busy || !agentPresent || asked !== null}>
        Forget me
      </button>
      {(asked || error) && (
        <div className="confirm popover" role="alertdialog" aria-label="Forget me">
          {asked && (
            <>
              <p>
                Erase <strong>{room.localIdentity}</strong> for good: your{" "}
                <strong data-testid="forget-sessions">
                  {asked.sessions} session{asked.sessions === 1 ? "" : "s"}
                </strong>{" "}
                and everything coach remembers about you. This conversation ends.
              </p>
              <button type="button" className="danger" onClick={() => void erase()} disabled={busy}>
                {busy ? "Erasing…" : "Erase everything"}
              </button>
              <button type="button" className="ghost" onClick={() => setAsked(null)} disabled={busy}>
                Cancel
              </button>
            </>
          )}
          {error && (
            <p className="error" role="alert">
              {error}
            </p>
          )}
          {!asked && error && (
            <button type="button" className="ghost small" onClick={() => setError(null)}>
              Close
            </button>
          )}
        </div>
      )}
    </div>
  );
}
