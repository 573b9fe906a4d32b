"""Prompts are data: YAML files under ``prompts/`` validated into typed models at start-up.

``load_prompts()`` reads one file per agent plus the phase manifest and checks every
template against the variables its agent can fill, so a typo stops the worker at once
with the file, the key and the reason (:class:`~coach.errors.PromptError`). Rendering is
strict: a variable that is not supplied is an error, never an empty string.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._resources import resource_path
from .errors import PromptError
from .state.shapes import AgentKind as AgentKind  # declared with the view zone that names it

AGENT_FILES: dict[AgentKind, str] = {
    "coach": "design_coach.yaml",
    "strategist": "design_strategist.yaml",
    "evaluator": "design_evaluator.yaml",
}
MANIFEST_FILE = "phases.yaml"
RENDERER_FILE = "renderer.yaml"
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""``yaml.safe_load``'s loader, in C where PyYAML was built with libyaml (its wheels
are): the prompt book parses in a fraction of the time."""

# What each agent's templates may use; checked at load time, filled at render time.
_COMMON_VARIABLES = frozenset({"user_name", "phase_list", "session_brief"})
_PHASED_VARIABLES = _COMMON_VARIABLES | {"design_challenge", "phase_name", "phase_instructions"}
AGENT_VARIABLES: dict[AgentKind, frozenset[str]] = {
    "coach": _COMMON_VARIABLES,
    "strategist": _PHASED_VARIABLES,
    "evaluator": _PHASED_VARIABLES,
}
REQUIRED_INSTRUCTION_VARIABLES = frozenset({"session_brief"})
"""What every agent's instructions must use: without the brief an agent would not see
what the session decided (a prompt without it is refused at start-up)."""
GREETING_VARIABLES = frozenset({"user_name", "design_challenge", "phase_name", "recap", "sessions"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class Phase(_Strict):
    """One step of the design process, owned by one agent."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    name: str = Field(min_length=1)
    owner: AgentKind
    instructions: str = Field(min_length=1)


class PhaseManifest(_Strict):
    """The ordered phases of a design session."""

    version: Literal[1] = 1
    phases: tuple[Phase, ...] = Field(min_length=1)

    @field_validator("phases")
    @classmethod
    def _ordered(cls, phases: tuple[Phase, ...]) -> tuple[Phase, ...]:
        ids = [p.id for p in phases]
        if len(set(ids)) != len(ids):
            raise ValueError(f"phase ids must be unique, got {ids}")
        order = {"coach": 0, "strategist": 1, "evaluator": 2}
        owners = [order[p.owner] for p in phases]
        if owners != sorted(owners):
            raise ValueError("phases must be ordered coach, then strategist, then evaluator")
        for kind in ("coach", "strategist", "evaluator"):
            if kind not in {p.owner for p in phases}:
                raise ValueError(f"no phase is owned by the {kind}")
        return phases

    @property
    def ids(self) -> tuple[str, ...]:
        """Phase ids in order."""
        return tuple(p.id for p in self.phases)

    def get(self, phase_id: str) -> Phase:
        """The phase with this id (``KeyError`` if unknown)."""
        for phase in self.phases:
            if phase.id == phase_id:
                return phase
        raise KeyError(phase_id)

    def owned_by(self, owner: AgentKind) -> tuple[Phase, ...]:
        """The phases one agent works through, in order."""
        return tuple(p for p in self.phases if p.owner == owner)

    def next_after(self, phase_id: str) -> Phase | None:
        """The phase after ``phase_id``, or ``None`` after the last."""
        ids = self.ids
        index = ids.index(phase_id) + 1
        return self.phases[index] if index < len(ids) else None


class AgentPrompt(_Strict):
    """One agent's prompt file."""

    instructions: str = Field(min_length=1)
    """The system prompt template."""
    greeting: str = Field(min_length=1)
    """What the agent is told to do when it takes over (its first reply)."""
    resume_greeting: str | None = None
    """The greeting when it takes over a resumed session (may use ``{recap}``)."""
    returning_greeting: str | None = None
    """The coach's greeting when the user is known at start (may use ``{sessions}``)."""


class RendererPrompt(_Strict):
    """The renderer's prompt file (layer 3: the design brief)."""

    instructions: str = Field(min_length=1)
    """The renderer's system prompt (no variables)."""


@dataclass(frozen=True)
class PromptBook:
    """Every prompt coach uses, validated."""

    agents: Mapping[AgentKind, AgentPrompt]
    manifest: PhaseManifest
    renderer: RendererPrompt

    def render(self, agent: AgentKind, key: str, **variables: Any) -> str:
        """Render one template of an agent's file; a missing variable is a PromptError."""
        template = getattr(self.agents[agent], key)
        if template is None:
            raise PromptError(AGENT_FILES[agent], key, "no such template")
        return render(template, variables, file=AGENT_FILES[agent], key=key)

    def phase_list(self) -> str:
        """A one-line overview of the phases, for prompts."""
        return " → ".join(f"{p.name} ({p.id})" for p in self.manifest.phases)


def placeholders(template: str) -> set[str]:
    """The ``{name}`` fields a template uses (``{{`` and ``}}`` are literal braces)."""
    names: set[str] = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None:
            if not field.isidentifier():
                raise ValueError(f"'{{{field}}}' is not a plain variable name")
            names.add(field)
    return names


def render(template: str, variables: Mapping[str, Any], *, file: str, key: str) -> str:
    """Fill ``template`` from ``variables``; every placeholder must be supplied."""
    try:
        needed = placeholders(template)
    except ValueError as exc:
        raise PromptError(file, key, str(exc)) from exc
    missing = sorted(needed - variables.keys())
    if missing:
        raise PromptError(file, key, f"missing variable(s): {', '.join(missing)}")
    return template.format_map({name: variables[name] for name in needed})


def load_manifest(directory: Path | None = None) -> PhaseManifest:
    """The phase manifest of ``directory`` (default: the shipped prompts), validated."""
    directory = directory or resource_path("prompts")
    try:
        return PhaseManifest.model_validate(_read_yaml(directory, MANIFEST_FILE))
    except ValidationError as exc:
        raise _validation_error(MANIFEST_FILE, exc) from None


def load_prompts(directory: Path | None = None) -> PromptBook:
    """Load and validate the prompt files and the phase manifest from ``directory``."""
    directory = directory or resource_path("prompts")
    manifest = load_manifest(directory)
    agents: dict[AgentKind, AgentPrompt] = {}
    for kind, file in AGENT_FILES.items():
        raw = _read_yaml(directory, file)
        try:
            prompt = AgentPrompt.model_validate(raw)
        except ValidationError as exc:
            raise _validation_error(file, exc) from None
        _check_variables(file, "instructions", prompt.instructions, AGENT_VARIABLES[kind])
        missing = sorted(REQUIRED_INSTRUCTION_VARIABLES - placeholders(prompt.instructions))
        if missing:
            raise PromptError(
                file, "instructions", f"must use {', '.join('{' + m + '}' for m in missing)}"
            )
        _check_variables(file, "greeting", prompt.greeting, GREETING_VARIABLES)
        for key in ("resume_greeting", "returning_greeting"):
            template = getattr(prompt, key)
            if template is not None:
                _check_variables(file, key, template, GREETING_VARIABLES)
        agents[kind] = prompt
    for phase in manifest.phases:
        _check_variables(
            MANIFEST_FILE, f"phases.{phase.id}.instructions", phase.instructions, set()
        )
    # A prompt directory from before the renderer had a prompt still works: it gets the
    # shipped one.
    shipped = resource_path("prompts")
    source = directory if (directory / RENDERER_FILE).exists() else shipped
    try:
        renderer = RendererPrompt.model_validate(_read_yaml(source, RENDERER_FILE))
    except ValidationError as exc:
        raise _validation_error(RENDERER_FILE, exc) from None
    _check_variables(RENDERER_FILE, "instructions", renderer.instructions, set())
    return PromptBook(agents=agents, manifest=manifest, renderer=renderer)


def _read_yaml(directory: Path, file: str) -> Any:
    path = directory / file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(str(path), "-", f"cannot read file ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "-"
        problem = getattr(exc, "problem", None) or str(exc)
        raise PromptError(str(path), where, f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise PromptError(str(path), "-", "expected a mapping at the top level")
    return data


def _validation_error(file: str, exc: ValidationError) -> PromptError:
    first = exc.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "-"
    return PromptError(file, key, first["msg"])


def _check_variables(
    file: str, key: str, template: str, allowed: set[str] | frozenset[str]
) -> None:
    try:
        used = placeholders(template)
    except ValueError as exc:
        raise PromptError(file, key, str(exc)) from None
    unknown = sorted(used - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise PromptError(file, key, f"unknown variable(s) {', '.join(unknown)} (known: {known})")
