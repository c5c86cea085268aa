"""Writes of a reconcile pass run under the elector's permit: none is sent once the replica may no longer write (a
cancelled pass's worker thread included), and the Lease is released only when none is on its way."""

from __future__ import annotations

import asyncio
from typing import Any

from mnnvl_runtime import kube, leases

from . import fakes

QUICK = leases.Timing(lease_duration=3.0, renew_deadline=0.4, retry_period=0.05)


def test_a_withdrawn_permit_stops_writes_but_not_reads() -> None:
    api = fakes.RecordingApi()
    client = kube.Kube(api, field_manager="mnnvl-lws")  # type: ignore[arg-type]
    valid = [True]
    context = fakes.under(kube.WritePermit(lambda: valid[0]))
    context.run(client.request, "PATCH", "/api/v1/namespaces/a/pods/p", body=[])
    valid[0] = False
    context.run(client.request, "GET", "/api/v1/namespaces/a/pods/p")
    try:
        context.run(client.request, "DELETE", "/api/v1/namespaces/a/pods/p")
        raise AssertionError("a write was sent without a valid permit")
    except kube.WriteWithdrawnError:
        pass
    client.request("DELETE", "/api/v1/namespaces/a/pods/q")  # outside any permit (admission): not tied to it
    assert api.sent == [
        "PATCH /api/v1/namespaces/a/pods/p",
        "GET /api/v1/namespaces/a/pods/p",
        "DELETE /api/v1/namespaces/a/pods/q",
    ]


def test_a_retry_is_not_sent_once_the_permit_is_withdrawn() -> None:
    api = fakes.RecordingApi(statuses=(503,))
    client = kube.Kube(api, field_manager="mnnvl-lws", max_backoff=0.01)  # type: ignore[arg-type]
    valid = [True]

    def withdraw_after_first_send(method: str, url: str, **kwargs: Any) -> fakes.Response:
        answer = fakes.RecordingApi.call_api(api, method, url, **kwargs)
        valid[0] = False
        return answer

    api.call_api = withdraw_after_first_send  # type: ignore[method-assign]
    try:
        fakes.under(kube.WritePermit(lambda: valid[0])).run(
            client.request, "PUT", "/api/v1/namespaces/a/pods/p", body={}
        )
        raise AssertionError("the retry was sent")
    except kube.WriteWithdrawnError:
        pass
    assert api.sent == ["PUT /api/v1/namespaces/a/pods/p"]


def _stepping_down_with_a_write_on_its_way(*, answers: bool) -> list[str]:
    server = fakes.LeaseServer()
    subject = leases.LeaderElector(server, namespace="mnnvl-system", name="mnnvl-lws", holder="me", timing=QUICK)
    api = fakes.RecordingApi()
    api.hold.clear()
    client = kube.Kube(api, field_manager="mnnvl-lws")  # type: ignore[arg-type]

    def finish_write() -> None:
        server.journal.append("write answered")
        api.hold.set()

    async def scenario() -> None:
        election = asyncio.create_task(subject.run())
        await fakes.within(subject.leading_event.wait())
        writer = asyncio.create_task(
            client.arequest("PATCH", "/api/v1/namespaces/a/pods/p", body=[]), context=fakes.under(subject.permit)
        )
        subject.track_writer(writer)
        await fakes.within(asyncio.to_thread(api.on_the_way.wait, fakes.PATIENCE))
        if answers:
            asyncio.get_running_loop().call_later(0.1, finish_write)
        election.cancel()  # steps down: the writer is cancelled, its request is still in a worker thread
        await asyncio.gather(election, return_exceptions=True)
        api.hold.set()

    asyncio.run(scenario())
    return server.journal


def test_the_lease_is_released_only_after_the_last_write_on_its_way_is_answered() -> None:
    assert _stepping_down_with_a_write_on_its_way(answers=True)[-2:] == ["write answered", "released"]


def test_a_write_still_on_its_way_leaves_the_lease_to_expire() -> None:
    assert "released" not in _stepping_down_with_a_write_on_its_way(answers=False)
