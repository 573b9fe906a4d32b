"""What the project's local OpenAI-compatible servers share: binding a free port,
``base_url``, and ``async with`` to start and stop them."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiohttp import web

__all__ = ["LocalServer"]


class LocalServer:
    """An aiohttp app on a local port; subclasses build it in :meth:`app`.

    Args:
        host: Interface to bind.
        port: Port to bind; ``0`` picks a free one (read it back from :attr:`base_url`).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    def app(self) -> web.Application:
        """The routes this server answers."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:54321/v1`` (only while running)."""
        if self._base_url is None:
            name = type(self).__name__
            raise RuntimeError(f"{name} is not running; use `async with` or start()")
        return self._base_url

    async def start(self) -> None:
        """Bind and start serving."""
        if self._runner is not None:
            raise RuntimeError(f"{type(self).__name__} is already running")
        # A short shutdown timeout: a test that abandons a stream must not hang teardown.
        runner = web.AppRunner(self.app(), shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        host, port = runner.addresses[0][:2]
        self._runner = runner
        self._base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    async def stop(self) -> None:
        """Stop serving and close open connections."""
        runner, self._runner = self._runner, None
        self._base_url = None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
