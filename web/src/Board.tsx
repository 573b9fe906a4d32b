import { useState } from "react";
import { Markdown } from "./Markdown";
import type { Evaluation } from "./rpc";
import { errorLine } from "./rpcClient";
import type { BoardState } from "./state";

interface BoardProps {
  board: BoardState;
  /** `coach.agent` and `coach.phase` of the agent participant ("" or undefined: not set). */
  agentAttr: string | undefined;
  phaseAttr: string | undefined;
  onFocus: (itemId: string) => Promise<void>;
}

/** Shown when the agent has no `coach.get_state` (LiveKit's "unsupported method"). */
export const UNSUPPORTED_LINE = "This coach does not send its board; update the worker.";

const AGENT_LABEL: Record<string, string> = { coach: "Coach", strategist: "Strategist", evaluator: "Evaluator" };

function title(text: string): string {
  return text
    .replace(/[_-]+/g, " ")
    .replace(/^\w/, (c) => c.toUpperCase());
}

function Score({ label, value }: { label: string; value: number }) {
  const clamped = Math.max(0, Math.min(5, Math.round(value)));
  return (
    <div className="score" data-testid={`score-${label.toLowerCase()}`}>
      <span className="score-label">{label}</span>
      <span className="score-dots" role="img" aria-label={`${label} ${clamped} of 5`}>
        {[1, 2, 3, 4, 5].map((n) => (
          <span key={n} className={n <= clamped ? "pip full" : "pip"} />
        ))}
      </span>
      <span className="score-value">{clamped}/5</span>
    </div>
  );
}

function EvaluationCard({ evaluation }: { evaluation: Evaluation | null }) {
  if (!evaluation) return <p className="empty">Not evaluated yet.</p>;
  return (
    <div className="evaluation" data-testid="evaluation">
      <Score label="Desirability" value={evaluation.desirability} />
      <Score label="Feasibility" value={evaluation.feasibility} />
      <Score label="Viability" value={evaluation.viability} />
      <p className="evaluation-summary">{evaluation.summary}</p>
    </div>
  );
}

export function Board({ board, agentAttr, phaseAttr, onFocus }: BoardProps) {
  const [focusError, setFocusError] = useState<string | null>(null);
  const { data, template, view } = board;
  const agent = agentAttr || view?.agent || null;
  const phase = phaseAttr || view?.phase_id || null;
  const focus = view?.focus ?? null;
  const syncing = !board.unsupported && (board.needsSync || board.sync !== null || board.awaitingSnapshot);

  const focusOn = async (id: string) => {
    setFocusError(null);
    try {
      await onFocus(id);
    } catch (e) {
      setFocusError(errorLine(e));
    }
  };

  const selected = data.ideas.find((i) => i.id === data.selected_idea_id) ?? null;
  const search = data.search;
  const emptySearch = board.emptySearch;

  return (
    <section className="panel board" aria-label="Design board" data-testid="board" data-session={board.session_id ?? ""} data-step={board.step}>
      <header className="board-head">
        <h2 className="panel-title">Design board</h2>
        <div className="badges">
          <span className="badge agent" data-testid="active-agent">
            <span className="badge-key">Agent</span> {agent ? AGENT_LABEL[agent] ?? title(agent) : "—"}
          </span>
          <span className="badge phase" data-testid="active-phase">
            <span className="badge-key">Phase</span> {phase ? title(phase) : "—"}
          </span>
          {board.synced && <span className="step">step {board.step}</span>}
          {syncing && board.synced && <span className="syncing">Updating…</span>}
        </div>
      </header>

      {board.unsupported && (
        <p className="error" role="alert" data-testid="board-unsupported">
          {UNSUPPORTED_LINE}
        </p>
      )}
      {!board.synced ? (
        board.unsupported ? null : (
          <div className="board-waiting">
            <span className="spinner" aria-hidden="true" />
            Waiting for the coach to share the board…
          </div>
        )
      ) : (
        <div className="board-body">
          <div className="card challenge">
            <h3>Challenge</h3>
            {data.challenge ? (
              <p className="challenge-text" data-testid="challenge">
                {data.challenge}
              </p>
            ) : (
              <p className="empty">No challenge yet: tell the coach what you want to work on.</p>
            )}
          </div>

          <div className="columns">
            <div className="card">
              <h3>
                Insights <span className="count">{data.insights.length}</span>
              </h3>
              {data.insights.length === 0 ? (
                <p className="empty">None yet.</p>
              ) : (
                <ul className="items" aria-label="Insights">
                  {data.insights.map((insight) => {
                    const focused = focus?.kind === "insight" && focus.id === insight.id;
                    return (
                      <li key={insight.id}>
                        <button
                          type="button"
                          className={focused ? "item focused" : "item"}
                          data-item-id={insight.id}
                          aria-pressed={focused}
                          onClick={() => focusOn(insight.id)}
                        >
                          <span className="item-text">{insight.text}</span>
                          {insight.phase_id && <span className="tag">{title(insight.phase_id)}</span>}
                        </button>
                      </li>
                    );
                  })}
                </ul>
              )}
            </div>

            <div className="card">
              <h3>
                Ideas <span className="count">{data.ideas.length}</span>
              </h3>
              {data.ideas.length === 0 ? (
                <p className="empty">None yet.</p>
              ) : (
                <ul className="items" aria-label="Ideas">
                  {data.ideas.map((idea) => {
                    const focused = focus?.kind === "idea" && focus.id === idea.id;
                    const isSelected = idea.id === data.selected_idea_id;
                    return (
                      <li key={idea.id}>
                        <button
                          type="button"
                          className={`item idea${focused ? " focused" : ""}${isSelected ? " selected" : ""}`}
                          data-item-id={idea.id}
                          data-selected={isSelected}
                          aria-pressed={focused}
                          onClick={() => focusOn(idea.id)}
                        >
                          <span className="item-title">
                            {idea.title}
                            {isSelected && <span className="tag selected-tag">Selected</span>}
                          </span>
                          <span className="item-text">{idea.description}</span>
                        </button>
                      </li>
                    );
                  })}
                </ul>
              )}
            </div>
          </div>
          {focusError && (
            <p className="error" role="alert" data-testid="focus-error">
              {focusError}
            </p>
          )}

          <div className="columns">
            <div className="card">
              <h3>Evaluation</h3>
              {selected && (
                <p className="muted" data-testid="selected-idea">
                  Selected idea: <strong>{selected.title}</strong>
                </p>
              )}
              <EvaluationCard evaluation={data.evaluation} />
            </div>

            <div className="card" data-testid="search">
              <h3>Search of past work</h3>
              {emptySearch && (
                <p className="search-empty" data-testid="search-empty">
                  {emptySearch.query ? <>Nothing found for “{emptySearch.query}”.</> : <>The last search found nothing.</>}
                </p>
              )}
              {search.query === null && search.results.length === 0 ? (
                !emptySearch && <p className="empty">No search yet.</p>
              ) : (
                <>
                  <p className="muted">
                    {emptySearch ? "Before that, " : ""}“{search.query ?? ""}”: {search.results.length}{" "}
                    {search.results.length === 1 ? "result" : "results"}
                  </p>
                  <ul className="results">
                    {search.results.map((r, i) => (
                      <li key={i}>
                        <span className={`tag ${r.kind}`}>{r.kind}</span> {r.text}
                      </li>
                    ))}
                  </ul>
                </>
              )}
            </div>
          </div>

          <div className="card brief">
            <h3>Brief</h3>
            {template?.markdown ? (
              <Markdown className="markdown" source={template.markdown} />
            ) : (
              <p className="empty">The brief is written once there is something on the board.</p>
            )}
          </div>

          {board.lastDelta && (
            <p className="last-change" data-testid="last-change">
              Last change: <code>{board.lastDelta.path}</code>
              {board.lastDelta.action.tool ? <> by {board.lastDelta.action.tool}</> : null}
              {board.lastDelta.actor_id ? <> ({board.lastDelta.actor_id})</> : null}
            </p>
          )}
        </div>
      )}
    </section>
  );
}
