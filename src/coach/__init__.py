"""coach: a LiveKit voice-agent worker that coaches people through design challenges and
never loses their place.

The names a program embedding coach needs are here; each is imported when first used,
so ``import coach`` (which every ``python -m coach`` command does) stays light::

    from coach import Runtime, load_settings

    runtime = await Runtime.open(load_settings())
    userdata = runtime.new_userdata(identity="ada")
    session = runtime.new_session(userdata, llm=...)
    await session.start(runtime.first_agent(userdata))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "CoachError": "coach.errors",
    "ConfigError": "coach.errors",
    "Settings": "coach.settings",
    "load_settings": "coach.settings",
    "Runtime": "coach.conversation.runtime",
    "UserData": "coach.conversation.userdata",
    "DesignCoach": "coach.agents",
    "DesignStrategist": "coach.agents",
    "DesignEvaluator": "coach.agents",
}

__all__ = [
    "CoachError",
    "ConfigError",
    "DesignCoach",
    "DesignEvaluator",
    "DesignStrategist",
    "Runtime",
    "Settings",
    "UserData",
    "__version__",
    "load_settings",
]

if TYPE_CHECKING:
    __version__: str
    from .agents import DesignCoach, DesignEvaluator, DesignStrategist
    from .conversation.runtime import Runtime
    from .conversation.userdata import UserData
    from .errors import CoachError, ConfigError
    from .settings import Settings, load_settings


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'coach' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def _version() -> str:
    # Asked for, not at import: reading the installed metadata is 0.05-0.1 s of CPU,
    # which every command would pay.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coach")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0.0.0"
