"""How a plan is applied: the writes of one kind together, the kinds in order, events never in the way."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import plans
from mnnvl_lws import planner, scope
from mnnvl_runtime import domain_writer, executing, kube, scopes

from ..mnnvl_runtime import fakes
from ..mnnvl_runtime.memory_api import MemoryApi, MemoryClient

NS = "serving"
LWS = "dsr1"
WORKLOAD = planner.LeaderWorkerSetFacts(namespace=NS, name=LWS, uid="uid-dsr1")


def snapshot() -> planner.Snapshot:
    return planner.Snapshot(
        namespace=NS,
        workload_name=LWS,
        workload=WORKLOAD,
        pods=(),
        domains={},
        existing_templates=frozenset(),
        templates_in_use=frozenset(),
        gate_enabled=True,
    )


def to_create(group: int) -> plans.DomainToCreate:
    name = f"{LWS}-{group}-bbbbb"
    return plans.DomainToCreate(
        name=name, namespace=NS, claim_template=f"{name}-channel", labels=planner.domain_labels(WORKLOAD, group)
    )


def pods(*names: str) -> tuple[plans.PodRef, ...]:
    return tuple(plans.PodRef(name=name, uid=f"uid-{name}") for name in names)


class Together:
    """Lets its callers on only once `count` of them are waiting: sequential callers never get past it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.arrived = 0
        self.all_here = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            self.all_here.set()
        await self.all_here.wait()


class RecordingWriter(domain_writer.DomainWriter):
    """Records the writes an executor makes; each may be held (`hold`) or fail (`fail`), by target."""

    def __init__(self) -> None:
        api = MemoryApi()  # holds the LeaderWorkerSet, which creates read afresh
        api.put(keys.LWS_PLURAL, {"metadata": {"name": LWS, "namespace": NS}}, manager="user", uid=WORKLOAD.uid)
        super().__init__(api.client(keys.LWS_CONTROLLER), component="mnnvl-lws", scope="replica", fence_seconds=0)
        self.journal: list[str] = []
        self.hold: dict[str, Any] = {}
        self.fail: set[str] = set()

    async def _write(self, what: str) -> None:
        self.journal.append(f"start {what}")
        try:
            if what in self.hold:
                await self.hold[what].wait()
            if what in self.fail:
                raise kube.ApiError(status=500, reason="boom")
        except asyncio.CancelledError:
            self.journal.append(f"cancelled {what}")
            raise
        self.journal.append(f"end {what}")

    async def create(self, manifest: kube.Object, *, workload: kube.Object | None) -> bool:
        await self._write(f"create {manifest['metadata']['name']}")
        return True

    async def ungate(
        self, namespace: str, pod: str, *, uid: str, gate_at: int | None = None, workload: kube.Object | None
    ) -> None:
        await self._write(f"ungate {pod}")

    async def event(self, workload: kube.Object | None, reason: str, message: str) -> None:
        await self._write(f"event {message.split()[2]}")


def test_domains_are_created_together_then_pods_are_ungated_together() -> None:
    writer = RecordingWriter()
    creates = Together(3)
    ungates = Together(2)
    writer.hold = {f"create {LWS}-{g}-bbbbb": creates for g in range(3)} | {f"ungate {p}": ungates for p in "ab"}
    plan = plans.Plan(create=tuple(to_create(g) for g in range(3)), ungate=pods("a", "b"))

    assert asyncio.run(fakes.within(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(snapshot(), plan))) is None

    creating = [i for i, line in enumerate(writer.journal) if line.endswith("bbbbb") and "create" in line]
    ungating = [i for i, line in enumerate(writer.journal) if line.startswith(("start ungate", "end ungate"))]
    assert max(creating) < min(ungating), writer.journal
    assert sorted(line for line in writer.journal if line.startswith("end event")) == [
        f"end event {LWS}-{g}-bbbbb" for g in range(3)
    ]


def test_the_event_of_a_create_does_not_hold_up_the_ungates_and_is_posted_within_the_pass() -> None:
    writer = RecordingWriter()
    ungated = asyncio.Event()

    class AfterUngate:
        async def wait(self) -> None:
            await ungated.wait()

    async def ungate_then_release(
        namespace: str, pod: str, *, uid: str, gate_at: int | None = None, workload: kube.Object | None
    ) -> None:
        writer.journal.append(f"ungate {pod}")
        ungated.set()

    writer.hold = {f"event {LWS}-0-bbbbb": AfterUngate()}
    writer.ungate = ungate_then_release  # type: ignore[method-assign]
    plan = plans.Plan(create=(to_create(0),), ungate=pods("a"))

    asyncio.run(fakes.within(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(snapshot(), plan)))

    assert writer.journal[:2] == [f"start create {LWS}-0-bbbbb", f"end create {LWS}-0-bbbbb"]
    assert writer.journal.index("ungate a") < writer.journal.index(f"end event {LWS}-0-bbbbb")


def test_a_failing_ungate_leaves_the_others_to_finish_and_then_fails_the_pass() -> None:
    writer = RecordingWriter()
    writer.fail = {"ungate b"}
    plan = plans.Plan(ungate=pods("a", "b", "c"))

    with pytest.raises(kube.ApiError):
        asyncio.run(fakes.within(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(snapshot(), plan)))

    assert sorted(line for line in writer.journal if line.startswith("end")) == ["end ungate a", "end ungate c"]


def test_cancelling_a_pass_cancels_its_running_writes_and_events() -> None:
    writer = RecordingWriter()

    async def scenario() -> None:
        never = asyncio.Event()
        both_ungating = Together(2)

        class Forever:
            async def wait(self) -> None:
                await both_ungating.wait()
                await never.wait()

        writer.hold = {f"event {LWS}-0-bbbbb": never, "ungate a": Forever(), "ungate b": Forever()}
        plan = plans.Plan(create=(to_create(0),), ungate=pods("a", "b"))
        applying = asyncio.create_task(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(snapshot(), plan))
        await both_ungating.all_here.wait()
        applying.cancel()
        await asyncio.gather(applying, return_exceptions=True)
        assert applying.cancelled()

    asyncio.run(fakes.within(scenario()))
    assert sorted(line for line in writer.journal if line.startswith("cancelled")) == [
        f"cancelled event {LWS}-0-bbbbb",
        "cancelled ungate a",
        "cancelled ungate b",
    ]


def test_writes_of_one_kind_are_bounded() -> None:
    async def scenario() -> int:
        running = 0
        most = 0

        async def write(item: int) -> int:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0)
            running -= 1
            return item * 2

        assert await executing.each(range(10), write, at_once=3) == [i * 2 for i in range(10)]
        return most

    assert asyncio.run(scenario()) == 3


def test_every_failed_write_is_retrieved_and_the_first_raised() -> None:
    """asyncio logs a task whose failure nobody retrieved as an error ("Task exception was never retrieved"):
    when several writes of a pass fail (e.g. the Lease is lost mid-pass), each failure is retrieved."""
    unretrieved: list[dict[str, Any]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: unretrieved.append(context))

        async def write(item: int) -> int:
            await asyncio.sleep(0)
            if item:
                raise ValueError(f"write {item} failed")
            return item

        with pytest.raises(ValueError, match="write 1 failed"):
            await executing.each(range(4), write)
        gc.collect()  # an unretrieved failure is reported when its task is collected

    asyncio.run(scenario())
    assert unretrieved == []


def test_no_domain_is_created_for_an_earlier_lws_of_the_name_the_snapshot_still_holds() -> None:
    """The stores hold a LeaderWorkerSet deleted since and created again under its name (a new uid): the plan's
    creates would label the domains with the old uid, so none is sent; the new workload's watch event brings a
    pass that creates them. Its ungates still go."""
    writer = RecordingWriter()
    stale = dataclasses.replace(snapshot(), workload=dataclasses.replace(WORKLOAD, uid="uid-old"))
    plan = plans.Plan(create=(to_create(0),), ungate=pods("a"))

    asyncio.run(fakes.within(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(stale, plan)))

    assert writer.journal == ["start ungate a", "end ungate a"]


def test_no_domain_is_created_for_an_lws_being_deleted() -> None:
    """The stores have not seen the deletion begin yet; the fresh read has: no domain is created for it."""
    writer = RecordingWriter()
    assert isinstance(writer.client, MemoryClient)
    writer.client.api.objects[(keys.LWS_PLURAL, NS, LWS)]["metadata"]["deletionTimestamp"] = "2026-12-05T08:00:00Z"
    plan = plans.Plan(create=(to_create(0),))

    asyncio.run(fakes.within(scopes.ScopeExecutor(scope.SCOPE, writer, None).apply(snapshot(), plan)))

    assert writer.journal == []
