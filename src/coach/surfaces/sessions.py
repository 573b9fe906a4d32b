"""``python -m coach sessions list | show | export | branch | delete | prune`` and ``users
show | forget | delete``: the operator's view of sessions (branches under the session they
came from), of what coach remembers about a person, and the erasing of personal data.

``show`` and ``export`` page through a session (:data:`PAGE` rows per read) and write as
they read, so a session of any length is never held whole. None of it imports the agent
framework: a stored step's classes are loaded with the step (``show --steps``,
``export``), and only then.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TextIO

from ..errors import ConfigError, SessionNotFound
from ..state.person import PersonError, forget, forget_all, person_lines
from ..state.shapes import person_of
from ..state.zones import Action, Delta, DeltaSpec, ResultMeta
from ..store import MessageRecord, Store, UserRecord, check_identity, session_tree

PAGE: Final = 500
"""Rows read per page."""


async def _messages(store: Store, session_id: str) -> AsyncIterator[MessageRecord]:
    after: int | None = None
    while page := await store.get_session_conversation(session_id, after_id=after, limit=PAGE):
        for message in page:
            yield message
        after = page[-1].id


async def _steps(store: Store, session_id: str) -> AsyncIterator[object]:
    since = 0
    while page := await store.load_agent_state(session_id, since=since, limit=PAGE):
        for step in page:
            yield step
        since += len(page)


async def _deltas(store: Store, session_id: str) -> AsyncIterator[Delta]:
    since = 0
    while page := await store.get_deltas(session_id, since, limit=PAGE):
        for delta in page:
            yield delta
        since = page[-1].step


async def list_sessions(
    store: Store, out: TextIO, *, user: str | None = None, database: str = "the database"
) -> None:
    """One line per session: id, user, status, progress, updated, challenge. With none,
    the answer names ``database``, so a typo in its path shows at once."""
    if user is not None:
        found = await store.find_user(user)
        if found is None:
            check_identity(user)  # a name no user can have is an error, not "no sessions"
        sessions = await store.get_user_sessions(found.id) if found is not None else []
    else:
        sessions = await store.list_sessions()
    total = len(store.phase_ids)
    for s, depth in session_tree(sessions):
        branch = f"{'  ' * depth}↳ from {s.branched_from_phase}: " if s.parent_session_id else ""
        print(
            f"{s.id}  {s.status:<11}  {s.completed_phases}/{total}  "
            f"{s.updated_at:%Y-%m-%d %H:%M}  {branch}{s.design_challenge or '-'}",
            file=out,
        )
    if not sessions:
        whose = f" of {user!r}" if user is not None else ""
        print(f"no sessions{whose} in {database}", file=out)


async def branch_session(store: Store, session_id: str, phase_id: str, out: TextIO) -> None:
    """Branch a session from the end of one of its completed phases; print the new id."""
    branch = await store.branch_session(session_id, phase_id)
    print(
        f"{branch.id}  branch of {session_id} from {phase_id}; next phase "
        f"{branch.current_phase_id}",
        file=out,
    )


async def show_session(
    store: Store, session_id: str, out: TextIO, *, steps: bool = False, prompts: bool = False
) -> None:
    """Phases, conversation, zones and the delta log of one session."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    user = await store.get_user(session.user_id)
    # The identity, quoted as in `users delete`'s question (an invisible mark shows).
    who = repr(user.identity) if user is not None else session.user_id
    print(f"session {session.id}  [{session.status}]  user {who}", file=out)
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
        async for item in _steps(store, session_id):
            print(_step_line(item), file=out)
    else:
        async for m in _messages(store, session_id):
            mark = " [interrupted]" if m.interrupted else ""
            print(f"{m.role:>9}: {m.content}{mark}", file=out)
    state = await store.get_state(session_id)
    print(f"\n## state (step {state.step})", file=out)
    for zone in ("data", "template", "view"):
        print(f"{zone}: {json.dumps(getattr(state, zone), indent=2, ensure_ascii=False)}", file=out)
    print("\n## deltas", file=out)
    async for d in _deltas(store, session_id):
        print(
            f"{d.step:>4}  {d.turn_id or '-'}  {d.trigger}/{d.source}  {d.actor_id or '-'}  "
            f"{d.delta_type} {d.path}  {d.action.tool or d.action.type}  count={d.result.count}",
            file=out,
        )


async def export_session(store: Store, session_id: str, out: TextIO) -> None:
    """Everything stored about one session, as one JSON document (written page by page)."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    outputs = [asdict(o) for o in await store.get_phase_outputs(session_id)]
    out.write(f'{{"session": {_dumps(asdict(session))},\n"phase_outputs": {_dumps(outputs)}')
    out.write(',\n"conversation": [')
    await _write_items(out, (asdict(m) async for m in _messages(store, session_id)))
    out.write('],\n"steps": [')
    await _write_items(out, (_step_json(item) async for item in _steps(store, session_id)))
    out.write(f'],\n"state": {_dumps(asdict(await store.get_state(session_id)))}')
    out.write(',\n"deltas": [')
    await _write_items(out, (d.to_json() async for d in _deltas(store, session_id)))
    out.write("]}\n")


async def export_user(store: Store, identity: str, out: TextIO) -> None:
    """Everything stored about a person, as one JSON document (written page by page):
    the user, what coach remembers (the person record and its deltas) and every session
    of theirs, newest first, each as :func:`export_session` writes it."""
    await export_person(store, await _user(store, identity), out)


async def export_person(store: Store, user: UserRecord, out: TextIO) -> None:
    """:func:`export_user` of a user already found (the RPC ``coach.export_my_data``)."""
    person = await store.get_person(user.id)
    deltas = [d.to_json() for d in await store.get_person_deltas(user.id)]
    out.write(f'{{"user": {_dumps(asdict(user))},\n"person": {_dumps(asdict(person))}')
    out.write(f',\n"person_deltas": {_dumps(deltas)},\n"sessions": [')
    for count, session in enumerate(await store.get_user_sessions(user.id)):
        out.write(",\n" if count else "\n")
        await export_session(store, session.id, out)
    out.write("]}\n")


async def _write_items(out: TextIO, items: AsyncIterator[Any]) -> None:
    first = True
    async for item in items:
        out.write(("\n" if first else ",\n") + _dumps(item))
        first = False


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _step_json(item: object) -> Any:
    from livekit.agents import llm  # loaded already: the step was unpickled from its classes

    if isinstance(
        item, llm.ChatMessage | llm.FunctionCall | llm.FunctionCallOutput | llm.AgentHandoff
    ):
        return item.model_dump(mode="json")
    return repr(item)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot export {type(value).__name__}")


def _step_line(item: object) -> str:
    from livekit.agents import llm  # loaded already: the step was unpickled from its classes

    from ..state.history import item_text

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


Confirm = Callable[[str], bool]
"""Asks the operator a yes/no question (``--yes`` answers yes without asking)."""


def _erase(question: str, confirm: Confirm) -> None:
    if not confirm(question):
        raise ConfigError("Nothing was erased (not confirmed; --yes skips the question).")


async def delete_session(store: Store, session_id: str, out: TextIO, confirm: Confirm) -> None:
    """Erase one session with everything stored of it."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    _erase(f"Erase session {session_id} ({session.design_challenge or '-'})?", confirm)
    await store.delete_session(session_id)
    print(f"erased session {session_id}", file=out)


async def _user(store: Store, identity: str) -> UserRecord:
    user = await store.find_user(identity)
    if user is None:
        raise ConfigError(f"No user with identity {identity!r}.")
    return user


async def show_user(store: Store, identity: str, out: TextIO) -> None:
    """A person: their identity, name, sessions and what coach remembers (with fact ids)."""
    user = await _user(store, identity)
    count = await store.count_user_sessions(user.id)
    remembered = person_lines(person_of((await store.get_person(user.id)).value))
    print(
        f"user {user.identity!r} ({user.display_name or 'no name'}), {count} session(s)", file=out
    )
    print("remembered:" if remembered else "remembered: nothing", file=out)
    for line in remembered:
        print(f"  {line}", file=out)


async def forget_fact(store: Store, identity: str, fact_id: str, out: TextIO) -> None:
    """Forget one remembered fact of a person (or ``all``), with its delta."""
    user = await _user(store, identity)
    record = await store.get_person(user.id)
    person = person_of(record.value)
    try:
        if fact_id.lower() == "all":
            value, change = forget_all(person)
        else:
            value, change = forget(person, fact_id)
    except PersonError as exc:
        raise ConfigError(f"{exc} Nothing was forgotten.") from None
    if not change.count:  # "all" with nothing remembered: nothing to store
        print(f"nothing is remembered about {user.identity!r}", file=out)
        return
    spec = DeltaSpec(
        trigger="user_action",
        source="system",
        actor_id="cli",
        delta_type=change.delta_type,
        path=change.path,
        action=Action(type="forget", params={"fact_id": fact_id}),
        result=ResultMeta(count=change.count, fields=change.fields),
    )
    await store.update_person(user.id, dict(value), spec, expected_step=record.step)
    print(f"forgot {change.count} fact(s) of {user.identity!r}", file=out)


async def delete_user(store: Store, identity: str, out: TextIO, confirm: Confirm) -> None:
    """Erase a person: the user and every session of theirs."""
    user = await store.find_user(identity)
    if user is None:
        raise ConfigError(f"No user with identity {identity!r}; nothing was erased.")
    count = await store.count_user_sessions(user.id)
    _erase(f"Erase {identity!r} and their {count} session(s)?", confirm)
    erased = await store.delete_user(user.identity)
    print(f"erased user {identity!r} and {erased or 0} session(s)", file=out)


async def prune_sessions(
    store: Store,
    out: TextIO,
    confirm: Confirm,
    *,
    days: float,
    status: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> None:
    """Erase sessions not updated for ``days`` days (retention); print each one."""
    if days < 0:
        raise ConfigError("--older-than must be zero or more days.")
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    found = await store.prune_sessions(older_than=cutoff, status=status, dry_run=True)
    verb = "would erase" if dry_run else "erased"
    if not found:
        print(f"no sessions last updated before {cutoff:%Y-%m-%d %H:%M}", file=out)
        return
    if not dry_run:
        _erase(f"Erase {len(found)} session(s) last updated before {cutoff:%Y-%m-%d}?", confirm)
        found = await store.prune_sessions(older_than=cutoff, status=status)
    for s in found:
        when = f"{s.updated_at:%Y-%m-%d}"
        print(f"{verb} {s.id}  {s.status:<11}  {when}  {s.design_challenge or '-'}", file=out)
    print(f"{verb} {len(found)} session(s)", file=out)
