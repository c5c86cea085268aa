"""A leader steps down while its reconcile passes' writes are on their way in worker threads, each answered before
the step-down, during it, or never (a stalled API server), some first with a 503 that the client retries.

Judged from the API server's record (one journal of sends, answers and the Lease's release, in the order they
happened), never from what the replica believes:

- `released` comes only when no write is on its way: every write sent before it was answered before it;
- no write is sent after the release (a retry of a cancelled pass included).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_runtime import kube, leases

from ..mnnvl_runtime import fakes
from . import settings as safety_settings

QUICK = leases.Timing(lease_duration=3.0, renew_deadline=0.2, retry_period=0.05)
#: When a write's first send is answered: while the replica leads, once stepping down has begun, or never.
WHEN = ("leading", "stepping-down", "never")


class StalledWrites(fakes.RecordingApi):
    """Each path's first send is held until the model answers it (with `first_status`); retries answer at once."""

    def __init__(self, journal: list[str], first_status: dict[str, int]) -> None:
        super().__init__(journal=journal)
        self.first_status = first_status
        self.holds = {path: threading.Event() for path in first_status}
        self.sent_once = {path: threading.Event() for path in first_status}

    def call_api(self, method: str, url: str, **_: Any) -> fakes.Response:
        first = not self.sent_once[url].is_set()
        self.sent.append(f"send {url}")
        self.sent_once[url].set()
        if first:
            self.holds[url].wait(fakes.PATIENCE)
        self.sent.append(f"answer {url}")
        return fakes.Response(self.first_status[url] if first else 200)


@safety_settings.for_property(max_examples=40)
@given(writes=st.lists(st.tuples(st.sampled_from(WHEN), st.sampled_from((200, 503))), min_size=1, max_size=3))
def test_the_lease_is_released_only_when_no_write_is_on_its_way_and_none_follows(
    writes: list[tuple[str, int]],
) -> None:
    server = fakes.LeaseServer()
    journal = server.journal  # the Lease server's record: "released" lands here, in order with the writes
    paths = [f"/api/v1/namespaces/a/pods/p{n}" for n in range(len(writes))]
    api = StalledWrites(journal, {path: status for path, (_, status) in zip(paths, writes, strict=True)})
    client = kube.Kube(api, field_manager="mnnvl-lws", max_backoff=0.01)  # type: ignore[arg-type]
    subject = leases.LeaderElector(server, namespace="mnnvl-system", name="mnnvl-lws", holder="me", timing=QUICK)

    def answer(path: str) -> None:
        api.holds[path].set()

    async def scenario() -> None:
        election = asyncio.create_task(subject.run())
        await fakes.within(subject.leading_event.wait())
        passes = []
        for path in paths:
            task = asyncio.create_task(client.arequest("PATCH", path, body=[]), context=fakes.under(subject.permit))
            subject.track_writer(task)
            passes.append(task)
        for path in paths:
            await fakes.within(asyncio.to_thread(api.sent_once[path].wait, fakes.PATIENCE))
        for path, (when, _) in zip(paths, writes, strict=True):
            if when == "leading":
                answer(path)
                await asyncio.gather(passes[paths.index(path)], return_exceptions=True)
        loop = asyncio.get_running_loop()
        for path, (when, _) in zip(paths, writes, strict=True):
            if when == "stepping-down":
                loop.call_later(0.02, answer, path)
        election.cancel()
        await asyncio.gather(election, return_exceptions=True)
        for path in paths:  # the stalled server answers at last, after the replica gave up on the Lease
            answer(path)
        await asyncio.to_thread(client._pool.shutdown, wait=True)

    asyncio.run(scenario())
    records = [entry for entry in journal if entry.startswith(("send", "answer")) or entry == "released"]
    if "released" in records:
        before = records[: records.index("released")]
        on_the_way = [
            entry
            for entry in before
            if entry.startswith("send") and before.count(entry) > before.count("answer" + entry[4:])
        ]
        assert not on_the_way, f"the Lease was released with writes on their way: {records}"
        assert not [entry for entry in records[records.index("released") :] if entry.startswith("send")], (
            f"a write was sent after the Lease was released: {records}"
        )
