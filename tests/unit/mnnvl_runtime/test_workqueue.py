from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mnnvl_runtime import controller, leases, metrics, workqueue

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
        assert set(tasks) <= set(controller.watched_tasks())
        assert controller.check_tasks_running(tasks) == {"running": 2}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


# --- concurrency: N workers, one pass per key at a time ------------------------------------------------------


async def _yield_many() -> None:
    """Hand the loop to every other task, many times over: whatever could start has started."""
    for _ in range(50):
        await asyncio.sleep(0)


def test_no_more_passes_run_at_once_than_the_concurrency() -> None:
    async def scenario() -> tuple[int, list[str]]:
        running = 0
        most = 0
        full, release, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()
        done: list[str] = []

        async def work(key: str) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            if running == 3:
                full.set()
            await release.wait()
            running -= 1
            done.append(key)
            if len(done) == 10:
                finished.set()

        queue = workqueue.WorkQueue(sole_leader(), work, kind="Bounded", concurrency=3)
        queue.enqueue(*(f"k{i}" for i in range(10)))
        worker = asyncio.create_task(queue.run())
        await fakes.within(full.wait())
        await _yield_many()
        assert running == 3
        assert len(queue.processing) == 3
        release.set()
        await fakes.within(finished.wait())
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return most, done

    most, done = asyncio.run(scenario())
    assert most == 3
    assert sorted(done) == sorted(f"k{i}" for i in range(10))


def test_a_key_queued_during_its_own_pass_runs_again_afterwards_never_alongside() -> None:
    async def scenario() -> list[str]:
        journal: list[str] = []
        active: set[str] = set()
        first_started, release, second_done = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def work(key: str) -> None:
            assert key not in active, f"{key} is in two passes at once"
            active.add(key)
            journal.append(f"start {key}")
            try:
                if len(journal) == 1:
                    first_started.set()
                    await release.wait()
                else:
                    second_done.set()
            finally:
                journal.append(f"end {key}")
                active.discard(key)

        queue = workqueue.WorkQueue(sole_leader(), work, kind="Dirty", concurrency=4)
        queue.enqueue("a")
        worker = asyncio.create_task(queue.run())
        await fakes.within(first_started.wait())
        queue.enqueue("a")  # an event for the key while its pass runs: three idle workers could take it
        queue.enqueue("a")  # de-duplicated with the one before
        await _yield_many()
        assert journal == ["start a"]
        assert queue.pending == {"a"}
        assert queue.queue.empty()  # held back until the running pass ends
        release.set()
        await fakes.within(second_done.wait())
        await _yield_many()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        assert queue.pending == set()
        return journal

    assert asyncio.run(scenario()) == ["start a", "end a", "start a", "end a"]


def test_different_keys_are_worked_on_at_the_same_time() -> None:
    async def scenario() -> None:
        started: dict[str, asyncio.Event] = {key: asyncio.Event() for key in "abc"}
        release = asyncio.Event()

        async def work(key: str) -> None:
            started[key].set()
            await release.wait()  # none ends before all have started

        queue = workqueue.WorkQueue(sole_leader(), work, kind="Parallel", concurrency=3)
        queue.enqueue("a", "b", "c")
        worker = asyncio.create_task(queue.run())
        await fakes.within(asyncio.gather(*(event.wait() for event in started.values())))
        assert queue.processing == {"a", "b", "c"}
        release.set()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)

    asyncio.run(scenario())


def test_stepping_down_cancels_every_running_pass_before_the_lease_is_released() -> None:
    server = fakes.LeaseServer()
    subject = elector(server)
    subject.on_change.append(lambda now_leading: server.journal.append(f"leading={now_leading}"))

    async def scenario() -> workqueue.WorkQueue[str]:
        election = await leading(subject)
        started: dict[str, asyncio.Event] = {key: asyncio.Event() for key in "abc"}

        async def work(key: str) -> None:
            started[key].set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                server.journal.append(f"pass on {key} cancelled, may_write={subject.may_write()}")
                raise

        queue = workqueue.WorkQueue(subject, work, kind="SteppingDownAll", concurrency=4)
        queue.enqueue("a", "b", "c")
        worker = asyncio.create_task(queue.run())
        await fakes.within(asyncio.gather(*(event.wait() for event in started.values())))
        await stop(election)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        return queue

    queue = asyncio.run(scenario())
    assert server.journal[:2] == ["leading=True", "leading=False"]
    assert sorted(server.journal[2:5]) == [f"pass on {key} cancelled, may_write=False" for key in "abc"]
    assert server.journal[5:] == ["released"]
    assert queue.pending == {"a", "b", "c"}


def test_stopping_the_queue_cancels_every_running_pass() -> None:
    async def scenario() -> None:
        started: dict[str, asyncio.Event] = {key: asyncio.Event() for key in "ab"}
        cancelled: list[str] = []

        async def work(key: str) -> None:
            started[key].set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(key)
                raise

        queue = workqueue.WorkQueue(sole_leader(), work, kind="StoppingAll", concurrency=2)
        queue.enqueue("a", "b")
        worker = asyncio.create_task(queue.run())
        await fakes.within(asyncio.gather(*(event.wait() for event in started.values())))
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await _yield_many()
        assert sorted(cancelled) == ["a", "b"]

    asyncio.run(scenario())


def test_the_concurrency_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        workqueue.WorkQueue(sole_leader(), _forgetful, kind="Zero", concurrency=0)
