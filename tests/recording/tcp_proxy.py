"""A tiny TCP relay on 127.0.0.1 that a test can cut and restore (a database outage).

``cut()`` closes every relayed connection and stops listening, so new connections are
refused; ``restore()`` listens on the same port again. ``stall()`` keeps every
connection open but relays nothing, new ones included (a server that hangs, or packets
dropped on the way); ``resume()`` lets the bytes flow again. ``cut_after_next_commit()`` arms
a cut for the moment a PostgreSQL ``COMMIT`` has been executed by the server but before
its acknowledgement reaches the client — the commit landed, the client cannot know.
"""

from __future__ import annotations

import asyncio
import contextlib


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.commit_sent = False

    def close(self) -> None:
        self.client.transport.abort()
        self.upstream.transport.abort()


class TcpProxy:
    """Relays ``127.0.0.1:<port>`` to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._commit_armed = False
        self.port = 0
        self.connections = 0
        """Client connections accepted since start."""
        self.cut_done = asyncio.Event()
        """Set when a cut (immediate or armed) has happened."""
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def start(self) -> None:
        """Listen (on a free port the first time, on the same port afterwards)."""
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def up(self) -> bool:
        return self._server is not None

    async def cut(self) -> None:
        """Drop every relayed connection and refuse new ones."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self._links):
            link.close()
        self._links.clear()
        self.cut_done.set()

    async def restore(self) -> None:
        """Accept connections again."""
        self._commit_armed = False
        await self.start()

    def stall(self) -> None:
        """Relay nothing from now on (connections stay open) until :meth:`resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        """Relay again what a stall held back."""
        self._flowing.set()

    def cut_after_next_commit(self) -> None:
        """Cut once the server has answered the next ``COMMIT`` (the answer is not relayed)."""
        self.cut_done.clear()
        self._commit_armed = True

    async def aclose(self) -> None:
        await self.cut()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted just before a cut
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        link = _Link(writer, up_writer)
        self._links.add(link)
        self._spawn(self._pump_to_server(link, reader))
        self._spawn(self._pump_to_client(link, up_reader))

    async def _pump_to_server(self, link: _Link, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                # asyncpg sends COMMIT as a simple query ('Q') on its own.
                if self._commit_armed and chunk[:1] == b"Q" and b"COMMIT" in chunk:
                    link.commit_sent = True
                await self._flowing.wait()
                link.upstream.write(chunk)
                await link.upstream.drain()
        link.close()
        self._links.discard(link)

    async def _pump_to_client(self, link: _Link, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                if link.commit_sent and self._commit_armed:
                    link.commit_sent = False
                    if chunk[:1] == b"C" and b"COMMIT" in chunk:
                        # The server has executed the COMMIT; its answer never arrives.
                        self._commit_armed = False
                        await self.cut()
                        return
                await self._flowing.wait()
                link.client.write(chunk)
                await link.client.drain()
        link.close()
        self._links.discard(link)
