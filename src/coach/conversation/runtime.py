"""Wiring shared by every surface (worker, chat REPL, tests): one per process.

A :class:`Runtime` owns the repository (engine and pool), the prompt book and the
recorder's background writer; :meth:`Runtime.new_session` builds an ``AgentSession``
with its ``UserData`` and recording attached.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from livekit.agents import AgentSession, APIConnectOptions, llm
from livekit.agents.voice.agent_session import SessionConnectOptions
from livekit.agents.voice.events import ErrorEvent

from .. import metrics
from ..agents import CoachAgentBase, DesignCoach
from ..agents.coach import LISTED
from ..agents.restore import resume_into
from ..errors import ResumeError, SavingBehind
from ..persistence import open_repository
from ..prompts import PromptBook, load_prompts
from ..settings import Settings
from ..state.board import Renderer
from ..store import Store
from .attach import SessionRecorder
from .live_state import LiveState, StateSink
from .losses import Losses
from .recorder import Recorder
from .rendering import ModelRenderer
from .userdata import UserData

logger = logging.getLogger("coach")


@dataclass
class Runtime:
    """The process-wide pieces: settings, prompts, repository and recorder."""

    settings: Settings
    prompts: PromptBook
    store: Store
    recorder: Recorder

    @classmethod
    async def open(cls, settings: Settings, *, prompts: PromptBook | None = None) -> Runtime:
        """Load prompts, open the repository (migrating a SQLite file; checking that any
        other database is reachable and migrated) and start the recorder. Raises
        PromptError, ConfigError or StorageError."""
        prompts = prompts or load_prompts(settings.prompts_dir)
        store = await open_repository(
            settings.database_url,
            create_schema=settings.is_embedded_sqlite,
            check_schema=not settings.is_embedded_sqlite,
            secret=settings.memory_secret,
            master_keys=settings.master_keys,
            keys_url=settings.keys_url,
            phase_ids=prompts.manifest.ids,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            call_timeout=settings.db_timeout,
        )
        recorder = Recorder(
            store,
            max_pending=settings.recorder_queue_size,
            commit_interval=settings.recorder_commit_interval,
            shutdown_timeout=settings.recorder_shutdown_timeout,
        )
        recorder.start()
        return cls(settings=settings, prompts=prompts, store=store, recorder=recorder)

    async def aclose(self) -> Losses:
        """Flush the recorder, then close the database, each bounded by the shutdown
        timeout (a stalled database must not hold the exit). Returns what was lost."""
        losses = await self.recorder.aclose()
        try:
            async with asyncio.timeout(self.settings.recorder_shutdown_timeout):
                await self.store.aclose()
        except TimeoutError:
            logger.warning("the database did not close in time; its connections were left")
        return losses

    def new_userdata(
        self,
        *,
        identity: str | None = None,
        sink: StateSink | None = None,
        renderer: Renderer | None = None,
        model: llm.LLM[Any] | None = None,
    ) -> UserData:
        """Fresh shared state for one conversation; ``sink`` hears every state change.

        With ``model`` (the conversation's LLM), the design brief is written by that
        model after each data-changing turn (:class:`~coach.rendering.ModelRenderer`);
        without, by the deterministic renderer.
        """
        model_renderer = (
            ModelRenderer(model, self.prompts.renderer.instructions) if model is not None else None
        )
        return UserData(
            prompts=self.prompts,
            store=self.store,
            recorder=self.recorder,
            state=LiveState(
                self.recorder, sink=sink, renderer=renderer, model_renderer=model_renderer
            ),
            identity=identity,
            max_resume_pairs=self.settings.resume_max_pairs,
            max_history_tokens=self.settings.max_history_tokens,
            max_history_lines=self.settings.max_history_lines,
            brief_max_tokens=self.settings.brief_max_tokens,
        )

    def new_session(
        self,
        userdata: UserData,
        *,
        max_model_failures: int = SessionConnectOptions.max_unrecoverable_errors,
        **session_kwargs: Any,
    ) -> AgentSession[UserData]:
        """An ``AgentSession`` for ``userdata`` with recording attached.

        The LLM request timeout comes from settings: the plugin's per-request default
        (10 s) is too short for a local model loading its weights. After
        ``max_model_failures`` failed turns in a row (each after the plugin's retries)
        the session closes; the chat, where the user can wait for the model, raises it.
        """
        session_kwargs.setdefault(
            "conn_options",
            SessionConnectOptions(
                llm_conn_options=APIConnectOptions(
                    timeout=self.settings.llm_read_timeout,
                    max_retry=self.settings.llm_max_retry,
                ),
                max_unrecoverable_errors=max_model_failures,
            ),
        )
        session: AgentSession[UserData] = AgentSession(userdata=userdata, **session_kwargs)
        SessionRecorder(userdata).attach(session)
        _count(session)
        return session

    def first_agent(self, userdata: UserData) -> DesignCoach:
        """The entry agent of a new conversation."""
        return DesignCoach(userdata)

    async def room_agent(self, userdata: UserData, room: str) -> CoachAgentBase:
        """The agent a conversation in ``room`` starts with.

        A user who reconnects to a room whose session is still in progress continues that
        session with the agent that owns it; anyone else meets the coach.
        """
        userdata.room = room
        user = await self.store.find_user(userdata.identity) if userdata.identity else None
        found = await self.store.find_room_session(user.id, room) if user is not None else None
        if user is None or found is None:
            return self.first_agent(userdata)
        # Read before the agent is made, whose instructions hold them.
        await userdata.identify(user, listed=LISTED)
        try:
            resumed = await resume_into(userdata, found.id, current=llm.ChatContext.empty())
        except (ResumeError, SavingBehind) as exc:
            logger.warning("room session cannot be continued", extra={"error": type(exc).__name__})
            return self.first_agent(userdata)
        logger.info("reconnect continues the room's session", extra={"session_id": found.id})
        return resumed.agent


def _count(session: AgentSession[UserData]) -> None:
    """Count the session as active until it closes, and each error of its models."""
    metrics.ACTIVE_SESSIONS.inc()

    def closed(_: object) -> None:
        metrics.ACTIVE_SESSIONS.dec()

    def failed(event: ErrorEvent) -> None:
        error = event.error
        kind = getattr(error, "type", type(error).__name__)
        recoverable = str(bool(getattr(error, "recoverable", False))).lower()
        metrics.MODEL_ERRORS.labels(kind, recoverable).inc()

    session.on("close", closed)
    session.on("error", failed)
