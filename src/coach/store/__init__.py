"""The storage contract: the :class:`Store` protocol, the records it returns and the
writes it applies. Pure Python — importing it loads no database library; the SQLAlchemy
implementation is :mod:`coach.persistence`.
"""

from ..state.resume import HistoryMessage, ResumeContext
from .ops import (
    AddMessage,
    AppendSteps,
    PhaseDone,
    SavePhaseOutput,
    UpdateSession,
    WriteOp,
    WriteZone,
)
from .protocol import Store
from .records import (
    MessageRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    UserRecord,
)

__all__ = [
    "AddMessage",
    "AppendSteps",
    "HistoryMessage",
    "MessageRecord",
    "PhaseDone",
    "PhaseOutputRecord",
    "ResumeContext",
    "ResumeResult",
    "SavePhaseOutput",
    "SessionRecord",
    "StateRecord",
    "Store",
    "UpdateSession",
    "UserRecord",
    "WriteOp",
    "WriteZone",
]
