"""Scripts that read values from the request they answer (``from_request``, ``${name}``),
and whole chat visits (``parse_visit``)."""

import aiohttp
import pytest

from coach.testing import FakeOpenAIServer, load_script
from coach.testing.script import (
    Reply,
    Script,
    ScriptError,
    ScriptMismatch,
    ToolCall,
)
from coach.testing.script_files import parse_visit

OFFER = """
- from_request: {session_id: 'session_id ([0-9a-f]{4})'}
  say: Resume ${session_id}?
- call: select_session_to_load
  args: {session_id: "${session_id}", keep: [1, "${session_id}"]}
"""


def test_a_value_read_from_one_request_fills_that_reply_and_later_ones() -> None:
    script = Script(load_script(OFFER))
    first = script.next_reply(request="Their sessions:\n- session_id beef: onboarding")
    second = script.next_reply(request="nothing to read here")
    assert first.text == "Resume beef?"
    assert second.tool_calls == (
        ToolCall("select_session_to_load", {"session_id": "beef", "keep": [1, "beef"]}),
    )
    assert script.values == {"session_id": "beef"} and script.remaining == 0


def test_a_request_without_the_value_is_a_mismatch_and_the_reply_stays_queued() -> None:
    script = Script(load_script(OFFER))
    for _ in range(2):  # a client's retry meets the same answer
        with pytest.raises(ScriptMismatch, match=r"reply #1 reads 'session_id'.*\(last: x\)"):
            script.next_reply("last: x", request="no sessions yet")
    assert script.remaining == 2 and script.used == 0
    assert script.next_reply(request="session_id cafe").text == "Resume cafe?"


def test_a_placeholder_nothing_read_is_a_mismatch() -> None:
    script = Script([Reply(text="Hello ${name}")])
    with pytest.raises(ScriptMismatch, match=r"uses \$\{name\}, which no reply so far read"):
        script.next_reply(request="name: Ada")
    assert script.remaining == 1


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("{say: hi, from_request: {x: 'no group'}}", "needs a pattern with one group"),
        ("{say: hi, from_request: {x: '(a)(b)'}}", "needs a pattern with one group"),
        ("{say: hi, from_request: {x: '(unclosed'}}", "bad pattern"),
        ("{say: hi, from_request: {1x: '(a)'}}", "is not an identifier"),
        ("{say: hi, from_request: [a]}", "must map names to patterns"),
    ],
)
def test_malformed_from_request_is_refused_at_load(item: str, reason: str) -> None:
    with pytest.raises(ScriptError, match=reason):
        load_script(f"- {item}\n")


async def test_the_server_reads_message_texts_and_reports_a_mismatch_once_per_request() -> None:
    reported: list[str] = []
    script = load_script("- {from_request: {who: 'I am (\\w+)'}, say: 'Hi ${who}'}")
    async with FakeOpenAIServer(script, on_error=reported.append) as server:
        url = f"{server.base_url}/chat/completions"
        async with aiohttp.ClientSession() as http:
            parts = [{"type": "text", "text": "hello"}]
            missing = {"model": "fake", "messages": [{"role": "user", "content": parts}]}
            async with http.post(url, json=missing) as response:
                assert response.status == 500
                body = await response.json()
            found = {
                "model": "fake",
                "messages": [
                    {"role": "system", "content": "be kind"},
                    {"role": "user", "content": [{"type": "text", "text": "I am Ada"}]},
                ],
            }
            async with http.post(url, json=found) as response:
                assert response.status == 200
                answer = await response.json()
    assert body["error"]["code"] == "script_mismatch"
    assert reported == server.errors == [body["error"]["message"]]
    assert "\n" not in reported[0] and "last user message: 'hello'" in reported[0]
    assert answer["choices"][0]["message"]["content"] == "Hi Ada"


def test_a_visit_prints_one_coach_line_per_turn() -> None:
    visit = parse_visit(
        {
            "title": "t",
            "greeting": [{"say": "Hi"}],
            "turns": [{"user": "go", "model": [{"call": "x"}, {"say": "done"}]}],
        }
    )
    assert [r.text for r in visit.replies] == ["Hi", "", "done"]
    assert visit.turns[0].user == "go"
    for model in ([{"say": "a"}, {"say": "b"}], [{"call": "x"}], []):
        with pytest.raises(ScriptError, match="only the last reply may"):
            parse_visit({"greeting": [{"say": "Hi"}], "turns": [{"user": "go", "model": model}]})
