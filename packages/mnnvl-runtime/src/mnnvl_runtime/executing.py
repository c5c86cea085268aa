"""Applies a scope controller's plan through the shared domain writer: creates, ungates, fenced deletes, lifted
marks, releases, events and metrics. Only the Lease holder calls it. Every write rests on a fresh read and
carries a precondition, so a stale plan can make it do less, never something unsafe.

The kinds of write follow each other in a fixed order (create, ungate, uncondemn, delete, release, warn);
the writes of one kind touch different objects and run concurrently, at most `WRITES_AT_ONCE` at a time.
Events announcing a create or a delete are best effort: they are posted alongside the writes that follow
and only awaited at the end of the pass, which they never fail."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import prometheus_client

from mnnvl_api import events
from mnnvl_api.decisions import plans
from mnnvl_api.models import computedomain

from . import domain_writer, kube, metrics

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """The workload a plan is applied for, as the executor needs to know it."""

    namespace: str
    #: Where its events go; None once it is gone.
    reference: kube.Object | None
    #: Which domains, read afresh, the plan's deletions, marks and releases may touch (identity, not labels).
    belongs: domain_writer.Belongs
    #: The event message announcing a domain created for it.
    created: Callable[[plans.DomainToCreate], str]
    #: The `mnnvl_compute_domains_deleted_total` reason (`obsolete`, `workload_deleted`) and the event message
    #: for a domain of this name deleted.
    deleted: Callable[[str], tuple[str, str]]


class Executor:
    def __init__(self, writer: domain_writer.DomainWriter) -> None:
        self.writer = writer

    async def apply(self, plan: plans.Plan, workload: Target) -> float | None:
        """Apply `plan`; returns in how many seconds the workload must be looked at again (a deletion fence)."""
        namespace = workload.namespace
        reference = workload.reference
        belongs = workload.belongs
        announcements: list[asyncio.Task[None]] = []

        def announce(reason: str, message: str) -> None:
            announcements.append(asyncio.create_task(self.writer.event(reference, reason, message)))

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
                    workload=reference,
                ),
            )
            for domain, was_created in zip(plan.create, created, strict=True):
                if was_created:
                    announce(events.COMPUTE_DOMAIN_CREATED_REASON, workload.created(domain))
            await each(
                plan.ungate,
                lambda pod: self.writer.ungate(
                    namespace, pod.name, uid=pod.uid, gate_at=pod.gate_at, workload=reference
                ),
            )
            await each(
                plan.uncondemn,
                lambda name: self.writer.uncondemn(namespace, name, belongs=belongs, workload=reference),
            )
            deletions = await each(
                plan.delete,
                lambda name: self.writer.fenced_delete(namespace, name, belongs=belongs, workload=reference),
            )
            come_back: list[float] = []
            for name, deletion in zip(plan.delete, deletions, strict=True):
                if deletion.come_back_after is not None:
                    come_back.append(deletion.come_back_after)
                if deletion.deleted:
                    reason, message = workload.deleted(name)
                    metrics.DOMAINS_DELETED.labels(scope=self.writer.scope, reason=reason).inc()
                    announce(events.COMPUTE_DOMAIN_DELETED_REASON, message)
            await each(
                plan.release, lambda name: self.writer.release(namespace, name, belongs=belongs, workload=reference)
            )
            for warning in plan.warnings:
                posted = await self.writer.warn_once(reference, warning.reason, warning.message)
                if posted and warning.reason == events.POD_WITHOUT_CHANNEL_CLAIM_REASON:
                    PODS_WITHOUT_CLAIM.labels(scope=self.writer.scope).inc()
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
    errors = _errors(tasks)
    if errors:
        raise errors[0]
    return [task.result() for task in tasks]


def _errors(tasks: list[asyncio.Task[Result]]) -> list[BaseException]:
    """The failures of ended tasks, every one retrieved (asyncio logs an unretrieved one as an error)."""
    return [error for task in tasks if not task.cancelled() and (error := task.exception()) is not None]


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
        _errors(tasks)  # the pass is cancelled: what its writes failed with no longer matters
        raise
