"""Pure session-state logic: zones, deltas and the resume window. No I/O here."""

from __future__ import annotations

from .resume import (
    DEFAULT_MAX_PAIRS,
    HistoryMessage,
    ResumeContext,
    completed_phase_ids,
    next_phase_id,
    reconstruct_history,
)
from .zones import (
    WRITABLE_ZONES,
    ZONES,
    Action,
    Delta,
    DeltaSpec,
    DeltaType,
    ResultMeta,
    Source,
    Trigger,
    Zone,
    zone_of,
)

__all__ = [
    "DEFAULT_MAX_PAIRS",
    "WRITABLE_ZONES",
    "ZONES",
    "Action",
    "Delta",
    "DeltaSpec",
    "DeltaType",
    "HistoryMessage",
    "ResultMeta",
    "ResumeContext",
    "Source",
    "Trigger",
    "Zone",
    "completed_phase_ids",
    "next_phase_id",
    "reconstruct_history",
    "zone_of",
]
