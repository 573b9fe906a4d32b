"""Recording live sessions into the store without slowing the voice turn: one queue and
one group-committing writer task per process (:class:`Recorder`). The operations it
writes are the store's (:mod:`coach.store`)."""

from .writer import Losses, Recorder, RecorderStats

__all__ = ["Losses", "Recorder", "RecorderStats"]
