from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import kopf
import pytest

from mnnvl_runtime import controller

from . import fakes


async def forever() -> None:
    await asyncio.Event().wait()


async def crash() -> None:
    raise RuntimeError("store index corrupted")


async def finish() -> None:
    return None


async def cancelled() -> None:
    asyncio.current_task().cancel()  # type: ignore[union-attr]
    await asyncio.sleep(0)


def test_the_probe_passes_while_every_loop_runs() -> None:
    async def scenario() -> dict[str, int]:
        tasks = [asyncio.create_task(forever(), name=f"loop-{n}") for n in range(2)]
        verdict = controller.check_tasks_running(tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return verdict

    assert asyncio.run(scenario()) == {"running": 2}


@pytest.mark.parametrize(
    ("ending", "message"),
    [
        pytest.param(
            crash, "controller loops ended: reconcile-X died: RuntimeError('store index corrupted')", id="died"
        ),
        pytest.param(finish, "controller loops ended: reconcile-X returned", id="returned"),
        pytest.param(cancelled, "controller loops ended: reconcile-X was cancelled", id="cancelled"),
    ],
)
def test_the_probe_fails_naming_a_loop_that_ended(
    ending: Callable[[], Coroutine[Any, Any, None]], message: str
) -> None:
    async def scenario() -> None:
        running = asyncio.create_task(forever(), name="resync-X")
        ended = asyncio.create_task(ending(), name="reconcile-X")
        await fakes.within(asyncio.wait({ended}))
        with pytest.raises(kopf.PermanentError) as failure:
            controller.check_tasks_running([running, ended])
        assert str(failure.value) == message
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(scenario())


def test_registered_tasks_are_the_ones_the_probe_checks() -> None:
    async def scenario() -> None:
        task = asyncio.create_task(forever(), name="watched")
        controller.watch_tasks(task)
        assert task in controller.watched_tasks()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
