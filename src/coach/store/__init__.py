"""The storage contract: the :class:`Store` protocol (split by caller: :class:`Reads`,
:class:`BatchWriter`, :class:`Lifecycle`, :class:`SeedWrites`), the records it returns and the
writes it applies. Pure Python — importing it loads no database library; the SQLAlchemy
implementation is :mod:`coach.persistence`. :mod:`.text` holds the rules for the text
coach accepts (:func:`check_identity`, :func:`clean_text`).
"""

from ..state.resume import HistoryMessage, ResumeContext
from .ops import (
    AddMessage,
    AppendSteps,
    ClosePhase,
    PhaseDone,
    SavePhaseOutput,
    UpdateSession,
    WriteOp,
    WriteZone,
)
from .protocol import BatchWriter, Lifecycle, Reads, SeedWrites, Store
from .records import (
    MessageRecord,
    PersonRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    StepPage,
    UserRecord,
    session_tree,
)
from .text import MAX_IDENTITY, check_identity, clean_text, identity_keys, is_clean

__all__ = [
    "AddMessage",
    "AppendSteps",
    "BatchWriter",
    "ClosePhase",
    "MAX_IDENTITY",
    "HistoryMessage",
    "Lifecycle",
    "MessageRecord",
    "PhaseDone",
    "PhaseOutputRecord",
    "ResumeContext",
    "ResumeResult",
    "SavePhaseOutput",
    "SeedWrites",
    "SessionRecord",
    "PersonRecord",
    "Reads",
    "StateRecord",
    "StepPage",
    "Store",
    "UpdateSession",
    "UserRecord",
    "WriteOp",
    "WriteZone",
    "check_identity",
    "identity_keys",
    "clean_text",
    "is_clean",
    "session_tree",
]
