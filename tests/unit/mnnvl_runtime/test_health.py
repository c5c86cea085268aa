"""The readiness decision on plain facts, and the thin I/O around it: the webhook check against real local servers
(TLS that answers, plain TCP, nothing listening) and the probe endpoint's answers."""

from __future__ import annotations

import asyncio
import pathlib
import ssl

import pytest

from mnnvl_runtime import certs, controller, health

from . import fakes

READY = health.ReadinessFacts(shutting_down=False, store_syncs={"LeaderWorkerSet": True}, webhook_answers=True)


def test_a_synced_replica_whose_webhook_server_answers_is_ready() -> None:
    assert health.not_ready(READY) == []


def test_a_controller_without_webhooks_is_ready_once_its_stores_are_synced() -> None:
    facts = health.ReadinessFacts(shutting_down=False, store_syncs={"Topology": True}, webhook_answers=None)
    assert health.not_ready(facts) == []


@pytest.mark.parametrize(
    ("facts", "reasons"),
    [
        pytest.param(
            health.ReadinessFacts(shutting_down=False, store_syncs={}, webhook_answers=True),
            ["watch stores not started"],
            id="stores-not-started",
        ),
        pytest.param(
            health.ReadinessFacts(
                shutting_down=False,
                store_syncs={"Pod": True, "LeaderWorkerSet": False, "ComputeDomain": False},
                webhook_answers=True,
            ),
            ["watch stores not synced: ComputeDomain, LeaderWorkerSet"],
            id="stores-not-synced",
        ),
        pytest.param(
            health.ReadinessFacts(shutting_down=False, store_syncs={"Pod": True}, webhook_answers=False),
            ["webhook server not answering"],
            id="webhook-silent",
        ),
        pytest.param(
            # The gate off and no ComputeDomain RBAC (the chart's default): the domain list never succeeds.
            health.ReadinessFacts(
                shutting_down=False,
                stores_required=False,
                store_syncs={"LeaderWorkerSet": False},
                webhook_answers=True,
            ),
            [],
            id="gate-off-stores-not-needed",
        ),
        pytest.param(
            health.ReadinessFacts(shutting_down=False, stores_required=False, store_syncs={}, webhook_answers=False),
            ["webhook server not answering"],
            id="gate-off-webhook-silent",
        ),
        pytest.param(
            health.ReadinessFacts(shutting_down=False, store_syncs={"Pod": False}, webhook_answers=False),
            ["watch stores not synced: Pod", "webhook server not answering"],
            id="both",
        ),
        pytest.param(
            health.ReadinessFacts(shutting_down=True, store_syncs={"Pod": True}, webhook_answers=True),
            ["shutting down"],
            id="shutting-down-while-otherwise-ready",
        ),
        pytest.param(
            health.ReadinessFacts(shutting_down=True, store_syncs={"Pod": False}, webhook_answers=False),
            ["shutting down"],
            id="shutting-down-says-only-that",
        ),
    ],
)
def test_a_replica_is_not_ready_and_says_why(facts: health.ReadinessFacts, reasons: list[str]) -> None:
    assert health.not_ready(facts) == reasons


@pytest.mark.parametrize(
    ("bound", "reached"), [("", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("10.0.0.7", "10.0.0.7")]
)
def test_a_wildcard_bind_address_is_reached_on_the_loopback(bound: str, reached: str) -> None:
    assert health.local_address(bound) == reached


async def _answer_405(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readline()
    writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    writer.close()


def _tls(tmp_path: pathlib.Path) -> ssl.SSLContext:
    pair = certs.ensure_webhook_certificate(tmp_path, ("127.0.0.1",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    return context


def test_the_webhook_check_passes_only_for_a_tls_server_that_answers(tmp_path: pathlib.Path) -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        tls = await asyncio.start_server(_answer_405, "127.0.0.1", 0, ssl=_tls(tmp_path))
        plain = await asyncio.start_server(_answer_405, "127.0.0.1", 0)
        closed = await asyncio.start_server(_answer_405, "127.0.0.1", 0)
        closed_port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        async with tls, plain:
            return (
                await fakes.within(health.webhook_answers("127.0.0.1", tls.sockets[0].getsockname()[1])),
                await fakes.within(health.webhook_answers("127.0.0.1", plain.sockets[0].getsockname()[1])),
                await fakes.within(health.webhook_answers("127.0.0.1", closed_port)),
            )

    assert asyncio.run(scenario()) == (True, False, False)


def test_the_webhook_check_gives_up_on_a_server_that_never_answers(tmp_path: pathlib.Path) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads until the checker hangs up, never answering

    async def scenario() -> bool:
        server = await asyncio.start_server(silent, "127.0.0.1", 0, ssl=_tls(tmp_path))
        async with server:
            port = server.sockets[0].getsockname()[1]
            return await fakes.within(health.webhook_answers("127.0.0.1", port, timeout=0.2))

    assert asyncio.run(scenario()) is False


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.decode().partition("\r\n\r\n")
    return int(head.split(" ")[1]), body


def test_the_readiness_endpoint_answers_503_with_the_reasons_until_ready_then_200_until_shutdown() -> None:
    async def scenario() -> list[tuple[int, str]]:
        synced = asyncio.Event()
        controller.watch_store_sync("Probed", synced)
        shutting_down = asyncio.Event()
        probes = health.HealthServer(webhook=None, shutting_down=shutting_down.is_set)
        server = await probes.serve("127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        answers = []
        async with server:
            answers.append(await fakes.within(_get(port, "/readyz")))
            synced.set()
            answers.append(await fakes.within(_get(port, "/readyz")))
            shutting_down.set()
            answers.append(await fakes.within(_get(port, "/readyz")))
            answers.append(await fakes.within(_get(port, "/metrics")))
        return answers

    assert asyncio.run(scenario()) == [
        (503, "not ready: watch stores not synced: Probed"),
        (200, "ready"),
        (503, "not ready: shutting down"),
        (404, "not found: /healthz and /readyz are served"),
    ]


def test_the_liveness_endpoint_answers_500_naming_a_loop_that_ended() -> None:
    async def scenario() -> tuple[int, str]:
        async def crash() -> None:
            raise RuntimeError("index corrupted")

        ended = asyncio.create_task(crash(), name="store-sync-Probed")
        await asyncio.gather(ended, return_exceptions=True)
        controller.watch_tasks(ended)
        server = await health.HealthServer(webhook=None, shutting_down=lambda: False).serve("127.0.0.1", 0)
        async with server:
            return await fakes.within(_get(server.sockets[0].getsockname()[1], "/healthz"))

    status, body = asyncio.run(scenario())
    assert status == 500
    assert "store-sync-Probed died: RuntimeError('index corrupted')" in body


def test_healthz_fails_until_the_startup_handlers_have_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller, "_WATCHED_TASKS", [])  # no loop ended (another test's may have)
    started = [False]
    probes = health.HealthServer(webhook=None, shutting_down=lambda: False, started=lambda: started[0])
    before = asyncio.run(probes.respond("/healthz"))
    started[0] = True
    after = asyncio.run(probes.respond("/healthz"))
    assert before == (503, "starting: the startup handlers have not finished")
    assert after[0] == 200
