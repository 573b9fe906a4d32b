"""Tools offered by state (SPEC §3a): an agent offers the model only the tools that can
work now.

The rule per tool reads :class:`~coach.conversation.userdata.UserData` only, so the same
state always offers the same list. A tool left out is still the agent's: a model that
calls it anyway gets the tool's own refusal, as before. Fewer, valid choices help every
model (a small one picks the first tool listed) and shrink every request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from livekit.agents import llm

from ..conversation.userdata import UserData

Rule = Callable[[UserData], bool]


def _has_phase_left(owner: str) -> Rule:
    return lambda u: any(
        p.owner == owner and p.id not in u.phase_outputs for p in u.prompts.manifest.phases
    )


def _can_branch(userdata: UserData) -> bool:
    """An open session with a completed phase, or a selected one whose listing had one."""
    if userdata.session_id is not None:
        return bool(userdata.phase_outputs)
    pending = userdata.pending_session_id
    return any(s.id == pending and s.completed_phases for s in userdata.past_sessions)


def _has_other_session(userdata: UserData) -> bool:
    return any(s.id != userdata.session_id for s in userdata.past_sessions)


OFFERED_WHEN: dict[str, Rule] = {
    # the coach
    "identify_user": lambda u: u.user_id is None,
    "select_session_to_load": lambda u: u.user_id is not None and bool(u.past_sessions),
    "load_selected_session": lambda u: u.pending_session_id is not None,
    "capture_design_challenge": lambda u: u.user_id is not None,
    "transfer_to_strategist": lambda u: u.session_id is not None and u.design_challenge is not None,
    "branch_session": _can_branch,
    # the strategist
    "complete_phase": _has_phase_left("strategist"),
    "transfer_to_evaluator": lambda u: not _has_phase_left("strategist")(u),
    "select_idea": lambda u: bool(u.state.data["ideas"]),
    "remove_idea": lambda u: bool(u.state.data["ideas"]),
    "search_past_work": _has_other_session,
    # the evaluator
    "finish_session": lambda u: u.evaluation is not None or u.next_phase() is None,
    # the person (coach and strategist)
    "remember_about_person": lambda u: u.user_id is not None,
    "correct_about_person": lambda u: bool(u.person["facts"]),
    "forget_about_person": lambda u: bool(u.person["facts"]),
}
"""When each tool can work; a tool without a rule is always offered."""


def offered_tools(tools: Sequence[llm.Tool], userdata: UserData) -> list[llm.Tool]:
    """The tools of ``tools`` that can work in the current state, in their order."""
    kept: list[llm.Tool] = []
    for tool in tools:
        name = tool.info.name if isinstance(tool, llm.FunctionTool | llm.RawFunctionTool) else None
        rule = OFFERED_WHEN.get(name) if name is not None else None
        if rule is None or rule(userdata):
            kept.append(tool)
    return kept
