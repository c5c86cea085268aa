"""Processes on a clock the test moves: an event loop per process that never waits for real time, and worker
threads (`asyncio.to_thread`) that run one at a time, only when the test hands them the turn.

A model built on these is deterministic: the test's thread and at most one worker thread run at any moment, each
until it waits for the other, and no timer fires before the test has moved the clock to it.

- `VirtualLoop` reads the time from a `fakes.Clock` and runs only when the test settles it: every callback ready,
  or due at the clock's time, and those they make ready, until none is left. A process the test does not settle
  is paused (a GC pause, a starved CPU): its timers fall due meanwhile and fire, late, once it runs again. Its
  tasks hash by the order they were made in, not by their address, so a set of tasks (the writers an elector
  cancels on stepping down) is iterated alike whenever the same steps are replayed.
- `Lockstep` passes the turn between the test and one worker thread; `LockstepExecutor`, each loop's default
  executor, starts every job in a thread of its own and gives the turn back once the job parks (waits on
  something only the test ends, such as a request of `lease_api`) or ends. A job that cannot park (everything it
  waits on is answered at once) runs to its end where it is started, as its thread would before the loop looked
  again: threads are only made where the test interleaves something with them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
import threading
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, ParamSpec, TypeVar

from ..mnnvl_runtime import fakes

P = ParamSpec("P")
T = TypeVar("T")
#: What a task runs (what a task factory is given).
Runnable = Coroutine[Any, Any, T] | Generator[Any, None, T]
#: How long the test waits for a worker it handed the turn to (and for workers to end), in real seconds: a worker
#: only runs a few lines before it parks or ends, so only a broken model waits that long.
TURN_LIMIT = 10.0
#: Iterations after which a loop that still has work ready is taken for a busy loop.
SETTLE_LIMIT = 10_000


class Lockstep:
    """Lets exactly one thread run at a time: the test's, or the one worker thread it has handed the turn to."""

    def __init__(self) -> None:
        self._given_back = threading.Semaphore(0)
        self.threads: list[threading.Thread] = []

    def hand_over(self, wake: Callable[[], None]) -> None:
        """In the test's thread: `wake` lets a worker go on (or starts one); returns once it parks or ends."""
        wake()
        if not self._given_back.acquire(timeout=TURN_LIMIT):
            raise RuntimeError("a worker thread kept the turn")

    def park(self, until: threading.Event) -> None:
        """In a worker thread: give the turn back and wait until the test sets `until` (and hands it over). No real
        time limit: a request of a paused replica stays in flight for as many steps as the test likes, and a worker
        that gave up after a while would make a replay differ."""
        self._given_back.release()
        until.wait()

    def end(self) -> None:
        """In a worker thread, as its last act: give the turn back for good."""
        self._given_back.release()

    def join(self) -> None:
        """Wait for every worker thread to end (each must have been let go first)."""
        for thread in self.threads:
            thread.join(TURN_LIMIT)
        still = [thread.name for thread in self.threads if thread.is_alive()]
        self.threads.clear()
        if still:
            raise RuntimeError(f"worker threads never ended: {still}")


class LockstepExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each job in a thread of its own, in lockstep with the test, or at once while `at_once()` says it
    cannot park (a `ThreadPoolExecutor` only because `set_default_executor` accepts nothing else; none of its pool
    is used)."""

    def __init__(self, lockstep: Lockstep, at_once: Callable[[], bool]) -> None:
        super().__init__(max_workers=1)
        self.lockstep = lockstep
        self.at_once = at_once

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # as a pool's job: an awaiter that gives up cannot cancel it

        def run() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except Exception as error:  # the awaiter hears of it, as from a pool's thread
                future.set_exception(error)

        if self.at_once():
            run()
            return future

        def job() -> None:
            try:
                run()
            finally:
                self.lockstep.end()

        thread = threading.Thread(target=job, name=f"lockstep-{len(self.lockstep.threads)}", daemon=True)
        self.lockstep.threads.append(thread)
        self.lockstep.hand_over(thread.start)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to stop: each job's thread ends with its job (`Lockstep.join` waits for them)."""


class NumberedTask(asyncio.Task[T]):
    """A task that hashes by its number, the order it was made in on its loop."""

    def __init__(
        self, coro: Runnable[T], *, loop: asyncio.AbstractEventLoop, number: int, context: Context | None
    ) -> None:
        self.number = number  # first: making the task registers it in a set
        super().__init__(coro, loop=loop, context=context)

    def __hash__(self) -> int:
        return self.number


class VirtualLoop(asyncio.SelectorEventLoop):
    """One process's event loop, on the test's clock, whose `to_thread` jobs run in lockstep with the test."""

    def __init__(self, clock: fakes.Clock, lockstep: Lockstep, *, at_once: Callable[[], bool]) -> None:
        """`at_once()`: whether a `to_thread` job started now cannot park (see `LockstepExecutor`)."""
        super().__init__()
        self.clock = clock
        self.set_default_executor(LockstepExecutor(lockstep, at_once))
        self._made = itertools.count()
        self.set_task_factory(self._numbered)

    def _numbered(
        self, loop: asyncio.AbstractEventLoop, coro: Runnable[T], /, *, context: Context | None = None
    ) -> NumberedTask[T]:
        return NumberedTask(coro, loop=loop, number=next(self._made), context=context)

    def time(self) -> float:
        return self.clock.now

    def settle(self) -> None:
        """Run what is ready or due now, and what that makes ready, until nothing is. Each round is one
        iteration of the loop (its `stop` queued behind what is ready, so selecting does not block)."""
        for _ in range(SETTLE_LIMIT):
            if not self._has_ready() and self.next_due() > self.clock.now:
                return
            self.call_soon(self.stop)
            self.run_forever()
        raise RuntimeError("the event loop never settled: a busy loop")

    def next_due(self) -> float:
        """When the earliest timer not cancelled is due; infinity without one."""
        # asyncio offers no public way to ask a loop for its timers or whether it has work ready
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        return min((timer.when() for timer in scheduled if not timer.cancelled()), default=math.inf)

    def _has_ready(self) -> bool:
        return bool(self._ready)  # type: ignore[attr-defined]
