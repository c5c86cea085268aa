"""Applies a plan through the shared domain writer: creates, ungates, fenced deletes, lifts marks, releases,
records events and metrics. Only the Lease holder calls it. Every write rests on a fresh read and carries a
precondition, so a stale snapshot can make it do less, never something unsafe.

The kinds of write follow each other in a fixed order (create, ungate, uncondemn, delete, release, warn);
the writes of one kind touch different objects and run concurrently, at most `WRITES_AT_ONCE` at a time.
Events announcing a create or a delete are best effort: they are posted alongside the writes that follow
and only awaited at the end of the pass, which they never fail."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import prometheus_client

from mnnvl_api import events, keys
from mnnvl_api.decisions import domains as facts
from mnnvl_api.models import computedomain
from mnnvl_runtime import domains, kube, metrics

from . import planner

log = logging.getLogger(__name__)
SCOPE = keys.SCOPE_REPLICA
#: Writes of one kind that one pass has in flight at once (the client's pool bounds the whole process).
WRITES_AT_ONCE = 16
Item = TypeVar("Item")
Result = TypeVar("Result")

PODS_WITHOUT_CLAIM = prometheus_client.Counter(
    "mnnvl_pods_without_channel_claim_total",
    "Pods of opted-in workloads found running without their ComputeDomain channel claim (each counted once)",
    ["scope"],
    registry=metrics.REGISTRY,
)


class Executor:
    def __init__(self, writer: domains.DomainWriter) -> None:
        self.writer = writer

    async def apply(self, snapshot: planner.Snapshot, plan: planner.Plan) -> float | None:
        """Apply `plan`; returns in how many seconds this LWS must be looked at again (a deletion fence), if so."""
        namespace = snapshot.namespace
        workload = _workload_ref(snapshot)

        def ours(domain: facts.DomainFacts) -> bool:
            return planner.is_ours(domain, snapshot.lws_name)

        announcements: list[asyncio.Task[None]] = []

        def announce(reason: str, message: str) -> None:
            announcements.append(asyncio.create_task(self.writer.event(workload, reason, message)))

        try:
            created = await each(
                plan.create,
                lambda domain: self.writer.create(
                    computedomain.manifest(
                        name=domain.name,
                        namespace=namespace,
                        claim_template=domain.claim_template,
                        labels=domain.labels,
                    ),
                    workload=workload,
                ),
            )
            for domain, was_created in zip(plan.create, created, strict=True):
                if was_created:
                    group = domain.labels[keys.GROUP_INDEX_LABEL]
                    announce(
                        events.COMPUTE_DOMAIN_CREATED_REASON, f"Created ComputeDomain {domain.name} for group {group}"
                    )
            await each(
                plan.ungate,
                lambda pod: self.writer.ungate(
                    namespace, pod.name, uid=pod.uid, gate_at=pod.gate_at, workload=workload
                ),
            )
            await each(
                plan.uncondemn, lambda name: self.writer.uncondemn(namespace, name, belongs=ours, workload=workload)
            )
            deletions = await each(
                plan.delete, lambda name: self.writer.fenced_delete(namespace, name, belongs=ours, workload=workload)
            )
            come_back: list[float] = []
            for name, deletion in zip(plan.delete, deletions, strict=True):
                if deletion.come_back_after is not None:
                    come_back.append(deletion.come_back_after)
                if deletion.deleted:
                    reason = (
                        "workload_deleted"
                        if snapshot.workload is None or snapshot.workload.uid != snapshot.domains[name].owner_uid
                        else "obsolete"
                    )
                    metrics.DOMAINS_DELETED.labels(scope=SCOPE, reason=reason).inc()
                    announce(
                        events.COMPUTE_DOMAIN_DELETED_REASON,
                        f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod uses it",
                    )
            await each(plan.release, lambda name: self.writer.release(namespace, name, belongs=ours, workload=workload))
            for warning in plan.warnings:
                posted = await self.writer.warn_once(workload, warning.reason, warning.message)
                if posted and warning.reason == events.POD_WITHOUT_CHANNEL_CLAIM_REASON:
                    PODS_WITHOUT_CLAIM.labels(scope=SCOPE).inc()
        except asyncio.CancelledError:
            for task in announcements:  # stepping down: nothing more is written, not even an event
                task.cancel()
            raise
        finally:
            await _finish(announcements)
        return min(come_back) if come_back else None


async def each(
    items: Iterable[Item], write: Callable[[Item], Awaitable[Result]], *, at_once: int = WRITES_AT_ONCE
) -> list[Result]:
    """`write` for every item, up to `at_once` at a time; the results in the order of `items`.

    Every write runs to its end even when another fails (they are independent), then the first failure is
    raised. Cancelled (the replica steps down), it cancels the writes still running and waits for them, so
    no write outlives the pass."""
    listed = list(items)
    if len(listed) == 1:  # the common case: no task, no semaphore
        return [await write(listed[0])]
    slots = asyncio.Semaphore(at_once)

    async def bounded(item: Item) -> Result:
        async with slots:
            return await write(item)

    tasks = [asyncio.create_task(bounded(item)) for item in listed]
    await _finish(tasks)
    for task in tasks:
        error = task.exception()
        if error is not None:
            raise error
    return [task.result() for task in tasks]


async def _finish(tasks: list[asyncio.Task[Result]]) -> None:
    """Wait until every task has ended; cancelled meanwhile, cancel them all first (and still wait)."""
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise


def _workload_ref(snapshot: planner.Snapshot) -> kube.Object | None:
    if snapshot.workload is None:
        return None
    return domains.involved(
        keys.LWS_API_VERSION, "LeaderWorkerSet", snapshot.namespace, snapshot.lws_name, snapshot.workload.uid
    )
