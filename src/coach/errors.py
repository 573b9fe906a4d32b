"""The one exception tree of coach.

Every error coach raises on purpose derives from :class:`CoachError`::

    CoachError
    ├── ConfigError            bad or missing configuration (settings, LLM setup)
    ├── PromptError            a prompt file or the phase manifest is broken
    ├── StorageError           the database failed; the driver error is the __cause__
    │   └── StaleWrite         another writer advanced the same session first
    ├── InvalidRole            a conversation message with a role we do not store
    ├── InvalidWrite           a write with bad input (status, zone value, unpicklable step)
    ├── CorruptBlob            a stored value failed its signature, authentication or allow-list
    ├── PersonErased           a person's data key is destroyed: what a copy holds is unreadable
    ├── NoOpenSession          a phase was started or ended with no session open
    ├── NotIdentified          a session or the person was read or written for no one
    ├── SavingBehind           saving is catching up: a load or branch cannot read back yet
    ├── BranchRefused          a session cannot be branched there (message is user-facing)
    └── ResumeError            a session cannot be resumed (message is user-facing)
        ├── SessionNotFound    unknown id, or not this user's (indistinguishable)
        ├── SessionCompleted   the session is already completed
        ├── SessionFailed      the session failed
        └── NothingToResume    no phase of the session was completed

Tools turn these into words for the user (``ToolError``); the CLI turns them into one
line on stderr and a non-zero exit code. Driver exceptions never leave the persistence
package unwrapped. Every error pickles to an equal one.
"""

from __future__ import annotations


class CoachError(Exception):
    """Base class of every error coach raises on purpose."""


class ConfigError(CoachError):
    """Raised when settings are missing or invalid (e.g. no LLM configured)."""


class PromptError(CoachError):
    """Raised when a prompt file or the phase manifest cannot be loaded or rendered.

    The message names the file, the key and the reason.
    """

    def __init__(self, file: str, key: str, reason: str) -> None:
        self.file = file
        self.key = key
        self.reason = reason
        super().__init__(f"{file}: {key}: {reason}")

    def __reduce__(self) -> tuple[type[PromptError], tuple[str, str, str]]:
        return (type(self), (self.file, self.key, self.reason))


class StorageError(CoachError):
    """Raised when the database fails; the driver's exception is the ``__cause__``.

    ``transient`` says whether the failure may pass by itself (a lost connection, a
    locked database), as judged where the driver error was caught; a conflict or
    refused content never does.
    """

    transient: bool = False


class StaleWrite(StorageError):
    """Raised when a writer's view of a session is older than what is stored.

    Two workers writing the same session never interleave silently: the slower one
    gets this error and must reload before writing again.
    """


class InvalidRole(CoachError):
    """Raised when a conversation message has a role other than user/assistant/system."""

    def __init__(self, role: str) -> None:
        self.role = role
        super().__init__(f"Invalid role: {role}. Must be user, assistant, or system")

    def __reduce__(self) -> tuple[type[InvalidRole], tuple[str]]:
        return (type(self), (self.role,))


class InvalidWrite(CoachError, ValueError):
    """Raised when a write is refused for its input; nothing is written.

    For example an unknown session or phase status, a zone value that is not a JSON
    object, or a memory step that cannot be pickled. Retrying the same write cannot
    succeed.
    """


class CorruptBlob(CoachError):
    """Raised when a stored memory step fails its HMAC check, allow-list or unpickling,
    or a stored personal field fails its authentication (edited, or moved to another row
    or person)."""


class PersonErased(CoachError):
    """Raised when the data key of the person who owns what is read has been destroyed:
    the person was erased, and what a copy of the database still holds of them cannot be
    read by anyone."""

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        super().__init__(
            f"User {user_id} was erased: their data key is destroyed, so what this "
            "database still holds of them cannot be read."
        )

    def __reduce__(self) -> tuple[type[PersonErased], tuple[str]]:
        return (type(self), (self.user_id,))


class NoOpenSession(CoachError):
    """Raised when a phase is started or ended, or a session finished, while no session
    is open: a tool called before ``capture_design_challenge`` or a resume."""

    def __init__(self, action: str = "record a phase") -> None:
        self.action = action
        super().__init__(f"No session is open to {action} in.")

    def __reduce__(self) -> tuple[type[NoOpenSession], tuple[str]]:
        return (type(self), (self.action,))


class NotIdentified(CoachError):
    """Raised when a session is read, loaded or branched, or the person's record written,
    while no user is identified (before ``identify_user``, or after they were erased):
    a read without a user id would not be limited to one user's sessions."""

    def __init__(self, action: str) -> None:
        self.action = action
        super().__init__(f"No user is identified yet: cannot {action}.")

    def __reduce__(self) -> tuple[type[NotIdentified], tuple[str]]:
        return (type(self), (self.action,))


class SavingBehind(CoachError):
    """Raised when a load, branch or reconnect must first store what this process still
    has queued, and the database did not take it within the deadline (``seconds``):
    saving is still catching up. Nothing changed; the same request may work in a moment.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"Queued writes were not stored within {seconds:g} s.")

    def __reduce__(self) -> tuple[type[SavingBehind], tuple[float]]:
        return (type(self), (self.seconds,))


class BranchRefused(CoachError):
    """Raised when a session cannot be branched from a phase: the phase is unknown, not
    completed, the last one, or has no recorded end. The message is meant for the user.
    (A session that does not exist or is not the caller's is :class:`SessionNotFound`.)"""

    def __init__(self, session_id: str, phase_id: str, message: str) -> None:
        self.session_id = session_id
        self.phase_id = phase_id
        super().__init__(message)

    def __reduce__(self) -> tuple[type[BranchRefused], tuple[str, str, str]]:
        return (type(self), (self.session_id, self.phase_id, str(self)))


class ResumeError(CoachError):
    """Base of the errors that stop a session from being resumed.

    The message is meant for the user and names the session id.
    """

    def __init__(self, session_id: str, message: str) -> None:
        self.session_id = session_id
        super().__init__(message)

    def __reduce__(self) -> tuple[type[ResumeError], tuple[str, ...]]:
        if type(self) is ResumeError:
            return (ResumeError, (self.session_id, str(self)))
        return (type(self), (self.session_id,))


class SessionNotFound(ResumeError):
    """Raised when a session does not exist or belongs to another user."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, f"Session {session_id} not found")


class SessionCompleted(ResumeError):
    """Raised when resuming a session whose status is ``completed``."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, f"Session {session_id} already completed")


class SessionFailed(ResumeError):
    """Raised when resuming a session whose status is ``failed``."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, f"Session {session_id} failed and cannot be resumed")


class NothingToResume(ResumeError):
    """Raised when a session has no completed phase to resume from."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, f"Session {session_id} has no completed phases to resume from")
