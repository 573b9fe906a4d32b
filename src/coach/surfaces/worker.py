"""The LiveKit worker: one ``AgentServer`` with the ``coach`` rtc_session entrypoint.

:mod:`.livekit_cli` runs it (and LiveKit's other commands) after checking what they need.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Protocol

from livekit.agents import (
    AgentServer,
    AgentSession,
    CloseEvent,
    CloseReason,
    JobContext,
    JobProcess,
    llm,
    room_io,
)
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent
from livekit.agents.worker import _DefaultLoadCalc

from ..errors import InvalidWrite
from ..models import VoiceModels, load_plugins, load_vad
from ..runtime import Runtime
from ..settings import Settings, load_settings
from ..store import check_identity
from .health import DatabaseHealth
from .room import HandoffStep, RoomStateSink, ToolStep
from .rpc import register_all
from .token import AGENT_NAME

logger = logging.getLogger("coach.worker")

load_plugins()


def prewarm(proc: JobProcess) -> None:
    """Before a job arrives, once per job process: load the VAD and build the model
    clients, so the job's event loop starts the conversation without building them.
    (The framework's own warm-up — local inference models, the OpenAI SDK's resources, a
    frozen heap — comes before this; ``bench/loop_blocks.py`` shows nothing is left.)"""
    proc.userdata["vad"] = load_vad()
    proc.userdata["models"] = VoiceModels.build(load_settings())


def voice_models(proc: JobProcess, settings: Settings) -> VoiceModels:
    """The clients ``prewarm`` built (or, without a prewarm, built now)."""
    models = proc.userdata.get("models")
    return models if isinstance(models, VoiceModels) else VoiceModels.build(settings)


def room_options(proc: JobProcess, participant_identity: str) -> room_io.RoomOptions:
    """How the session uses the job's room: LiveKit's defaults (audio in and out, typed
    input on ``lk.chat``, transcripts out), unless the process holds other options under
    ``"room_options"``. ``prewarm`` never sets them; the entrypoint's tests set text-only
    options, because a room without a server carries no audio tracks to play or hear.

    Either way the session listens to ``participant_identity`` only — the participant
    whose sessions, state stream and RPC calls this job serves — not to whoever the
    room happens to show it first."""
    options = proc.userdata.get("room_options")
    if not isinstance(options, room_io.RoomOptions):
        options = room_io.RoomOptions()
    return dataclasses.replace(options, participant_identity=participant_identity)


class CoachServer(AgentServer):
    """An ``AgentServer`` that remembers why it stopped instead of logging a traceback,
    so that the command can say it in one line and exit non-zero."""

    failure: Exception | None = None

    def serve_metrics(self, port: int, directory: str) -> None:
        """Serve Prometheus metrics on ``port`` with LiveKit's endpoint, adding up the job
        processes' values through ``directory`` (multiprocess mode). The options exist
        only as constructor arguments, and this server is built at import."""
        self._prometheus_port = port
        self._prometheus_multiproc_dir = directory

    async def run(self, *, devmode: bool = False, unregistered: bool = False) -> None:
        """Run the server; a failure (e.g. registration refused after the retries) is
        kept in :attr:`failure`."""
        try:
            await super().run(devmode=devmode, unregistered=unregistered)
        except Exception as exc:
            self.failure = exc


health = DatabaseHealth(lambda: load_settings().database_url, _DefaultLoadCalc.get_load)
"""Reports the worker full while its database cannot be used (see :mod:`.health`)."""
server = CoachServer(setup_fnc=prewarm, load_fnc=health.load)


class JobControls(Protocol):
    """The two things a job's room does on a model failure (a ``JobContext`` has both)."""

    def delete_room(self, room_name: str | None = None) -> asyncio.Future[Any]:
        """Delete the job's room, disconnecting everyone in it."""
        ...

    def shutdown(self, reason: str = "user requested") -> None:
        """End the job: the session closes, then the shutdown callbacks run."""
        ...


def end_job_on_model_failure(session: AgentSession[Any], job: JobControls) -> None:
    """When ``session`` closes for a model error it could not recover from (after the
    plugin's retries), end the job instead of leaving the user with a silent agent.

    The job's shutdown callbacks flush the recorder, so everything said is stored and
    the session stays in progress. The room is deleted, so that the user's reconnect
    creates it anew, which dispatches a fresh job that continues the session.
    """

    def on_close(event: CloseEvent) -> None:
        if event.reason != CloseReason.ERROR:
            return
        cause = event.error.error if event.error is not None else None
        reason = f"model failure: {cause}" if cause is not None else "model failure"
        logger.error("ending the job after an unrecoverable model error", extra={"reason": reason})
        job.delete_room()
        job.shutdown(reason)

    session.on("close", on_close)


def stream_steps(session: AgentSession[Any], sink: RoomStateSink) -> None:
    """Send every tool call and handoff of ``session`` on ``coach.steps`` as it happens
    (the web client's "show steps"; nothing else reads it). The first agent taking the
    session at its start is not a handoff."""

    def on_tools(event: FunctionToolsExecutedEvent) -> None:
        for call, output in zip(event.function_calls, event.function_call_outputs, strict=False):
            ok = output is None or not output.is_error
            sink.publish_step(
                ToolStep(type="tool", tool=call.name, arguments=call.arguments, ok=ok)
            )

    def on_item(event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.AgentHandoff) and item.old_agent_id is not None:
            sink.publish_step(
                HandoffStep(
                    type="handoff", from_agent=item.old_agent_id, to_agent=item.new_agent_id
                )
            )

    session.on("function_tools_executed", on_tools)
    session.on("conversation_item_added", on_item)


def user_identity(participant_identity: str, *, fake_job: bool) -> str | None:
    """Who the room's user is, or ``None`` when they must say their name (SPEC §3).

    ``console`` runs a fake job whose participant is a stand-in shared by everyone, and
    a token may carry an identity no user can have (:func:`~coach.store.check_identity`):
    then no room session is continued, and the coach asks for a name instead of failing.
    """
    if fake_job:
        return None
    try:
        return check_identity(participant_identity)
    except InvalidWrite as exc:
        logger.error("participant identity refused (%s); asking for a name instead", exc)
        return None


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    """Run one conversation in the job's room."""
    settings = load_settings()
    # The engine binds to this job's event loop, so it is created here, not in prewarm.
    runtime = await Runtime.open(settings)

    async def _flush(reason: str) -> None:
        logger.info("job shutting down; flushing recorder", extra={"reason": reason})
        await runtime.aclose()

    ctx.add_shutdown_callback(_flush)
    await ctx.connect()
    participant = await ctx.wait_for_participant()
    identity = user_identity(participant.identity, fake_job=ctx.is_fake_job())
    sink = RoomStateSink(ctx.room.local_participant, participant.identity)
    ctx.add_shutdown_callback(sink.aclose)
    models = voice_models(ctx.proc, settings)
    userdata = runtime.new_userdata(identity=identity, sink=sink, model=models.llm)
    if identity is not None and isinstance(participant.name, str) and participant.name:
        userdata.user_name = participant.name
    session = runtime.new_session(
        userdata, llm=models.llm, stt=models.stt, tts=models.tts, vad=ctx.proc.userdata["vad"]
    )
    end_job_on_model_failure(session, ctx)
    stream_steps(session, sink)
    agent = (
        runtime.first_agent(userdata)
        if identity is None
        else await runtime.room_agent(userdata, ctx.room.name)
    )
    await session.start(
        agent=agent, room=ctx.room, room_options=room_options(ctx.proc, participant.identity)
    )
    register_all(ctx.room.local_participant, userdata, session)
