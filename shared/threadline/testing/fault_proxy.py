"""``PX``: a TCP fault proxy between a test's client and a server on this machine (docs/testing.md).

:class:`FaultProxy` listens on a free loopback port and relays every connection to ``target``.
Its :attr:`~FaultProxy.mode`, as it is when data comes back from the server (so a kept-alive
connection opened before the mode was set is hit too), decides what the client sees:

* ``pass`` — a plain relay;
* ``drop_response`` — the request reaches the server and its answer is read, but the client's
  socket is reset instead of relaying it (an answer lost on the way back);
* ``rst_after`` — ``limit`` bytes of the answer are relayed, then the client's socket is reset;
* ``stall`` — nothing more is read from the server nor written to the client; both sockets stay
  open (no FIN).

:meth:`~FaultProxy.cut` resets every open client connection now (whatever its mode), e.g. right
after a stream's first event. A reset is a close with ``SO_LINGER`` 0 (RST, not FIN). Loopback
only: the target is a local server of the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["pass", "drop_response", "rst_after", "stall"]
DROP_READ_S = 0.3
"""How long (s) ``drop_response`` reads the server's answer after its first bytes before the reset."""


def reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with RST (``SO_LINGER`` 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


@dataclass
class FaultProxy:
    """A TCP relay to ``target`` (host, port) on :attr:`port`, with faults by :attr:`mode`.

    Use as ``async with FaultProxy(("127.0.0.1", gw_port)) as px: ...`` (``px.url`` is the
    proxied ``http://127.0.0.1:<port>``). ``connections`` counts the connections accepted,
    ``dropped`` the answers ``drop_response`` read and never relayed."""

    target: tuple[str, int]
    mode: Mode = "pass"
    limit: int = 0
    """``rst_after``: bytes relayed before the reset."""
    times: int | None = None
    """How many faults the mode makes (answers dropped, connections reset; ``None``: no end);
    after them the mode is ``pass`` again."""
    port: int = 0
    connections: int = 0
    dropped: int = 0
    _server: asyncio.Server | None = None
    _open: set[asyncio.StreamWriter] = field(default_factory=set)
    _upstreams: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for upstream in list(self._upstreams):
            upstream.close()  # the relays end by themselves (a cancelled one is logged by asyncio)
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=2)
            for task in pending:  # stall holds on for good
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def cut(self) -> int:
        """Reset every open client connection now; how many were open."""
        count = len(self._open)
        for writer in list(self._open):
            reset(writer)
        self._open.clear()
        return count

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            reset(writer)
            return
        self._open.add(writer)
        self._upstreams.add(up_writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream = asyncio.create_task(self._pump(reader, up_writer))
        try:
            await self._answer(up_reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            upstream.cancel()
            await asyncio.gather(upstream, return_exceptions=True)
            up_writer.close()
            self._upstreams.discard(up_writer)
            if writer in self._open:
                self._open.discard(writer)
                writer.close()
            self._tasks.discard(task)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()

    def _made(self) -> None:
        """One fault made: count it against :attr:`times`."""
        if self.times is not None:
            self.times -= 1
            if self.times <= 0:
                self.mode, self.times = "pass", None

    async def _answer(self, up: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        sent = 0
        while data := await up.read(65536):
            mode, limit = self.mode, self.limit
            if mode == "stall":
                await asyncio.Event().wait()  # hold both sockets open until the proxy closes
            if mode == "drop_response":
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(DROP_READ_S):
                        while await up.read(65536):
                            pass
                self.dropped += 1
                self._made()
                self._open.discard(client)
                reset(client)
                return
            if mode == "rst_after" and sent + len(data) >= limit:
                client.write(data[:limit - sent])
                await client.drain()
                self._made()
                self._open.discard(client)
                reset(client)
                return
            client.write(data)
            await client.drain()
            sent += len(data)
