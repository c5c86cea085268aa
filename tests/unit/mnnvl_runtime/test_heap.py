"""Freed heap memory handed back to the operating system, on a period, off the event loop."""

from __future__ import annotations

import asyncio
import threading

from mnnvl_runtime import heap

from . import fakes


def test_glibc_s_malloc_trim_is_found_and_runs() -> None:
    trim = heap.malloc_trim()
    assert trim is not None  # the image and this machine run on glibc
    assert trim(0) in (0, 1)  # 1: memory was given back, 0: there was none to give


def test_freed_memory_is_given_back_on_each_period_from_a_worker_thread() -> None:
    calls: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()

    async def scenario() -> None:
        three = asyncio.Event()

        def trim(pad: int) -> int:
            calls.append((pad, threading.get_ident() != loop_thread))
            if len(calls) == 3:
                loop.call_soon_threadsafe(three.set)
            return 1

        loop = asyncio.get_running_loop()
        task = asyncio.create_task(heap.give_back_freed_memory(trim, every=0.001))
        await three.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    asyncio.run(fakes.within(scenario()))
    assert calls[:3] == [(0, True)] * 3


def test_without_malloc_trim_nothing_runs_and_the_task_ends() -> None:
    asyncio.run(fakes.within(heap.give_back_freed_memory(None, every=0.001)))
