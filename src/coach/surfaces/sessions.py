"""``python -m coach sessions list | show ID | export ID``: the operator's view of sessions."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any, TextIO

from livekit.agents import llm

from ..errors import SessionNotFound
from ..persistence import Repository
from ..state.history import item_text


async def list_sessions(store: Repository, out: TextIO, *, user: str | None = None) -> None:
    """One line per session: id, user, status, progress, updated, challenge."""
    if user is not None:
        found = await store.find_user(user)
        sessions = await store.get_user_sessions(found.id) if found is not None else []
    else:
        sessions = await store.list_sessions()
    total = len(store.phase_ids)
    for s in sessions:
        print(
            f"{s.id}  {s.status:<11}  {s.completed_phases}/{total}  "
            f"{s.updated_at:%Y-%m-%d %H:%M}  {s.design_challenge or '-'}",
            file=out,
        )
    if not sessions:
        print("no sessions", file=out)


async def show_session(
    store: Repository, session_id: str, out: TextIO, *, steps: bool = False, prompts: bool = False
) -> None:
    """Phases, conversation, zones and the delta log of one session."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    print(f"session {session.id}  [{session.status}]  user {session.user_id}", file=out)
    print(f"challenge: {session.design_challenge or '-'}", file=out)
    print(
        f"agent: {session.current_agent or '-'}  phase: {session.current_phase_id or '-'}", file=out
    )
    print("\n## phases", file=out)
    for o in await store.get_phase_outputs(session_id, include_prompts=prompts):
        print(f"- {o.phase_id} ({o.phase_name}): {o.status}  {o.output or o.error or ''}", file=out)
        if prompts:
            print(_indent(f"system prompt:\n{o.system_prompt or '-'}"), file=out)
            print(_indent(f"user input:\n{o.user_input or '-'}"), file=out)
    print("\n## conversation", file=out)
    if steps:
        for item in await store.load_agent_state(session_id):
            print(_step_line(item), file=out)
    else:
        for m in await store.get_session_conversation(session_id):
            mark = " [interrupted]" if m.interrupted else ""
            print(f"{m.role:>9}: {m.content}{mark}", file=out)
    state = await store.get_state(session_id)
    print(f"\n## state (step {state.step})", file=out)
    for zone in ("data", "template", "view"):
        print(f"{zone}: {json.dumps(getattr(state, zone), indent=2, ensure_ascii=False)}", file=out)
    print("\n## deltas", file=out)
    for d in await store.get_deltas(session_id):
        print(
            f"{d.step:>4}  {d.turn_id or '-'}  {d.trigger}/{d.source}  {d.actor_id or '-'}  "
            f"{d.delta_type} {d.path}  {d.action.tool or d.action.type}  count={d.result.count}",
            file=out,
        )


async def export_session(store: Repository, session_id: str, out: TextIO) -> None:
    """Everything stored about one session, as one JSON document."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    state = await store.get_state(session_id)
    document = {
        "session": asdict(session),
        "phase_outputs": [asdict(o) for o in await store.get_phase_outputs(session_id)],
        "conversation": [asdict(m) for m in await store.get_session_conversation(session_id)],
        "steps": [
            item.model_dump(mode="json")
            if isinstance(
                item, llm.ChatMessage | llm.FunctionCall | llm.FunctionCallOutput | llm.AgentHandoff
            )
            else repr(item)
            for item in await store.load_agent_state(session_id)
        ],
        "state": asdict(state),
        "deltas": [d.to_json() for d in await store.get_deltas(session_id)],
    }
    json.dump(document, out, indent=2, default=_json_default, ensure_ascii=False)
    print(file=out)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot export {type(value).__name__}")


def _step_line(item: object) -> str:
    if isinstance(item, llm.ChatMessage):
        mark = " [interrupted]" if item.interrupted else ""
        return f"{item.role:>9}: {item.text_content or ''}{mark}"
    if isinstance(item, llm.FunctionCall):
        return f"     tool ⚙ {item.name}({item.arguments})"
    if isinstance(item, llm.FunctionCallOutput):
        return f"       ⮑ {'error: ' if item.is_error else ''}{item_text(item)}"
    if isinstance(item, llm.AgentHandoff):
        return f"  handoff ↪ {item.old_agent_id or '-'} → {item.new_agent_id}"
    return f"  ({type(item).__name__})"


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
