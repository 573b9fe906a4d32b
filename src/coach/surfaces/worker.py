"""The LiveKit worker: one ``AgentServer`` with the ``coach`` rtc_session entrypoint.

:mod:`.livekit_cli` runs it (and LiveKit's other commands) after checking what they need.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from livekit.agents import (
    AgentServer,
    AgentSession,
    CloseEvent,
    CloseReason,
    ErrorEvent,
    JobContext,
    JobProcess,
    llm,
    room_io,
)
from livekit.agents.voice.agent_session import SessionConnectOptions
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent
from livekit.agents.worker import _DefaultLoadCalc

from ..conversation.runtime import Runtime
from ..errors import InvalidWrite
from ..models import VoiceModels, load_plugins, load_vad
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


OUTAGE_SENTENCES: dict[str, str] = {
    "llm_error": (
        "Sorry, I can't reach my language model right now, so I have to end this call. "
        "Everything we said is saved: join again in a little while and we'll pick up "
        "where we stopped."
    ),
    "stt_error": (
        "Sorry, I can't hear you right now: my speech recognition stopped working, so I "
        "have to end this call. Everything we said is saved: join again and we'll pick up "
        "where we stopped."
    ),
    "tts_error": (
        "Sorry, my voice stopped working, so I have to end this call. Everything we said "
        "is saved: join again and we'll pick up where we stopped."
    ),
}
"""What the user is told before the room closes, by what failed."""

OUTAGE_LIMIT = SessionConnectOptions.max_unrecoverable_errors
"""Failed requests of one model (each after the plugin's retries) that are borne before
the job ends; the next one ends it (LiveKit's own default)."""

TELL_GUARD = 30.0
"""Seconds the telling may take at most before the room closes anyway (a hang guard)."""


def end_job_on_outage(
    session: AgentSession[Any],
    job: JobControls,
    *,
    tell: Callable[[str], Awaitable[None]] | None = None,
    limit: int = OUTAGE_LIMIT,
) -> None:
    """When a model or speech service keeps failing (``limit`` unrecoverable errors of
    one kind, then one more), tell the user why, then end the job instead of leaving them
    with a silent agent.

    The sentence (:data:`OUTAGE_SENTENCES`) goes to ``tell`` (the room's transcript) and,
    unless it is the voice that failed, is spoken. Then the room is deleted, so the user's
    reconnect dispatches a fresh job that continues the session, and the job ends: its
    shutdown callbacks flush the recorder, so everything said is stored and the session
    stays in progress. The session itself must not close on those errors
    (``max_unrecoverable_errors`` above ``limit``); a close for an error it decides on
    alone still ends the job, untold.
    """
    failures: Counter[str] = Counter()
    ending: list[asyncio.Task[None]] = []

    def end(reason: str) -> None:
        logger.error("ending the job after an unrecoverable failure", extra={"reason": reason})
        job.delete_room()
        job.shutdown(reason)

    async def tell_then_end(kind: str, reason: str) -> None:
        sentence = OUTAGE_SENTENCES.get(kind, OUTAGE_SENTENCES["llm_error"])
        try:
            async with asyncio.timeout(TELL_GUARD):
                if tell is not None:
                    await tell(sentence)
                if kind != "tts_error":
                    speech = session.say(sentence, allow_interruptions=False, add_to_chat_ctx=False)
                    await speech.wait_for_playout()
        except Exception as exc:  # the room closes anyway; what failed is said in the log
            logger.warning("could not tell the user about the outage: %s", type(exc).__name__)
        end(reason)

    def on_error(event: ErrorEvent) -> None:
        error = event.error
        kind = getattr(error, "type", "")
        if getattr(error, "recoverable", True) or kind not in OUTAGE_SENTENCES or ending:
            return
        failures[kind] += 1
        if failures[kind] > limit:
            cause = getattr(error, "error", None)
            what = "speech" if kind in ("stt_error", "tts_error") else "model"
            reason = f"{what} failure: {cause}" if cause is not None else f"{what} failure"
            ending.append(asyncio.create_task(tell_then_end(kind, reason)))

    def on_close(event: CloseEvent) -> None:
        if event.reason != CloseReason.ERROR or ending:
            return
        cause = event.error.error if event.error is not None else None
        end(f"model failure: {cause}" if cause is not None else "model failure")

    session.on("error", on_error)
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
        userdata,
        llm=models.llm,
        stt=models.stt,
        tts=models.tts,
        vad=ctx.proc.userdata["vad"],
        max_model_failures=sys.maxsize,  # end_job_on_outage decides, and tells first
    )
    end_job_on_outage(session, ctx, tell=sink.tell)
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
