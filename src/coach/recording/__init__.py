"""Recording live sessions into the store without slowing the voice turn: one queue and
one group-committing writer task per process (:class:`Recorder`)."""

from ..store import AddMessage, AppendSteps, SavePhaseOutput, UpdateSession, WriteOp, WriteZone
from .writer import Losses, Recorder, RecorderStats

__all__ = [
    "AddMessage",
    "AppendSteps",
    "Losses",
    "Recorder",
    "RecorderStats",
    "SavePhaseOutput",
    "UpdateSession",
    "WriteOp",
    "WriteZone",
]
