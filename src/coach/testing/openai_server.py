"""A small local OpenAI-compatible HTTP server that answers from a :class:`Script`.

It lets the real ``livekit.plugins.openai.LLM`` (and so the real HTTP client, SSE parsing
and tool-call reassembly) run end to end without a network::

    async with FakeOpenAIServer([say("Hi!")]) as server:
        model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
        ...
    assert server.requests[0]["messages"][-1]["content"] == "hello"

Endpoints:

* ``GET /v1/models`` — one model, ``fake``.
* ``POST /v1/chat/completions`` — with ``"stream": true`` an SSE stream of
  ``chat.completion.chunk`` objects (a role chunk, text deltas, tool-call deltas whose
  arguments are split over several chunks, a ``finish_reason`` chunk, a usage chunk when
  ``stream_options.include_usage`` is set, then ``data: [DONE]``); otherwise one
  ``chat.completion`` object. When the script is exhausted, or the next reply reads a
  value the request does not hold (``from_request``), it answers HTTP 500 with an
  OpenAI-style error body naming that, and reports the message as one line to
  ``on_error`` (run by hand: on stderr).

Run it by hand (e.g. to try ``python -m coach chat`` against it)::

    python -m coach.testing.openai_server --port 8765 --script replies.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from .local_server import LocalServer
from .script import (
    RenderLane,
    Reply,
    Script,
    ScriptExhausted,
    ScriptMismatch,
    as_script,
    is_render_request,
)
from .script_files import load_script

__all__ = ["FakeOpenAIServer"]

_CREATED = 1_700_000_000


class FakeOpenAIServer(LocalServer):
    """A local OpenAI-compatible chat-completions server playing back a script.

    Args:
        replies: The replies, or a :class:`Script` shared with something else.
        host: Interface to bind.
        port: Port to bind; ``0`` picks a free one (read it back from :attr:`base_url`).
        chunk_size: Characters per streamed text delta and per tool-argument delta.
        on_error: Called with the one-line message of every request the script cannot
            answer (exhausted, or a ``from_request`` value missing).

    Attributes:
        script: The replies still to be served.
        requests: The JSON bodies of every chat-completion request received, in order
            (including the ones answered with an error).
        responses: What was sent back for each request in :attr:`requests`: the list of
            streamed chunk objects, a one-item list holding the ``chat.completion`` object,
            or a one-item list holding the error body.
        errors: The messages of the requests the script could not answer, in order.
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Script = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_size: int = 8,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.script = as_script(replies)
        self.requests: list[dict[str, Any]] = []
        self.responses: list[list[dict[str, Any]]] = []
        self.render = RenderLane()
        """Render requests (the brief's model call), answered apart from the script and
        kept out of :attr:`requests`."""
        self.chunk_size = chunk_size
        self.errors: list[str] = []
        self._on_error = on_error
        super().__init__(host=host, port=port)
        self._ids = itertools.count(1)

    # -- lifecycle ---------------------------------------------------------------------

    def extend(self, replies: Iterable[Reply]) -> None:
        """Append more replies to the script."""
        self.script.extend(replies)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model}", self._model)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        return app

    # -- handlers ------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [_model_object("fake")]})

    async def _model(self, request: web.Request) -> web.Response:
        return web.json_response(_model_object(request.match_info["model"]))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            error = _error_body(f"request body is not JSON: {exc}", "invalid_request_error")
            return web.json_response(error, status=400)
        if not isinstance(body, dict):
            error = _error_body("request body must be a JSON object", "invalid_request_error")
            return web.json_response(error, status=400)
        sent: list[dict[str, Any]] = []
        if is_render_request(body.get("tool_choice")):
            user = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            answer = self.render.answer(str(user[0].get("content") or "") if user else "")
            if self.render.gate is not None:
                await self.render.gate.wait()
            if isinstance(answer, int):
                error = _error_body(f"render failure {answer}", "server_error")
                return web.json_response(error, status=answer)
            return await self._answer(request, body, answer, sent)
        self.requests.append(body)
        self.responses.append(sent)

        try:
            reply = self.script.next_reply(_last_user_detail(body), request=_request_text(body))
        except (ScriptExhausted, ScriptMismatch) as exc:
            code = "script_exhausted" if isinstance(exc, ScriptExhausted) else "script_mismatch"
            error = _error_body(str(exc), code)
            sent.append(error)
            self.errors.append(str(exc))
            if self._on_error is not None:
                self._on_error(str(exc))
            return web.json_response(error, status=500)

        return await self._answer(request, body, reply, sent)

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply, sent: list[dict[str, Any]]
    ) -> web.StreamResponse:
        completion_id = f"chatcmpl-fake-{next(self._ids)}"
        model = str(body.get("model", "fake"))
        usage = _usage(body, reply)
        if not body.get("stream"):
            completion = _completion(completion_id, model, reply, usage)
            sent.append(completion)
            return web.json_response(completion)

        stream_options = body.get("stream_options") or {}
        include_usage = bool(stream_options.get("include_usage"))
        sent.extend(self._chunks(completion_id, model, reply, include_usage=include_usage))
        if include_usage:
            sent.append(_chunk_envelope(completion_id, model, choices=[], usage=usage))

        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for chunk in sent:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chunks(
        self, completion_id: str, model: str, reply: Reply, *, include_usage: bool
    ) -> Iterator[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            extra = {"usage": None} if include_usage else {}
            return _chunk_envelope(completion_id, model, choices=[choice], **extra)

        size = self.chunk_size
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _split(reply.text, size):
            yield chunk({"content": piece})
        for index, tool_call in enumerate(reply.tool_calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": f"call_fake_{next(self._ids)}",
                            "type": "function",
                            "function": {"name": tool_call.name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _split(tool_call.encoded(), size):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, finish_reason="tool_calls" if reply.tool_calls else "stop")


def _split(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _model_object(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": _CREATED, "owned_by": "coach-tests"}


def _error_body(message: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}


def _chunk_envelope(completion_id: str, model: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        **fields,
    }


def _completion(
    completion_id: str, model: str, reply: Reply, usage: dict[str, int]
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{completion_id.removeprefix('chatcmpl-')}_{n}",
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.encoded()},
            }
            for n, tc in enumerate(reply.tool_calls)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": usage,
    }


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    # Rough token counts (4 characters a token): enough for usage plumbing to be exercised.
    prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
    completion_tokens = (len(reply.text) + sum(len(tc.encoded()) for tc in reply.tool_calls)) // 4
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _request_text(body: dict[str, Any]) -> str:
    """Every message's text, one message a line: what ``from_request`` patterns search."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    return "\n".join(_content_text(m.get("content")) for m in messages if isinstance(m, dict))


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _last_user_detail(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return f"last user message: {_content_text(message.get('content'))!r}"
    return ""


async def _serve_forever(server: FakeOpenAIServer) -> None:
    async with server:
        print(
            f"FakeOpenAIServer: {server.script.remaining} scripted replies at {server.base_url}",
            flush=True,
        )
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    """Serve a YAML script until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m coach.testing.openai_server",
        description="Serve scripted replies as a local OpenAI-compatible API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="YAML list of say/call/calls items")
    parser.add_argument("--chunk-size", type=int, default=8)
    args = parser.parse_args(argv)

    replies = load_script(args.script) if args.script else []
    server = FakeOpenAIServer(
        replies,
        host=args.host,
        port=args.port,
        chunk_size=args.chunk_size,
        on_error=lambda message: print(f"FakeOpenAIServer: {message}", file=sys.stderr, flush=True),
    )
    try:
        asyncio.run(_serve_forever(server))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
