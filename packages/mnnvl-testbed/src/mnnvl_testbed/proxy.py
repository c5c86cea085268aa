"""A TCP stand-in for a controller's webhook Service: spreads connections over the replicas that are up, and can
be made slow (each connection held before it is forwarded) or unreachable (each connection closed at once).

TLS passes through untouched: the replicas' certificate names 127.0.0.1, where the proxy listens too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Sequence

PASS = "pass"
SLOW = "slow"
DOWN = "down"


class WebhookProxy:
    def __init__(self, upstream_ports: Callable[[], Sequence[int]], *, slow_seconds: float) -> None:
        """`upstream_ports`: the webhook ports of the replicas up now; `slow_seconds`: how long SLOW holds a call."""
        self._upstream_ports = upstream_ports
        self.slow_seconds = slow_seconds
        self.mode = PASS
        self.port = 0
        self._turn = itertools.count()
        #: The connections being served: asyncio holds their tasks weakly only, and a collected one drops its call.
        self._serving: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="webhook-proxy", daemon=True)

    def start(self) -> WebhookProxy:
        self._thread.start()
        self._ready.wait(timeout=10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        # Calls still open when the stand-in stops are cut, as a Service's would be when it goes: not an error.
        self._loop.set_exception_handler(lambda loop, context: None)
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        try:
            if self.mode == DOWN:
                return
            if self.mode == SLOW:
                await asyncio.sleep(self.slow_seconds)
            ports = list(self._upstream_ports())
            if not ports:
                return
            upstream = ports[next(self._turn) % len(ports)]
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
            except OSError:
                return
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                with contextlib.suppress(OSError):
                    up_writer.close()
        finally:
            with contextlib.suppress(OSError):
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then half-close: the other direction may still be answering."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        with contextlib.suppress(OSError):
            writer.close()
