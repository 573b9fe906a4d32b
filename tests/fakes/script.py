"""Scripted model replies shared by the offline LLM fakes.

A test writes what "the model" answers, one :class:`Reply` per LLM request, and hands the
list to :class:`~tests.fakes.scripted_llm.ScriptedLLM` (in process) or
:class:`~tests.fakes.openai_server.FakeOpenAIServer` (over HTTP). Both consume the same
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
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhausted",
    "ToolCall",
    "call",
    "calls",
    "load_script",
    "parse_script",
    "say",
]


@dataclass(frozen=True)
class ToolCall:
    """One function call the scripted model makes.

    Attributes:
        name: The tool's name, as the agent declares it.
        arguments: The JSON-serialisable arguments the tool receives.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """Everything the scripted model answers to one LLM request.

    Attributes:
        text: Assistant text, streamed before any tool call (may be empty).
        tool_calls: Tool calls made in this reply; several are parallel calls.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class ScriptError(ValueError):
    """Raised when a script (a YAML document or a Python value) is malformed."""


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
        self.extend(replies)

    def extend(self, replies: Iterable[Reply]) -> None:
        """Append ``replies`` to the end of the script."""
        items = list(replies)
        for reply in items:
            if not isinstance(reply, Reply):
                raise ScriptError(f"a script holds Reply objects, not {type(reply).__name__}")
        with self._lock:
            self._queue.extend(items)

    def next_reply(self, detail: str = "") -> Reply:
        """Pop the next reply.

        Args:
            detail: Extra context for the error message when the script is exhausted
                (e.g. the last user message the model saw).

        Raises:
            ScriptExhausted: No reply is left.
        """
        with self._lock:
            if not self._queue:
                raise ScriptExhausted(self._used, detail)
            self._used += 1
            return self._queue.popleft()

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
    unknown = set(item) - {"say", "call", "args", "calls"}
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
    return Reply(text=text, tool_calls=tuple(tool_calls))


def _parse_call(entry: Mapping[str, Any], where: str) -> ToolCall:
    name = entry.get("call")
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}: 'call' must be a tool name, got {name!r}")
    arguments = entry.get("args") or {}
    if not isinstance(arguments, Mapping):
        raise ScriptError(f"{where}: 'args' must be a mapping, got {arguments!r}")
    return ToolCall(name, dict(arguments))
