"""Recording live sessions into the store without slowing the voice turn: one queue and
one group-committing writer task per process (:class:`Recorder`)."""

from ..store import AddMessage, AppendSteps, SavePhaseOutput, UpdateSession, WriteOp, WriteZone
from .writer import Recorder, RecorderStats

__all__ = [
    "AddMessage",
    "AppendSteps",
    "Recorder",
    "RecorderStats",
    "SavePhaseOutput",
    "UpdateSession",
    "WriteOp",
    "WriteZone",
]
