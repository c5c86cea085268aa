from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from mnnvl_runtime import kube, leases

from . import fakes

FAST = leases.Timing(lease_duration=3.0, renew_deadline=0.4, retry_period=0.05)


def elector(server: fakes.LeaseServer, timing: leases.Timing = FAST, **kwargs: Any) -> leases.LeaderElector:
    return leases.LeaderElector(
        server, namespace="mnnvl-system", name="mnnvl-lws", holder="me", timing=timing, **kwargs
    )


async def leading(subject: leases.LeaderElector) -> asyncio.Task[None]:
    """Run `subject` until it leads; the running election is returned, for the test to end."""
    election = asyncio.create_task(subject.run())
    await fakes.within(subject.leading_event.wait())
    return election


async def stop(election: asyncio.Task[None]) -> None:
    election.cancel()
    await asyncio.gather(election, return_exceptions=True)


def stepped_down(subject: leases.LeaderElector) -> asyncio.Event:
    """Set once `subject` stops leading."""
    event = asyncio.Event()
    subject.on_change.append(lambda now_leading: None if now_leading else event.set())
    return event


# --- the pure decisions --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "observed_at", "expected"),
    [
        pytest.param(
            {"holderIdentity": "", "leaseTransitions": 3},
            1000.0,
            {"holderIdentity": "me", "acquireTime": "T", "renewTime": "T", "leaseTransitions": 4},
            id="released",
        ),
        pytest.param(
            {"holderIdentity": "me", "acquireTime": "A", "leaseTransitions": 3},
            1000.0,
            {"holderIdentity": "me", "acquireTime": "A", "renewTime": "T", "leaseTransitions": 3},
            id="ours-renewed",
        ),
        pytest.param({"holderIdentity": "other", "leaseDurationSeconds": 15}, 1000.0, None, id="other-unexpired"),
        pytest.param(
            {"holderIdentity": "other", "leaseDurationSeconds": 15, "leaseTransitions": 1},
            984.0,
            {"holderIdentity": "me", "acquireTime": "T", "renewTime": "T", "leaseTransitions": 2},
            id="other-unchanged-for-longer-than-its-duration",
        ),
    ],
)
def test_a_lease_is_claimed_when_free_ours_or_expired(
    spec: kube.Object, observed_at: float, expected: kube.Object | None
) -> None:
    observation = leases.Observation((spec.get("holderIdentity"), None), observed_at)
    claimed = leases.claim(
        spec, holder="me", observation=observation, timing=leases.Timing(), now=1000.0, wall_time="T"
    )
    if expected is None:
        assert claimed is None
    else:
        assert claimed == {**spec, "leaseDurationSeconds": 15, **expected}


def test_expiry_counts_from_when_the_record_last_changed_not_from_its_timestamps() -> None:
    seen = leases.Observation(("other", "2020-01-01T00:00:00Z"), 10.0)
    assert leases.observe({"holderIdentity": "other", "renewTime": "2020-01-01T00:00:00Z"}, seen, 50.0) == seen
    renewed = {"holderIdentity": "other", "renewTime": "2020-01-01T00:00:02Z"}
    assert leases.observe(renewed, seen, 50.0) == leases.Observation(("other", "2020-01-01T00:00:02Z"), 50.0)


# --- bounded attempts ----------------------------------------------------------------------------------------


def test_lease_calls_are_single_requests_with_a_timeout_below_the_renew_deadline() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)

    async def scenario() -> None:
        election = await leading(subject)
        await stop(election)

    asyncio.run(scenario())
    assert server.holder == ""  # acquired, then released on the way out
    assert {timeout for _, timeout in server.requests} == {FAST.request_timeout}
    assert FAST.request_timeout == min(FAST.retry_period, FAST.renew_deadline / 2)


class _Unavailable:
    """An ApiClient whose server answers every call with 503."""

    def __init__(self) -> None:
        self.calls = 0

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[Any, ...]:
        return method, resource_path, {}, None, None

    def call_api(self, *_: Any, **__: Any) -> Any:
        self.calls += 1
        response = type("Response", (), {"status": 503, "reason": "Unavailable", "read": lambda self: b""})
        return response()


def test_the_elector_client_does_not_retry() -> None:
    api = _Unavailable()
    shared = kube.Kube(api, field_manager="mnnvl-lws")  # type: ignore[arg-type]
    single = leases.single_attempt_client(shared)
    with pytest.raises(kube.ApiError):
        single.request("GET", "/apis/coordination.k8s.io/v1/namespaces/x/leases/y", timeout=1.0)
    assert (api.calls, single.field_manager, single.api) == (1, "mnnvl-lws", shared.api)


def test_a_hung_renewal_steps_down_by_the_renew_deadline() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)

    async def scenario() -> float:
        election = await leading(subject)
        down = stepped_down(subject)
        server.answering.clear()  # every call from now on hangs, as on a partitioned API server
        hung_at = asyncio.get_running_loop().time()
        await fakes.within(down.wait())
        waited = asyncio.get_running_loop().time() - hung_at
        server.answering.set()
        await stop(election)
        return waited

    waited = asyncio.run(scenario())
    assert not subject.is_leader
    # Stepped down within the deadline (plus one retry period), not after the hung call gave up.
    assert waited < FAST.renew_deadline + FAST.retry_period + 0.5 < fakes.HANG_LIMIT


# --- state changes on the event loop, step-down order ---------------------------------------------------------


def test_leading_changes_only_on_the_event_loop_thread() -> None:
    server = fakes.LeaseServer()
    threads: list[tuple[bool, threading.Thread]] = []
    subject = elector(server, on_change=[lambda now_leading: threads.append((now_leading, threading.current_thread()))])

    async def scenario() -> None:
        election = await leading(subject)
        await stop(election)

    asyncio.run(scenario())
    assert threads == [(True, threading.main_thread()), (False, threading.main_thread())]


def test_stepping_down_stops_new_writes_then_cancels_running_ones_then_releases_the_lease() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)
    subject.on_change.append(lambda now_leading: server.journal.append(f"leading={now_leading}"))

    async def scenario() -> None:
        election = await leading(subject)
        started = asyncio.Event()

        async def write() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                server.journal.append(f"writer cancelled, may_write={subject.may_write()}")
                raise

        writer = asyncio.create_task(write())
        subject.track_writer(writer)
        await fakes.within(started.wait())
        await stop(election)
        assert writer.cancelled()

    asyncio.run(scenario())
    assert server.journal == ["leading=True", "leading=False", "writer cancelled, may_write=False", "released"]


def test_a_lease_taken_by_another_replica_stops_writes_and_is_left_to_it() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)

    async def scenario() -> None:
        election = await leading(subject)
        down = stepped_down(subject)
        writer = asyncio.create_task(asyncio.Event().wait())
        subject.track_writer(writer)
        server.take_by("other")
        await fakes.within(down.wait())
        await asyncio.gather(writer, return_exceptions=True)
        assert writer.cancelled()
        await stop(election)

    asyncio.run(scenario())
    assert server.holder == "other"
    assert "released" not in server.journal


# --- may_write -----------------------------------------------------------------------------------------------


def test_writes_are_allowed_only_within_the_renew_deadline_of_the_last_renewal() -> None:
    server = fakes.LeaseServer()
    clock = fakes.Clock()
    subject = elector(server, leases.Timing(lease_duration=15, renew_deadline=10, retry_period=0.05), clock=clock)

    async def scenario() -> None:
        assert not subject.may_write()
        election = await leading(subject)
        down = stepped_down(subject)
        server.failing = 500  # no renewal succeeds from here on
        clock.now += 9.9
        assert subject.may_write()
        clock.now += 0.1
        assert subject.is_leader  # the election has not looked yet ...
        assert not subject.may_write()  # ... but nothing may be written any more
        await fakes.within(down.wait())
        server.failing = None
        await stop(election)

    asyncio.run(scenario())


def test_each_start_of_leading_is_a_new_term() -> None:
    """What a replica knew while it led before must be told apart from what it sees once it leads again."""
    server = fakes.LeaseServer()
    subject = elector(server)

    async def scenario() -> None:
        assert subject.term() == 0
        election = await leading(subject)
        assert subject.term() == 1
        down = stepped_down(subject)
        server.take_by("other")
        await fakes.within(down.wait())
        assert subject.term() == 1  # not leading: still the term that ended
        server.take_by("")  # released: this replica takes it again
        await fakes.within(subject.leading_event.wait())
        assert subject.term() == 2
        await stop(election)

    asyncio.run(scenario())


def test_without_leader_election_a_replica_leads_for_good() -> None:
    clock = fakes.Clock()
    subject = elector(fakes.LeaseServer(), clock=clock)
    subject.lead_without_lease()
    clock.now += 1e6
    assert subject.is_leader
    assert subject.leading_event.is_set()
    assert subject.may_write()
