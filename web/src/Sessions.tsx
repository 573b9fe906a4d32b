import { useCallback, useEffect, useRef, useState } from "react";
import { BranchFromHere } from "./BranchFromHere";
import type { ConversationEntry, PhaseOutputView, SessionSummary } from "./rpc";
import type { CoachRoom } from "./room";
import { callRpc, errorLine } from "./rpcClient";
import { exportFileName, fetchExport, saveText } from "./selfService";

/** Conversation entries asked for at a time. */
export const CONVERSATION_PAGE = 20;

const STATUS_LABEL: Record<string, string> = {
  in_progress: "In progress",
  completed: "Completed",
  failed: "Failed",
  pending: "Pending",
  running: "Running",
};

function when(iso: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return date.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

function label(text: string): string {
  return text.replace(/[_-]+/g, " ");
}

interface Node {
  session: SessionSummary;
  children: Node[];
}

/** Sessions as a tree: a branch under its parent (when the parent is in the list). */
export function sessionTree(sessions: SessionSummary[]): Node[] {
  const byId = new Map(sessions.map((s) => [s.id, { session: s, children: [] as Node[] }]));
  const roots: Node[] = [];
  for (const node of byId.values()) {
    const parent = node.session.parent_session_id ? byId.get(node.session.parent_session_id) : undefined;
    if (parent && parent !== node) parent.children.push(node);
    else roots.push(node);
  }
  return roots;
}

interface PanelProps {
  room: CoachRoom;
  agentPresent: boolean;
  /** The session open in this conversation (from the board's state). */
  currentSessionId: string | null;
}

export function SessionsPanel({ room, agentPresent, currentSessionId }: PanelProps) {
  const [sessions, setSessions] = useState<SessionSummary[] | null>(null);
  const [more, setMore] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(false);
  const [open, setOpen] = useState<string | null>(null);

  // Each call has a number; only the newest one's answer (or error) is shown, and
  // `loading` is the newest one's: an older answer that comes late is dropped.
  const latest = useRef(0);
  useEffect(
    () => () => {
      latest.current += 1; // unmounted: no answer is wanted any more
    },
    [],
  );

  const refresh = useCallback(async () => {
    const call = ++latest.current;
    setLoading(true);
    setError(null);
    try {
      const answer = await callRpc(room, "coach.list_sessions", { limit: 50 });
      if (call !== latest.current) return;
      setSessions(answer.sessions);
      setMore(answer.more);
    } catch (e) {
      if (call === latest.current) setError(errorLine(e));
    } finally {
      if (call === latest.current) setLoading(false);
    }
  }, [room]);

  // Load when the agent is there, and again when the open session changes.
  useEffect(() => {
    if (agentPresent) void refresh();
  }, [agentPresent, currentSessionId, refresh]);

  const tree = sessions ? sessionTree(sessions) : [];
  const [exporting, setExporting] = useState(false);
  const [exportNote, setExportNote] = useState<{ ok: boolean; text: string } | null>(null);

  // Everything stored about the caller, chunk by chunk, saved as one JSON file.
  const exportAll = async () => {
    setExporting(true);
    setExportNote(null);
    try {
      const text = await fetchExport((request) => callRpc(room, "coach.export_my_data", request));
      const name = exportFileName(room.localIdentity);
      saveText(text, name);
      setExportNote({ ok: true, text: `Saved ${name}.` });
    } catch (e) {
      setExportNote({ ok: false, text: errorLine(e) });
    } finally {
      setExporting(false);
    }
  };

  return (
    <section className="panel sessions" aria-label="Sessions">
      <header className="sessions-head">
        <h2 className="panel-title">Your sessions</h2>
        <div className="sessions-buttons">
          <button type="button" className="ghost" onClick={() => void exportAll()} disabled={exporting || !agentPresent}>
            {exporting ? "Exporting…" : "Export"}
          </button>
          <button type="button" className="ghost" onClick={() => void refresh()} disabled={loading || !agentPresent}>
            {loading ? "Loading…" : "Refresh"}
          </button>
        </div>
      </header>
      {exportNote && (
        <p className={exportNote.ok ? "ok" : "error"} role={exportNote.ok ? "status" : "alert"}>
          {exportNote.text}
        </p>
      )}
      {error && (
        <p className="error" role="alert">
          {error}
        </p>
      )}
      {!sessions && !error && <p className="empty">{agentPresent ? "Loading…" : "Waiting for the coach…"}</p>}
      {sessions && sessions.length === 0 && <p className="empty">No sessions yet.</p>}
      <ul className="session-tree" aria-label="Session list">
        {tree.map((node) => (
          <SessionNode
            key={node.session.id}
            node={node}
            room={room}
            open={open}
            setOpen={setOpen}
            currentSessionId={currentSessionId}
            onResumed={refresh}
          />
        ))}
      </ul>
      {more && <p className="muted">Older sessions are not shown.</p>}
    </section>
  );
}

interface NodeProps {
  node: Node;
  room: CoachRoom;
  open: string | null;
  setOpen: (id: string | null) => void;
  currentSessionId: string | null;
  onResumed: () => Promise<void>;
}

function SessionNode({ node, room, open, setOpen, currentSessionId, onResumed }: NodeProps) {
  const s = node.session;
  const expanded = open === s.id;
  const current = s.id === currentSessionId;
  const [resumeError, setResumeError] = useState<string | null>(null);
  const [resumed, setResumed] = useState<string | null>(null);
  const [resuming, setResuming] = useState(false);
  const [confirmingDelete, setConfirmingDelete] = useState(false);
  const [deleting, setDeleting] = useState(false);
  const [deleteError, setDeleteError] = useState<string | null>(null);

  const erase = async () => {
    setDeleteError(null);
    setDeleting(true);
    try {
      await callRpc(room, "coach.delete_session", { session_id: s.id });
      setConfirmingDelete(false);
      await onResumed(); // the list again, without it
    } catch (e) {
      setDeleteError(errorLine(e));
    } finally {
      setDeleting(false);
    }
  };

  const resume = async () => {
    setResumeError(null);
    setResumed(null);
    setResuming(true);
    try {
      const answer = await callRpc(room, "coach.resume_session", { session_id: s.id });
      setResumed(`Resumed with the ${answer.agent}, next: ${label(answer.next_phase_id)}.`);
      await onResumed();
    } catch (e) {
      setResumeError(errorLine(e));
    } finally {
      setResuming(false);
    }
  };

  return (
    <li className="session-node" data-session-id={s.id}>
      <div className={`session${expanded ? " expanded" : ""}${current ? " current" : ""}`}>
        <button
          type="button"
          className="session-main"
          aria-expanded={expanded}
          onClick={() => setOpen(expanded ? null : s.id)}
        >
          <span className="session-challenge">{s.challenge ?? "Untitled session"}</span>
          <span className="session-meta">
            <span className={`status ${s.status}`}>{STATUS_LABEL[s.status] ?? s.status}</span>
            <span className="progress" data-testid="phases-progress">
              {s.phases_done}/{s.phases_total} phases
            </span>
            {(s.current_agent || s.current_phase_id) && (
              <span className="where">
                {[s.current_agent, s.current_phase_id && label(s.current_phase_id)].filter(Boolean).join(" · ")}
              </span>
            )}
          </span>
          <span className="session-when">
            {current && <span className="tag current-tag">Open now</span>}
            {s.parent_session_id && (
              <span className="branch-note">
                branch{s.branched_from_phase ? ` after ${label(s.branched_from_phase)}` : ""} ·{" "}
              </span>
            )}
            updated {when(s.updated_at)}
          </span>
        </button>
        <div className="session-actions">
          <button type="button" className="secondary" onClick={resume} disabled={resuming}>
            {resuming ? "Resuming…" : "Resume"}
          </button>
          {!current && !confirmingDelete && (
            <button type="button" className="ghost" onClick={() => setConfirmingDelete(true)}>
              Delete
            </button>
          )}
        </div>
        {confirmingDelete && (
          <div className="confirm" role="alertdialog" aria-label="Delete this session">
            <p>
              Delete “{s.challenge ?? "Untitled session"}” for good? Its phases, conversation and board are erased
              {node.children.length > 0 ? "; its branches stay" : ""}.
            </p>
            <button type="button" className="danger" onClick={() => void erase()} disabled={deleting}>
              {deleting ? "Deleting…" : "Delete for good"}
            </button>
            <button type="button" className="ghost" onClick={() => setConfirmingDelete(false)} disabled={deleting}>
              Cancel
            </button>
          </div>
        )}
        {deleteError && (
          <p className="error" role="alert">
            {deleteError}
          </p>
        )}
        {resumeError && (
          <p className="error" role="alert">
            {resumeError}
          </p>
        )}
        {resumed && <p className="ok">{resumed}</p>}
        {expanded && <SessionDetail room={room} sessionId={s.id} onBranched={onResumed} />}
      </div>
      {node.children.length > 0 && (
        <ul className="branches" aria-label="Branches">
          {node.children.map((child) => (
            <SessionNode
              key={child.session.id}
              node={child}
              room={room}
              open={open}
              setOpen={setOpen}
              currentSessionId={currentSessionId}
              onResumed={onResumed}
            />
          ))}
        </ul>
      )}
    </li>
  );
}

interface DetailProps {
  room: CoachRoom;
  sessionId: string;
  onBranched: () => Promise<void>;
}

function SessionDetail({ room, sessionId, onBranched }: DetailProps) {
  return (
    <div className="session-detail">
      <Phases room={room} sessionId={sessionId} />
      <Conversation room={room} sessionId={sessionId} onBranched={onBranched} />
    </div>
  );
}

function Phases({ room, sessionId }: { room: CoachRoom; sessionId: string }) {
  const [withPrompts, setWithPrompts] = useState(false);
  const [phases, setPhases] = useState<PhaseOutputView[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    setError(null);
    callRpc(room, "coach.get_phase_outputs", { session_id: sessionId, include_prompts: withPrompts }).then(
      (answer) => live && setPhases(answer.phases),
      (e) => live && setError(errorLine(e)),
    );
    return () => {
      live = false;
    };
  }, [room, sessionId, withPrompts]);

  return (
    <div className="detail-block" data-testid="phases">
      <DetailHead title="Phases" toggle="Show prompts" on={withPrompts} onToggle={setWithPrompts} error={error} />
      {phases && phases.length === 0 && <p className="empty">No phases yet.</p>}
      <ol className="phases">
        {phases?.map((p) => (
          <li key={p.phase_id} className="phase" data-phase-id={p.phase_id}>
            <div className="phase-head">
              <span className="phase-name">{p.phase_name}</span>
              <span className={`status ${p.status}`}>{STATUS_LABEL[p.status] ?? p.status}</span>
            </div>
            {p.output && <p className="phase-output">{p.output}</p>}
            {p.error && <p className="error">{p.error}</p>}
            {withPrompts && (
              <div className="prompts">
                <div className="prompt">
                  <span className="prompt-label">System prompt</span>
                  <pre data-testid="system-prompt">{p.system_prompt ?? "—"}</pre>
                </div>
                <div className="prompt">
                  <span className="prompt-label">User input</span>
                  <pre data-testid="user-input">{p.user_input ?? "—"}</pre>
                </div>
              </div>
            )}
            {p.truncated.length > 0 && <p className="muted">Cut to fit: {p.truncated.join(", ")}</p>}
          </li>
        ))}
      </ol>
    </div>
  );
}

function EntryView({ entry, branch }: { entry: ConversationEntry; branch: DetailProps }) {
  switch (entry.kind) {
    case "message":
      return (
        <li className={`entry message ${entry.role ?? ""}`} data-kind="message" data-message-id={entry.message_id ?? undefined}>
          <span className="who">{entry.role === "user" ? "You" : entry.role === "assistant" ? "Coach" : entry.role}</span>
          <span className="said">
            {entry.text}
            {entry.truncated && " …"}
          </span>
          {entry.interrupted && <span className="tag">interrupted</span>}
          {entry.message_id !== null && entry.message_id !== undefined && (
            <BranchFromHere
              room={branch.room}
              sessionId={branch.sessionId}
              messageId={entry.message_id}
              onBranched={branch.onBranched}
            />
          )}
        </li>
      );
    case "tool_call":
      return (
        <li className="entry step" data-kind="tool_call">
          <span className="step-kind">call</span> <code>{entry.tool}</code> <code className="args">{entry.text}</code>
        </li>
      );
    case "tool_output":
      return (
        <li className={`entry step${entry.is_error ? " failed" : ""}`} data-kind="tool_output">
          <span className="step-kind">{entry.is_error ? "failed" : "output"}</span> <code>{entry.tool}</code>{" "}
          <span className="args">{entry.text}</span>
        </li>
      );
    case "handoff":
      return (
        <li className="entry step" data-kind="handoff">
          <span className="step-kind">handoff</span> {entry.from_agent ?? "?"} → {entry.to_agent ?? "?"}
        </li>
      );
  }
}

function Conversation({ room, sessionId, onBranched }: DetailProps) {
  const [withSteps, setWithSteps] = useState(false);
  const [entries, setEntries] = useState<ConversationEntry[] | null>(null);
  const [before, setBefore] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loadingOlder, setLoadingOlder] = useState(false);
  // The query the entries answer (session, steps or not): "Load older" appends only to its own.
  const query = useRef(0);

  useEffect(() => {
    let live = true;
    query.current += 1;
    setError(null);
    setEntries(null);
    setBefore(null);
    setLoadingOlder(false);
    callRpc(room, "coach.get_session_conversation", {
      session_id: sessionId,
      include_steps: withSteps,
      limit: CONVERSATION_PAGE,
    }).then(
      (answer) => {
        if (!live) return;
        setEntries(answer.entries);
        setBefore(answer.before);
      },
      (e) => live && setError(errorLine(e)),
    );
    return () => {
      live = false;
    };
  }, [room, sessionId, withSteps]);

  const loadOlder = async () => {
    if (before === null) return;
    const asked = query.current;
    setLoadingOlder(true);
    setError(null);
    try {
      const answer = await callRpc(room, "coach.get_session_conversation", {
        session_id: sessionId,
        include_steps: withSteps,
        limit: CONVERSATION_PAGE,
        before,
      });
      if (asked !== query.current) return; // the toggle (or the session) changed meanwhile
      setEntries((current) => [...answer.entries, ...(current ?? [])]);
      setBefore(answer.before);
    } catch (e) {
      if (asked === query.current) setError(errorLine(e));
    } finally {
      if (asked === query.current) setLoadingOlder(false);
    }
  };

  return (
    <div className="detail-block" data-testid="conversation">
      <DetailHead title="Conversation" toggle="Show steps" on={withSteps} onToggle={setWithSteps} error={error} />
      {before !== null && entries && (
        <button type="button" className="ghost small" onClick={loadOlder} disabled={loadingOlder}>
          {loadingOlder ? "Loading…" : "Load older"}
        </button>
      )}
      {entries && entries.length === 0 && <p className="empty">Nothing said yet.</p>}
      <ol className="entries">
        {entries?.map((entry, i) => (
          <EntryView
            key={`${entry.kind}-${entry.step ?? entry.message_id ?? "x"}-${i}`}
            entry={entry}
            branch={{ room, sessionId, onBranched }}
          />
        ))}
      </ol>
    </div>
  );
}

/** A detail block's heading: its title, the toggle that re-asks with more, its error line. */
function DetailHead(props: {
  title: string;
  toggle: string;
  on: boolean;
  onToggle: (on: boolean) => void;
  error: string | null;
}) {
  return (
    <>
      <div className="detail-head">
        <h4>{props.title}</h4>
        <label className="toggle">
          <input type="checkbox" checked={props.on} onChange={(e) => props.onToggle(e.target.checked)} />
          {props.toggle}
        </label>
      </div>
      {props.error && (
        <p className="error" role="alert">
          {props.error}
        </p>
      )}
    </>
  );
}
