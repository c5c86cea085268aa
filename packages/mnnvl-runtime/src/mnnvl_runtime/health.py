"""The health port: `/healthz` for liveness (every loop the controller runs for good still runs) and `/readyz` for
readiness (this replica may get admission requests: every watch store holds a full list, its webhook server answers,
and it is not shutting down). Whether it is ready, and why not, is `not_ready` on plain facts; the rest gathers the
facts and speaks just enough HTTP for the kubelet's probes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import Callable, Mapping

import kopf

from . import controller

#: How long one readiness check waits for the webhook server, and the server for a probe's request.
CHECK_TIMEOUT_SECONDS = 2.0
#: An HTTP request for the webhook server: any answer proves it serves (kopf's answers a GET with 405).
_WEBHOOK_REQUEST = b"GET / HTTP/1.1\r\nHost: readiness\r\nConnection: close\r\n\r\n"
_REASONS = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadinessFacts:
    shutting_down: bool
    #: Whether the webhooks' answers depend on the stores: only with the AutoComputeDomain gate on. With it off
    #: they refuse every opt-in whatever the stores hold, and the ComputeDomain list the stores need may be
    #: forbidden (the chart grants that RBAC only with the gate or `computeDomainManagement`), so it never syncs.
    stores_required: bool = True
    #: Each store sync, by the kind it reconciles: whether its stores hold a full list.
    store_syncs: Mapping[str, bool]
    #: None: this controller serves no webhooks; else whether its webhook server answered over TLS.
    webhook_answers: bool | None


def not_ready(facts: ReadinessFacts) -> list[str]:
    """Why this replica must not get traffic; empty when it is ready."""
    if facts.shutting_down:
        return ["shutting down"]
    reasons = []
    if facts.stores_required and not facts.store_syncs:
        reasons.append("watch stores not started")
    pending = sorted(kind for kind, synced in facts.store_syncs.items() if not synced)
    if facts.stores_required and pending:
        reasons.append(f"watch stores not synced: {', '.join(pending)}")
    if facts.webhook_answers is False:
        reasons.append("webhook server not answering")
    return reasons


def local_address(host: str) -> str:
    """Where this process reaches its own server bound to `host`: the loopback for a wildcard address."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


async def webhook_answers(host: str, port: int, *, timeout: float = CHECK_TIMEOUT_SECONDS) -> bool:
    """Whether the server on (host, port) completes a TLS handshake and answers an HTTP request. Its certificate is
    not checked: it names the Service, and this only asks whether the server serves."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            try:
                writer.write(_WEBHOOK_REQUEST)
                await writer.drain()
                status_line = await reader.readline()
            finally:
                writer.close()
    except (OSError, TimeoutError):  # ssl.SSLError is an OSError
        return False
    return status_line.startswith(b"HTTP/")


class HealthServer:
    """Answers the probes of one controller process; `webhook` is where its webhook server listens (None: it
    serves none), `shutting_down` says whether SIGTERM has come, `started` whether kopf's startup handlers (which
    start the controller's loops) have finished."""

    def __init__(
        self,
        *,
        webhook: tuple[str, int] | None,
        shutting_down: Callable[[], bool],
        started: Callable[[], bool] = lambda: True,
        stores_required: bool = True,
    ) -> None:
        self.webhook = webhook
        self.shutting_down = shutting_down
        self.started = started
        self.stores_required = stores_required

    async def serve(self, host: str, port: int) -> asyncio.Server:
        """Listen on (host, port); raises OSError when the port cannot be bound."""
        return await asyncio.start_server(self._answer, host, port)

    async def readiness(self) -> ReadinessFacts:
        answers = None if self.webhook is None else await webhook_answers(*self.webhook)
        return ReadinessFacts(
            shutting_down=self.shutting_down(),
            stores_required=self.stores_required,
            store_syncs=controller.store_syncs(),
            webhook_answers=answers,
        )

    async def respond(self, path: str) -> tuple[int, str]:
        """The status and body for a GET of `path`."""
        path = path.partition("?")[0]
        if path == "/healthz":
            # Not alive until the loops have started: a startup handler that keeps failing gets the process
            # restarted, instead of a live replica that may win the Lease with no loop to do its work.
            if not self.started():
                return 503, "starting: the startup handlers have not finished"
            try:
                verdict = controller.check_tasks_running(controller.watched_tasks())
            except kopf.PermanentError as error:
                return 500, str(error)
            return 200, json.dumps({"controller-loops": verdict})
        if path == "/readyz":
            reasons = not_ready(await self.readiness())
            return (503, "not ready: " + "; ".join(reasons)) if reasons else (200, "ready")
        return 404, "not found: /healthz and /readyz are served"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS * 2):
                request_line = await reader.readline()
                while await reader.readline() not in (b"\r\n", b"\n", b""):  # the headers, unused
                    pass
                _, _, target = request_line.decode("latin-1").partition(" ")
                status, body = await self.respond(target.partition(" ")[0])
                payload = body.encode()
                writer.write(
                    f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (OSError, TimeoutError):
            pass  # the prober went away or was too slow; it will ask again
        finally:
            writer.close()
