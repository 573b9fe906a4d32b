"""Recording live sessions into the repository without slowing the voice turn."""

from .ops import AddMessage, AppendSteps, SavePhaseOutput, UpdateSession, WriteOp, WriteZone
from .session import SessionRecorder
from .writer import Recorder, RecorderStats

__all__ = [
    "AddMessage",
    "AppendSteps",
    "Recorder",
    "RecorderStats",
    "SavePhaseOutput",
    "SessionRecorder",
    "UpdateSession",
    "WriteOp",
    "WriteZone",
]
