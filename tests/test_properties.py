"""Property-based checks of every input edge: tool arguments, the ``coach.focus`` payload,
CLI arguments and repository inputs. Whatever arrives — NULs, lone surrogates, blank or
huge text, JSON of any shape — nothing crashes, nothing is half-written, and the answer is
the documented one: a ``ToolError`` for the model, an ``RpcError`` code for the room, one
``coach:`` line and exit code 2 for the terminal, ``InvalidWrite``/``SessionNotFound``
(or nothing found) from the repository.

Examples are few and the profile has no deadline, so each property takes seconds; under
``CI=true`` the examples are derandomized so a CI run is reproducible.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from livekit import rtc
from livekit.agents import AgentSession, llm

from coach.__main__ import main
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.errors import InvalidWrite, SessionNotFound
from coach.persistence import Repository, open_repository
from coach.settings import Settings
from coach.state import Action, DeltaSpec, Zone, design
from coach.store import check_identity, clean_text, identity_keys, is_clean
from coach.surfaces.rpc import MAX_REQUEST_BYTES, invoke
from coach.testing import ScriptedLLM, ToolCall, calls, say
from tests.support import MEMORY_SECRET, key_env, keys_of, keys_url, raw_sql

T = TypeVar("T")

settings.register_profile(
    "coach",
    deadline=None,
    max_examples=30,
    derandomize=os.environ.get("CI") == "true",
    database=None,  # a failure prints its example; nothing is left in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = settings.get_profile("coach")

# Text as it arrives off the happy path: anything Unicode has, lone surrogates (a byte
# that was not UTF-8 in argv, half an emoji in a model's escapes) and NULs included, and
# often one of them amid ordinary text.
SPECIAL = st.sampled_from(
    ["\x00", "\ud800", "\udcff", "\ud83d", "\ude00", " ", "\n", "'", '"', "\x7f", "𝄞"]
)
ANY_CHAR = st.characters(exclude_categories=()) | st.characters(categories=["Cs"]) | SPECIAL
NASTY = st.one_of(
    st.text(ANY_CHAR, max_size=24),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=8), SPECIAL, st.text(max_size=8)),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | NASTY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NASTY, inner, max_size=3),
    max_leaves=8,
)
NOT_AN_ID = NASTY.filter(lambda text: re.fullmatch(r"[0-9a-f]{32}", text) is None)
INTERNAL = "An internal error occurred"  # livekit's answer for an exception in a tool


def _strict_json(value: Any) -> bool:
    """Whether ``value`` is JSON as RFC 8259 spells it (no infinity, no NaN)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def utf8(value: Any) -> None:
    """Fail unless ``value`` (a string or JSON) encodes as UTF-8 and holds no NUL."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    assert is_clean(text), repr(text)


@pytest.fixture
def loop() -> Iterator[Callable[[Coroutine[Any, Any, T]], T]]:
    """Run coroutines on one event loop from a synchronous test (hypothesis drives it)."""
    with asyncio.Runner() as runner:
        yield runner.run


@pytest.fixture
def store(
    database_url: str, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> Iterator[Repository]:
    repository: Repository = loop(
        open_repository(database_url, **keys_of(database_url), secret=MEMORY_SECRET)
    )
    yield repository
    loop(repository.aclose())


async def _count(repo: Repository, table: str) -> int:
    from sqlalchemy import text

    async with raw_sql(repo) as conn:
        return int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())


# --- repository inputs --------------------------------------------------------------------


def test_identities_are_stored_in_their_nfkc_form_or_refused_with_nothing_written(
    store: Repository, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    @PROFILE
    @given(identity=NASTY | st.text(min_size=250, max_size=260))
    def check(identity: str) -> None:
        users = loop(_count(store, "users"))
        try:
            key = check_identity(identity)
        except InvalidWrite as refused:
            with pytest.raises(InvalidWrite) as again:
                loop(store.get_or_create_user(identity))
            assert str(again.value) == str(refused)
            try:
                identity_keys(identity)  # a spelling stored before the rule: looked up
            except InvalidWrite:
                with pytest.raises(InvalidWrite) as again:
                    loop(store.find_user(identity))
                assert str(again.value) == str(refused)
            else:
                assert loop(store.find_user(identity)) is None
            assert loop(_count(store, "users")) == users
            return
        user = loop(store.get_or_create_user(identity, display_name=identity))
        assert user.identity == key == unicodedata.normalize("NFKC", identity)
        assert loop(store.find_user(identity)) == user == loop(store.find_user(key))

    check()


def test_messages_are_stored_cleaned_and_ids_that_are_no_ids_find_nothing(
    store: Repository, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    user = loop(store.get_or_create_user("messages"))
    session = loop(store.create_session(user.id, "challenge"))

    @PROFILE
    @given(content=NASTY, not_an_id=NOT_AN_ID)
    def check(content: str, not_an_id: str) -> None:
        message_id = loop(store.add_session_message(session.id, "user", content))
        stored = loop(store.get_session_conversation(session.id))[-1]
        assert (stored.id, stored.content) == (message_id, clean_text(content))
        messages = loop(_count(store, "session_conversations"))
        assert loop(store.get_session(not_an_id)) is None
        assert loop(store.get_session_conversation(not_an_id)) == []
        assert loop(store.get_state(not_an_id)).step == 0
        with pytest.raises(SessionNotFound):
            loop(store.add_session_message(not_an_id, "user", content))
        assert loop(_count(store, "session_conversations")) == messages

    check()


def test_zone_values_round_trip_or_are_refused_whole(
    store: Repository, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    user = loop(store.get_or_create_user("zones"))
    session = loop(store.create_session(user.id, "challenge"))
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="update", path="data")

    @PROFILE
    @given(value=JSON_VALUES)
    @example(value={"": float("inf")})  # JSON has no infinity: refused, nothing written
    def check(value: Any) -> None:
        before = loop(store.get_state(session.id))
        try:
            loop(store.update_data(session.id, value, spec))
        except InvalidWrite:
            # Only what is not a JSON object, holds a number JSON has no spelling for (an
            # infinity), or holds text that is not UTF-8 (a lone surrogate), is refused —
            # on both databases alike.
            assert (
                not isinstance(value, dict)
                or not _strict_json(value)
                or not is_clean(json.dumps(value, ensure_ascii=False))
            )
            assert loop(store.get_state(session.id)) == before
            return
        after = loop(store.get_state(session.id))
        assert (after.step, after.data) == (before.step + 1, value)

    check()


# --- CLI arguments ------------------------------------------------------------------------


def test_cli_arguments_give_a_result_or_one_line(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no developer .env
    monkeypatch.setenv("COACH_DATABASE_URL", database_url)
    monkeypatch.setenv("COACH_SECRET_KEY", MEMORY_SECRET.decode())
    for name, value in key_env(database_url).items():
        monkeypatch.setenv(name, value)
    framework = logging.getLogger("livekit")
    monkeypatch.setattr(framework, "level", framework.level)  # main() quiets it

    @settings(PROFILE, max_examples=8)
    @given(argument=NASTY, command=st.sampled_from(["show", "export", "list"]))
    @example(argument="0\u00ad", command="list")  # an invisible character: once "no sessions"
    def check(argument: str, command: str) -> None:
        argv = ["sessions", "list", "--user", argument]
        if command != "list":
            argv = ["sessions", command, argument]
        # Streams set up as CPython sets up a process's: stderr never fails to encode.
        out, err = io.BytesIO(), io.BytesIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, "utf-8"))
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(err, "utf-8", "backslashreplace"))
        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        said, complained = out.getvalue().decode(), err.getvalue().decode()
        if code == 0:
            assert command == "list" and complained == ""
            assert said.startswith(f"no sessions of {argument!r} in ")
            check_identity(argument)
            return
        assert code == 2 and said == ""
        assert complained.startswith("coach: ") and complained.count("\n") == 1, complained
        if complained.endswith("(see --help)\n"):  # read as an option: a usage error
            assert argument.startswith("-"), complained
            return
        if command == "list":
            with pytest.raises(InvalidWrite) as refused:
                check_identity(argument)
            assert complained == f"coach: {refused.value}\n"
        else:
            assert complained.endswith(" not found\n")

    check()


@pytest.fixture
def tool_settings(database_url: str) -> Settings:
    """Settings on a migrated database; the LLM is scripted, never this address."""
    return Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=MEMORY_SECRET.decode(),
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_shutdown_timeout=5,
    )


# --- coach.focus payloads -----------------------------------------------------------------


class _Sink:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def publish(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


PAYLOADS = st.one_of(
    NASTY,
    JSON_VALUES.map(json.dumps),
    st.builds(lambda item: json.dumps({"item": item}), JSON_VALUES),
    st.builds(lambda n: "[" * n + "]" * n, st.integers(900, 2_100)),
    st.builds(
        lambda c, n: json.dumps({"item": c * n}, ensure_ascii=False),
        st.sampled_from(["x", "é", "𝄞"]),
        st.integers(1_000, 4_100),
    ),
)


@pytest.fixture
def focus_board(
    tool_settings: Settings, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> Iterator[tuple[UserData, _Sink, str]]:
    async def make() -> tuple[Runtime, UserData, _Sink, str]:
        runtime = await Runtime.open(tool_settings)
        sink = _Sink()
        userdata = runtime.new_userdata(identity="zoe", sink=sink)
        user = await runtime.store.get_or_create_user("zoe")
        session = await runtime.store.create_session(user.id, "Onboarding")
        userdata.session_id = session.id
        userdata.state.attach(session.id)
        data, change = design.add_insight(userdata.state.data, "People skip setup", phase_id=None)
        userdata.state.write(Zone.DATA, data, change, Action(type="tool", tool="add_insight"))
        return runtime, userdata, sink, data["insights"][0]["id"]

    runtime, userdata, sink, insight_id = loop(make())
    yield userdata, sink, insight_id
    loop(runtime.aclose())


def test_focus_payloads_get_a_documented_answer(
    focus_board: tuple[UserData, _Sink, str], loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    userdata, sink, insight_id = focus_board

    def focus(payload: str, caller: str = "zoe") -> str:
        call = rtc.RpcInvocationData("r", caller, payload, 5.0, "coach.focus")
        answer: str = loop(invoke("coach.focus", userdata, call))
        return answer

    @settings(PROFILE, max_examples=60)
    @given(payload=PAYLOADS, caller=st.sampled_from(["zoe", "zoe", "mallory"]))
    def check(payload: str, caller: str) -> None:
        before = (json.dumps(userdata.state.view), userdata.state.step, len(sink.messages))
        try:
            answer = json.loads(focus(payload, caller))
        except rtc.RpcError as refused:
            utf8(refused.message)
            assert (json.dumps(userdata.state.view), userdata.state.step) == before[:2]
            assert len(sink.messages) == before[2]
            expected = {403} if caller != "zoe" else {400, 404, 413}
            if len(payload.encode("utf-8", "surrogatepass")) > MAX_REQUEST_BYTES:
                expected &= {403, 413}
            assert refused.code in expected
            return
        assert caller == "zoe" and answer == {"ok": True, "step": before[1] + 1}
        view = userdata.state.view
        assert view is not None and view["focus"] is not None
        assert view["focus"]["id"] == insight_id

    check()
    # A real item still focuses after all that.
    assert json.loads(focus(json.dumps({"item": insight_id})))["ok"] is True


# --- tool arguments -----------------------------------------------------------------------


STRATEGIST_TOOLS = st.one_of(
    st.builds(lambda t: ToolCall("add_insight", {"text": t}), NASTY),
    st.builds(lambda t, d: ToolCall("add_idea", {"title": t, "description": d}), NASTY, NASTY),
    st.builds(lambda i: ToolCall("select_idea", {"idea_id": i}), NASTY),
    st.builds(lambda i: ToolCall("remove_idea", {"idea_id": i}), NASTY),
    st.builds(lambda q: ToolCall("search_past_work", {"query": q}), NASTY),
)
COACH_TOOLS = st.one_of(
    st.builds(lambda n: ToolCall("identify_user", {"name": n}), NASTY),
    st.builds(lambda s: ToolCall("select_session_to_load", {"session_id": s}), NASTY),
)


def _outputs(result: Any) -> list[llm.FunctionCallOutput]:
    return [e.item for e in result.events if isinstance(e.item, llm.FunctionCallOutput)]


async def _turn(session: AgentSession[UserData]) -> Any:
    return await session.run(user_input="Here you go")


def _check_turn(session: AgentSession[UserData], model: ScriptedLLM, result: Any) -> None:
    outputs = _outputs(result)
    assert outputs and all(o.output != INTERNAL for o in outputs), outputs
    for output in outputs:
        utf8(output.output)
    messages, _ = model.requests[-1].chat_ctx.to_provider_format("openai")
    utf8(messages)  # what goes to the model
    state = session.userdata.state
    utf8({"data": state.data, "view": state.view, "template": state.template})


def test_tool_arguments_get_a_result_or_a_tool_error(
    tool_settings: Settings, loop: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    runtime: Runtime = loop(Runtime.open(tool_settings))
    model = ScriptedLLM([say("Hi! What's your name?")])

    async def started() -> AgentSession[UserData]:
        userdata = runtime.new_userdata()
        session = runtime.new_session(userdata, llm=model)
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        return session

    coach: AgentSession[UserData] = loop(started())

    @settings(PROFILE, max_examples=20)
    @given(tool=COACH_TOOLS)
    def check_coach(tool: ToolCall) -> None:
        model.extend([calls(tool), say("ok")])
        _check_turn(coach, model, loop(_turn(coach)))

    model_s = ScriptedLLM([say("Hi!")])

    async def strategist() -> AgentSession[UserData]:
        userdata = runtime.new_userdata(identity="props")
        session = runtime.new_session(userdata, llm=model_s)
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        model_s.extend(
            [
                calls(ToolCall("capture_design_challenge", {"challenge": "Onboarding"})),
                calls(ToolCall("transfer_to_strategist", {})),
                say("Strategist here."),
            ]
        )
        await session.run(user_input="Onboarding")
        return session

    @settings(PROFILE, max_examples=25)
    @given(tool=STRATEGIST_TOOLS)
    def check_strategist(tool: ToolCall) -> None:
        model_s.extend([calls(tool), say("ok")])
        _check_turn(strategist_session, model_s, loop(_turn(strategist_session)))

    try:
        check_coach()
        strategist_session = loop(strategist())
        check_strategist()
        loop(strategist_session.aclose())
    finally:
        loop(coach.aclose())
        loop(runtime.aclose())
