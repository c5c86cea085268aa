from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mnnvl_runtime import leases, metrics, operator, workqueue

from . import fakes
from .test_leases import elector, leading, stepped_down, stop


def reconcile_errors(kind: str) -> float:
    return metrics.REGISTRY.get_sample_value("mnnvl_reconcile_errors_total", {"kind": kind}) or 0.0


def sole_leader() -> leases.LeaderElector:
    subject = elector(fakes.LeaseServer())
    subject.lead_without_lease()
    return subject


class RecordingQueue(workqueue.WorkQueue[str]):
    """Records every delayed enqueue and queues the key at once, so back-off is checked without waiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delays: list[tuple[str, float]] = []

    def enqueue_after(self, delay: float, *keys: str) -> None:
        self.delays += [(key, delay) for key in keys]
        self.enqueue(*keys)


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(1, 0.5, id="first-failure-waits-the-base"),
        pytest.param(2, 1.0, id="doubles"),
        pytest.param(5, 8.0, id="keeps-doubling"),
        pytest.param(11, 300.0, id="capped"),
        pytest.param(100_000, 300.0, id="no-overflow-after-days"),
    ],
)
def test_retry_delay_doubles_from_the_base_up_to_the_cap(failures: int, expected: float) -> None:
    assert workqueue.retry_delay(failures, base=0.5, cap=300.0) == expected


def test_a_failing_key_backs_off_exponentially_and_starts_over_after_a_success() -> None:
    outcomes = iter(["fail", "fail", "fail", "succeed", "fail", "succeed"])
    before = reconcile_errors("BackOff")

    async def scenario() -> list[tuple[str, float]]:
        done = asyncio.Event()

        async def work(key: str) -> None:
            outcome = next(outcomes, None)
            if outcome is None:
                done.set()
            elif outcome == "fail":
                raise RuntimeError("the API server said no")
            elif outcome == "succeed":
                queue.enqueue(key)  # a new event for the key

        queue = RecordingQueue(sole_leader(), work, kind="BackOff")
        queue.enqueue("a")
        worker = asyncio.create_task(queue.run())
        await fakes.within(done.wait())
        worker.cancel()
        return queue.delays

    assert asyncio.run(scenario()) == [("a", 0.5), ("a", 1.0), ("a", 2.0), ("a", 0.5)]
    assert reconcile_errors("BackOff") - before == 4


def test_the_back_off_bounds_come_from_the_constructor() -> None:
    async def scenario() -> list[tuple[str, float]]:
        failed = asyncio.Event()
        attempts = 0

        async def work(key: str) -> None:
            nonlocal attempts
            attempts += 1
            if attempts == 4:
                failed.set()
            raise RuntimeError("still broken")

        queue = RecordingQueue(sole_leader(), work, kind="Bounds", retry_seconds=2.0, max_retry_seconds=5.0)
        queue.enqueue("a")
        worker = asyncio.create_task(queue.run())
        await fakes.within(failed.wait())
        worker.cancel()
        return queue.delays

    assert asyncio.run(scenario())[:3] == [("a", 2.0), ("a", 4.0), ("a", 5.0)]


def test_a_delayed_key_waits_once_at_the_sooner_of_its_times() -> None:
    async def scenario() -> None:
        worked = asyncio.Event()

        async def work(key: str) -> None:
            worked.set()

        queue = workqueue.WorkQueue(sole_leader(), work, kind="Delayed")
        loop = asyncio.get_running_loop()
        worker = asyncio.create_task(queue.run())
        queue.enqueue_after(60, "a")
        queue.enqueue_after(30, "a")
        queue.enqueue_after(90, "a")
        assert list(queue.waiting) == ["a"]
        assert queue.waiting["a"].when() == pytest.approx(loop.time() + 30, abs=1)
        queue.enqueue_after(0.01, "a")
        assert list(queue.waiting) == ["a"]
        await fakes.within(worked.wait())
        assert queue.waiting == {}
        worker.cancel()

    asyncio.run(scenario())


def test_delayed_keys_are_dropped_when_the_queue_stops() -> None:
    async def scenario() -> None:
        queue = workqueue.WorkQueue(sole_leader(), _never_called, kind="Stopping")
        worker = asyncio.create_task(queue.run())
        await asyncio.sleep(0)  # let the worker start
        queue.enqueue_after(60, "a")
        timer = queue.waiting["a"]
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        assert timer.cancelled()
        assert queue.waiting == {}

    asyncio.run(scenario())


async def _never_called(key: str) -> None:
    raise AssertionError(f"{key} was worked on")


def test_no_pass_starts_while_the_renewal_is_overdue() -> None:
    server = fakes.LeaseServer()
    clock = fakes.Clock()
    # A retry period far longer than the test, so the election cannot notice the overdue renewal itself.
    subject = elector(server, leases.Timing(lease_duration=3600, renew_deadline=1800, retry_period=900), clock=clock)

    async def scenario() -> None:
        election = await leading(subject)
        clock.now += 1800
        queue = workqueue.WorkQueue(subject, _never_called, kind="Overdue")
        queue.enqueue("a")
        worker = asyncio.create_task(queue.run())
        for _ in range(20):  # hand the worker the loop, many times over
            await asyncio.sleep(0)
        assert subject.is_leader
        assert queue.pending == {"a"}
        worker.cancel()
        await stop(election)

    asyncio.run(scenario())


def test_a_running_pass_is_cancelled_before_the_lease_is_released_and_the_key_is_kept() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)
    subject.on_change.append(lambda now_leading: server.journal.append(f"leading={now_leading}"))

    async def scenario() -> workqueue.WorkQueue[str]:
        election = await leading(subject)
        started = asyncio.Event()

        async def work(key: str) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                server.journal.append(f"pass on {key} cancelled, may_write={subject.may_write()}")
                raise

        queue = workqueue.WorkQueue(subject, work, kind="SteppingDown")
        queue.enqueue("a")
        worker = asyncio.create_task(queue.run())
        await fakes.within(started.wait())
        await stop(election)
        worker.cancel()
        return queue

    queue = asyncio.run(scenario())
    assert server.journal == ["leading=True", "leading=False", "pass on a cancelled, may_write=False", "released"]
    assert queue.pending == {"a"}


def test_every_key_is_queued_again_on_regaining_the_lease() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)

    async def scenario() -> None:
        resynced = asyncio.Queue[None]()
        election = await leading(subject)
        queue = workqueue.WorkQueue(subject, _forgetful, kind="Regained")
        resync = asyncio.create_task(queue.resync(lambda: ["a"], every=3600, then=lambda: resynced.put_nowait(None)))
        await fakes.within(resynced.get())
        down = stepped_down(subject)
        server.take_by("other")
        await fakes.within(down.wait())
        server.take_by("")  # the other replica releases it
        await fakes.within(resynced.get())  # long before the hour is up
        resync.cancel()
        await stop(election)

    asyncio.run(scenario())


async def _forgetful(key: str) -> None:
    return None


def test_the_queue_loops_are_watched_by_the_liveness_probe() -> None:
    async def scenario() -> None:
        queue = workqueue.WorkQueue(sole_leader(), _forgetful, kind="Watched")
        tasks = queue.start(lambda: [], every=3600, then=lambda: None)
        assert set(tasks) <= set(operator.watched_tasks())
        assert operator.check_tasks_running(tasks) == {"running": 2}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
