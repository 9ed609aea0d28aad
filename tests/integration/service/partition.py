"""A TCP proxy a test can partition: while ``cut`` is set, bytes are read but held, in both
directions and on new connections alike (no FIN, no RST: what a network partition looks like to
both ends). Used to cut one allocator off from PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.engine import make_url

from services.allocator.adapters import database


class PartitionProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``; ``cut`` holds all traffic."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> PartitionProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def url(self, database_url: str) -> str:
        """``database_url`` pointing at this proxy."""
        return make_url(database.asyncpg_dsn(database_url)).set(port=self.port).render_as_string(hide_password=False)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        while self.cut:
            await asyncio.sleep(0.05)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        for source, sink in ((client_r, server_w), (server_r, client_w)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await source.read(65536):
                while self.cut:
                    await asyncio.sleep(0.05)
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError, ConnectionError):
            sink.close()
