"""Try and test coach without a model, a LiveKit server or a network.

* :class:`ScriptedLLM` is an in-process model and :class:`FakeOpenAIServer` a local
  OpenAI-compatible server (``python -m coach.testing.openai_server``); both play back
  the same :class:`Script` of :class:`Reply` items, built with :func:`say`, :func:`call`
  and :func:`calls` or loaded from YAML with :func:`load_script`, and both record every
  request, so a test can assert what each agent was told.
* :class:`FakeRoom` (:mod:`coach.testing.fake_room`) stands in for a LiveKit room: text
  streams, attributes and RPC, recorded.
* :func:`memory_store` (``async with memory_store() as store:``) is coach's own store on
  a database in memory: no file, no server, and gone when the block ends.
* :mod:`coach.testing.demo` is ``python -m coach demo``: two visits of a scripted person,
  the second resuming the first. :data:`DEMO_SCRIPT` and :data:`DEMO_VISITS` are its
  scripts, a start for your own.
* The voice parts (:mod:`coach.testing.speech_server`, :mod:`coach.testing.caller`,
  :mod:`coach.testing.voice`) carry real speech through a session: Debian's
  ``espeak-ng`` speaks and PyPI's ``pocketsphinx`` (the ``dev`` extra) listens.

Nothing in coach imports this package but the ``demo`` command.
"""

from .fake_room import FakeRoom
from .memory_store import memory_store
from .openai_server import FakeOpenAIServer
from .script import (
    DEMO_SCRIPT,
    DEMO_VISITS,
    Reply,
    Script,
    ScriptError,
    ScriptExhausted,
    ToolCall,
    call,
    calls,
    raw_call,
    say,
)
from .script_files import load_script, parse_script
from .scripted_llm import RecordedRequest, ScriptedLLM

__all__ = [
    "DEMO_SCRIPT",
    "DEMO_VISITS",
    "FakeOpenAIServer",
    "FakeRoom",
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
    "memory_store",
    "parse_script",
    "raw_call",
    "say",
]
