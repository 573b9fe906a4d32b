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

import yaml

__all__ = [
    "DEMO_SCRIPT",
    "DEMO_VISITS",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhausted",
    "ScriptMismatch",
    "ToolCall",
    "Turn",
    "Visit",
    "call",
    "calls",
    "load_script",
    "parse_script",
    "raw_call",
    "parse_visit",
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


def load_script(path_or_yaml: str | Path) -> list[Reply]:
    """Load replies from a YAML file or a YAML string.

    A :class:`~pathlib.Path`, or a one-line string ending in ``.yaml``/``.yml``, is read as
    a file; any other string is parsed as YAML text. The document is a list whose items are:

    * ``{say: "text"}`` (or a bare string) — a text reply;
    * ``{call: name, args: {...}}`` — one tool call (``args`` is optional);
    * ``{calls: [{call: name, args: {...}}, ...]}`` — parallel tool calls.

    ``say`` may accompany ``call``/``calls`` for text streamed before the tool calls.
    Any item may add ``from_request: {name: 'regex with one group'}`` to read values
    from the request it answers, used as ``${name}`` in its own or a later item's text
    and string arguments (see :attr:`Reply.from_request`).

    Raises:
        ScriptError: The document is not such a list.
        FileNotFoundError: A path was given and does not exist.
    """
    if isinstance(path_or_yaml, Path) or (
        "\n" not in path_or_yaml and path_or_yaml.strip().endswith((".yaml", ".yml"))
    ):
        text = Path(path_or_yaml).read_text(encoding="utf-8")
    else:
        text = path_or_yaml
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScriptError(f"script is not valid YAML: {exc}") from exc
    return parse_script(document)


def parse_script(document: Any) -> list[Reply]:
    """Turn an already-parsed script document (see :func:`load_script`) into replies."""
    if document is None:
        return []
    if not isinstance(document, list):
        raise ScriptError(f"a script is a YAML list of replies, got {type(document).__name__}")
    return [_parse_reply(item, index) for index, item in enumerate(document)]


def _parse_reply(item: Any, index: int) -> Reply:
    where = f"script item #{index}"
    if isinstance(item, str):
        return say(item)
    if not isinstance(item, Mapping):
        raise ScriptError(f"{where}: expected a mapping or a string, got {item!r}")
    unknown = set(item) - {"say", "call", "args", "calls", "from_request"}
    if unknown:
        raise ScriptError(f"{where}: unknown keys {sorted(unknown)} in {dict(item)!r}")
    if "call" in item and "calls" in item:
        raise ScriptError(f"{where}: use either 'call' or 'calls', not both")
    if "args" in item and "call" not in item:
        raise ScriptError(f"{where}: 'args' belongs to a 'call'")

    text = item.get("say", "")
    if not isinstance(text, str):
        raise ScriptError(f"{where}: 'say' must be a string, got {text!r}")

    tool_calls: list[ToolCall] = []
    if "call" in item:
        tool_calls.append(_parse_call(item, where))
    elif "calls" in item:
        entries = item["calls"]
        if not isinstance(entries, list) or not entries:
            raise ScriptError(f"{where}: 'calls' must be a non-empty list")
        for n, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or set(entry) - {"call", "args"}:
                raise ScriptError(f"{where}, call #{n}: expected {{call: name, args: {{...}}}}")
            tool_calls.append(_parse_call(entry, f"{where}, call #{n}"))
    elif "say" not in item:
        raise ScriptError(f"{where}: needs 'say', 'call' or 'calls'")
    return Reply(
        text=text,
        tool_calls=tuple(tool_calls),
        from_request=_parse_from_request(item.get("from_request"), where),
    )


def _parse_from_request(entry: Any, where: str) -> tuple[tuple[str, str], ...]:
    if entry is None:
        return ()
    if not isinstance(entry, Mapping) or not entry:
        raise ScriptError(f"{where}: 'from_request' must map names to patterns, got {entry!r}")
    pairs: list[tuple[str, str]] = []
    for name, pattern in entry.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ScriptError(f"{where}: from_request name {name!r} is not an identifier")
        try:
            groups = re.compile(pattern).groups if isinstance(pattern, str) else -1
        except re.error as exc:
            raise ScriptError(f"{where}: from_request {name}: bad pattern: {exc}") from exc
        if groups != 1:
            raise ScriptError(
                f"{where}: from_request {name}: needs a pattern with one group, got {pattern!r}"
            )
        pairs.append((name, pattern))
    return tuple(pairs)


def _parse_call(entry: Mapping[str, Any], where: str) -> ToolCall:
    name = entry.get("call")
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}: 'call' must be a tool name, got {name!r}")
    arguments = entry.get("args") or {}
    if not isinstance(arguments, Mapping):
        raise ScriptError(f"{where}: 'args' must be a mapping, got {arguments!r}")
    return ToolCall(name, dict(arguments))


@dataclass(frozen=True)
class Turn:
    """One user line of a chat visit and every reply the model gives before the next one.

    Attributes:
        user: What the user types.
        model: The replies, one per LLM request; only the last one says something, so
            each turn prints exactly one ``coach>`` line.
    """

    user: str
    model: tuple[Reply, ...]


@dataclass(frozen=True)
class Visit:
    """A whole ``python -m coach chat`` visit: the greeting, then the user's turns.

    Attributes:
        greeting: The replies before the first user line (the last one is the greeting).
        turns: The user's lines, each with the model's replies.
        title: What the visit shows, for a reader.
    """

    greeting: tuple[Reply, ...]
    turns: tuple[Turn, ...]
    title: str = ""

    @property
    def replies(self) -> list[Reply]:
        """Every scripted reply of the visit, in the order the model is asked for them."""
        return [*self.greeting, *(reply for turn in self.turns for reply in turn.model)]


def parse_visit(document: Any, where: str = "visit") -> Visit:
    """A :class:`Visit` from ``{title?, greeting: [replies], turns: [{user, model}]}``.

    Raises:
        ScriptError: The document is malformed, or a turn (or the greeting) would not print
            exactly one ``coach>`` line: its last reply must say something and no earlier
            one may.
    """
    if not isinstance(document, Mapping) or set(document) - {"title", "greeting", "turns"}:
        raise ScriptError(f"{where}: expected a mapping of title, greeting and turns")
    title = document.get("title", "")
    if not isinstance(title, str):
        raise ScriptError(f"{where}: 'title' must be a string")
    greeting = tuple(parse_script(document.get("greeting")))
    _check_one_line(greeting, f"{where}, greeting")
    raw_turns = document.get("turns") or []
    if not isinstance(raw_turns, list):
        raise ScriptError(f"{where}: 'turns' must be a list")
    turns: list[Turn] = []
    for n, entry in enumerate(raw_turns):
        here = f"{where}, turn #{n}"
        if not isinstance(entry, Mapping) or set(entry) != {"user", "model"}:
            raise ScriptError(f"{here}: expected {{user: text, model: [replies]}}")
        if not isinstance(entry["user"], str) or not entry["user"].strip():
            raise ScriptError(f"{here}: 'user' must be a non-empty line")
        model = tuple(parse_script(entry["model"]))
        _check_one_line(model, here)
        turns.append(Turn(entry["user"], model))
    return Visit(greeting=greeting, turns=tuple(turns), title=title)


def _check_one_line(replies: tuple[Reply, ...], where: str) -> None:
    if not replies or not replies[-1].text or any(r.text for r in replies[:-1]):
        raise ScriptError(f"{where}: only the last reply may (and must) say something")


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
