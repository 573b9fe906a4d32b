"""Scripts and visits written in YAML: :func:`load_script` reads a model's replies,
:func:`parse_visit` a whole chat visit (the person's lines and the replies to each)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .script import Reply, ScriptError, ToolCall, say

__all__ = ["Turn", "Visit", "load_script", "parse_script", "parse_visit"]


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
