"""Offline stand-ins for the LLM: an in-process scripted model and a local OpenAI server.

Both play back the same :class:`Script` of :class:`Reply` items, built with :func:`say`,
:func:`call` and :func:`calls` or loaded from YAML with :func:`load_script`.
"""

from .openai_server import FakeOpenAIServer
from .script import (
    Reply,
    Script,
    ScriptError,
    ScriptExhausted,
    ToolCall,
    call,
    calls,
    load_script,
    parse_script,
    raw_call,
    say,
)
from .scripted_llm import RecordedRequest, ScriptedLLM

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhausted",
    "ScriptedLLM",
    "ToolCall",
    "call",
    "calls",
    "load_script",
    "parse_script",
    "raw_call",
    "say",
]
