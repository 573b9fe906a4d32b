import { useState } from "react";
import type { CoachRoom } from "./room";
import { callRpc, errorLine } from "./rpcClient";

/** What the branch answer says, for the person: where the new branch carries on. */
export function branchedLine(answer: { agent: string; next_phase_id: string }): string {
  return `Branched: a new session carries on from here with the ${answer.agent}, next: ${answer.next_phase_id.replace(/[_-]+/g, " ")}. This one stays as it is.`;
}

interface Props {
  room: CoachRoom;
  sessionId: string;
  messageId: number;
  /** Called once the branch exists (the list again, with it). */
  onBranched: () => Promise<void>;
}

/**
 * "Branch from here" on a message: after a confirmation step, `coach.branch_session`
 * with `after_message_id` — a new session holding this one as it was after that turn,
 * opened in the live conversation; this one is not changed.
 */
export function BranchFromHere({ room, sessionId, messageId, onBranched }: Props) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [note, setNote] = useState<{ ok: boolean; text: string } | null>(null);

  const branch = async () => {
    setBusy(true);
    setNote(null);
    try {
      const answer = await callRpc(room, "coach.branch_session", { session_id: sessionId, after_message_id: messageId });
      setConfirming(false);
      setNote({ ok: true, text: branchedLine(answer) });
      await onBranched();
    } catch (e) {
      setNote({ ok: false, text: errorLine(e) });
    } finally {
      setBusy(false);
    }
  };

  return (
    <span className="branch-here">
      {!confirming && (
        <button
          type="button"
          className="ghost small"
          onClick={() => {
            setNote(null);
            setConfirming(true);
          }}
        >
          Branch from here
        </button>
      )}
      {confirming && (
        <span className="confirm" role="alertdialog" aria-label="Branch from this message">
          <span>Start a new branch holding this session as it was after this turn? This session stays as it is.</span>
          <button type="button" className="secondary" onClick={() => void branch()} disabled={busy}>
            {busy ? "Branching…" : "Branch"}
          </button>
          <button type="button" className="ghost" onClick={() => setConfirming(false)} disabled={busy}>
            Cancel
          </button>
        </span>
      )}
      {note && (
        <span className={note.ok ? "ok" : "error"} role={note.ok ? "status" : "alert"}>
          {note.text}
        </span>
      )}
    </span>
  );
}
