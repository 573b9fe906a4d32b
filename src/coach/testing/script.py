"""Scripted model replies shared by the offline LLM fakes.

A test writes what "the model" answers, one :class:`Reply` per LLM request, and hands the
list to :class:`~coach.testing.scripted_llm.ScriptedLLM` (in process) or
:class:`~coach.testing.openai_server.FakeOpenAIServer` (over HTTP). Both consume the same
:class:`Script`, so a conversation can move between the two fakes unchanged.

Example:
    ```python
    script = [
        call("update_data", field="goal", value="ship v1"),  # first request: a tool call
        say("Noted. What is the deadline?"),  # second request: the follow-up
    ]
    ```

Or data-driven, from YAML (see :func:`load_script`):

    ```yaml
    - say: Hello!
    - call: update_data
      args: {field: goal, value: ship v1}
    - calls:
        - {call: lookup, args: {q: a}}
        - {call: lookup, args: {q: b}}
    ```

A reply may read a value from the request it answers, as a model reads its prompt, and
use it then or later as ``${name}`` (see :func:`load_script`): a session id the agent
offered, a sentence from a restored conversation. A request without the value is a
:class:`ScriptMismatch`, so the fake also checks what the agent sent.

A whole chat visit — a greeting, then one user line and the model's replies per turn —
is a :class:`Visit` (see :func:`parse_visit`).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEMO_SCRIPT",
    "DEMO_VISITS",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhausted",
    "ScriptMismatch",
    "ToolCall",
    "call",
    "calls",
    "raw_call",
    "say",
]

SCRIPTS = Path(__file__).parent / "scripts"
DEMO_SCRIPT = SCRIPTS / "demo_script.yaml"
"""The demo's model replies, for one chat (the fake server's ``--script``)."""
DEMO_VISITS = SCRIPTS / "demo_visits.yaml"
"""The demo's two visits: the person's lines and the model's replies (``python -m coach demo``)."""

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


@dataclass(frozen=True)
class ToolCall:
    """One function call the scripted model makes.

    Attributes:
        name: The tool's name, as the agent declares it.
        arguments: The JSON-serialisable arguments the tool receives.
        raw: The arguments' text exactly as sent instead (then ``arguments`` is unused):
            what a model cut off by its token limit, or a confused one, emits.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None

    def encoded(self) -> str:
        """The arguments as the model sends them: :attr:`raw`, or ``arguments`` as JSON."""
        return self.raw if self.raw is not None else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """Everything the scripted model answers to one LLM request.

    Attributes:
        text: Assistant text, streamed before any tool call (may be empty).
        tool_calls: Tool calls made in this reply; several are parallel calls.
        from_request: ``(name, pattern)`` pairs: before answering, each regular
            expression (one group) is searched in the request's message texts and its
            group bound to ``name``; ``${name}`` in :attr:`text` and in string tool
            arguments, here or in any later reply, is replaced by it.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    from_request: tuple[tuple[str, str], ...] = ()


class ScriptError(ValueError):
    """Raised when a script (a YAML document or a Python value) is malformed."""


class ScriptMismatch(AssertionError):
    """Raised when the next reply needs something the request does not hold.

    Either a ``from_request`` pattern found nothing in the request, or a ``${name}`` was
    never bound. The reply stays queued: the same request asked again fails the same way.
    """


class ScriptExhausted(AssertionError):
    """Raised when the model is asked for a reply after every scripted reply was used.

    It is an ``AssertionError`` so pytest reports it as a failed expectation: the code under
    test made more LLM requests than the test scripted.
    """

    def __init__(self, used: int, detail: str = "") -> None:
        self.used = used
        message = (
            f"script exhausted: all {used} scripted repl{'y' if used == 1 else 'ies'} "
            f"were used and the LLM was asked for reply #{used + 1}"
        )
        if detail:
            message = f"{message} ({detail})"
        super().__init__(message)


def say(text: str) -> Reply:
    """A reply that only speaks ``text``."""
    return Reply(text=text)


def call(name: str, /, **arguments: Any) -> Reply:
    """A reply that makes one tool call ``name(**arguments)``."""
    return Reply(tool_calls=(ToolCall(name, dict(arguments)),))


def raw_call(name: str, arguments: str, /) -> Reply:
    """A reply that calls ``name`` with ``arguments`` sent as they are (not JSON-encoded)."""
    return Reply(tool_calls=(ToolCall(name, raw=arguments),))


def calls(*tool_calls: ToolCall) -> Reply:
    """A reply that makes several tool calls at once (parallel tool calls)."""
    if not tool_calls:
        raise ScriptError("calls() needs at least one ToolCall")
    return Reply(tool_calls=tuple(tool_calls))


class Script:
    """A FIFO of replies, consumed one per LLM request.

    A lock guards the queue, so a script may be extended from a test while a fake server
    thread or task reads it.
    """

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._used = 0
        self.values: dict[str, str] = {}
        """What replies read from requests so far (``from_request``), by name."""
        self.extend(replies)

    def extend(self, replies: Iterable[Reply]) -> None:
        """Append ``replies`` to the end of the script."""
        items = list(replies)
        for reply in items:
            if not isinstance(reply, Reply):
                raise ScriptError(f"a script holds Reply objects, not {type(reply).__name__}")
        with self._lock:
            self._queue.extend(items)

    def next_reply(self, detail: str = "", *, request: str = "") -> Reply:
        """Pop the next reply, with its ``${name}`` placeholders filled in.

        Args:
            detail: Extra context for the error message when the script is exhausted
                (e.g. the last user message the model saw).
            request: The text of the request being answered, searched by the reply's
                ``from_request`` patterns.

        Raises:
            ScriptExhausted: No reply is left.
            ScriptMismatch: The reply needs a value the request (or an earlier one) did
                not provide; the reply is not consumed.
        """
        with self._lock:
            if not self._queue:
                raise ScriptExhausted(self._used, detail)
            reply = self._queue[0]
            where = f"scripted reply #{self._used + 1}"
            values = dict(self.values)
            for name, pattern in reply.from_request:
                found = re.search(pattern, request)
                if found is None:
                    raise ScriptMismatch(
                        f"{where} reads {name!r} from the request, but nothing in it "
                        f"matches {pattern!r}" + (f" ({detail})" if detail else "")
                    )
                values[name] = found.group(1)
            resolved = _fill(reply, values, where)
            self._queue.popleft()
            self._used += 1
            self.values = values
            return resolved

    @property
    def remaining(self) -> int:
        """How many replies are still queued."""
        with self._lock:
            return len(self._queue)

    @property
    def used(self) -> int:
        """How many replies were consumed so far."""
        with self._lock:
            return self._used

    def __repr__(self) -> str:
        return f"Script(used={self.used}, remaining={self.remaining})"


def _fill(reply: Reply, values: Mapping[str, str], where: str) -> Reply:
    """``reply`` with every ``${name}`` in its text and string arguments replaced."""

    def text(value: str) -> str:
        def one(found: re.Match[str]) -> str:
            name = found.group(1)
            if name not in values:
                raise ScriptMismatch(
                    f"{where} uses ${{{name}}}, which no reply so far read from a request"
                )
            return values[name]

        return _PLACEHOLDER.sub(one, value)

    def deep(value: Any) -> Any:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, list):
            return [deep(v) for v in value]
        if isinstance(value, dict):
            return {k: deep(v) for k, v in value.items()}
        return value

    return Reply(
        text=text(reply.text),
        tool_calls=tuple(
            ToolCall(tc.name, deep(tc.arguments), raw=tc.raw) for tc in reply.tool_calls
        ),
        from_request=reply.from_request,
    )


def as_script(replies: Iterable[Reply] | Script) -> Script:
    """Return ``replies`` itself when it is a :class:`Script`, else a new one holding them."""
    return replies if isinstance(replies, Script) else Script(replies)


RENDER_TOOL = "render_brief"
"""The renderer's tool (coach.conversation.rendering): a request forcing it is a render request."""


class RenderLane:
    """How the fakes answer render requests, apart from the agents' script.

    A render request (the renderer model's call, forced to ``render_brief``) never takes
    a reply of the conversation's script. It takes the next of :attr:`replies` a test
    queued — a :class:`Reply`, or an ``int`` HTTP status to fail with — and otherwise
    the answer of a fake model that reads its prompt: the previous brief with one line
    per change it was told about (:func:`fake_render`).

    Attributes:
        requests: The user message (JSON text) of every render request, in order.
        replies: Queued answers, used first.
        gate: While set to an unset :class:`asyncio.Event`, renders wait for it (a slow
            renderer model).
    """

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.replies: deque[Reply | int] = deque()
        self.gate: asyncio.Event | None = None

    def answer(self, request: str) -> Reply | int:
        """The answer to one render request whose user message is ``request``."""
        self.requests.append(request)
        if self.replies:
            return self.replies.popleft()
        return call(RENDER_TOOL, markdown=fake_render(request))


def is_render_request(tool_choice: Any) -> bool:
    """Whether a request's ``tool_choice`` forces the renderer's tool."""
    return (
        isinstance(tool_choice, Mapping)
        and (tool_choice.get("function") or {}).get("name") == RENDER_TOOL
    )


def fake_render(request: str) -> str:
    """A brief as a model reading the render request might write it: the previous brief
    (or a title), then one line per change, from the values the request carries."""
    given = json.loads(request)
    brief = (given.get("previous_brief") or "# Design brief\n").rstrip("\n")
    lines = [brief]
    for change in given.get("changes") or []:
        values = "; ".join(str(v) for v in (change.get("values") or {}).values())
        lines.append(f"- {change.get('path')}: {values}")
    if given.get("request"):
        lines.append(f"(asked: {given['request']})")
    return "\n".join(lines) + "\n"
