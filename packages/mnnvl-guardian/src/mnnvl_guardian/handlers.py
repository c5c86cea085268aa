"""kopf wiring: domain and pod events (and fresh lists) feed the stores and queue domains; the Lease holder
protects and releases them one at a time, never before the stores are synced. Per-event work is O(1): the
gauges are refreshed on a timer, not per domain."""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api.decisions import domains as facts
from mnnvl_runtime import controller, reconciling, watches

from . import executor, planner, state, telemetry

STORES = state.Stores()


class Guardian:
    """Decides and acts on one managed domain at a time."""

    def __init__(self, context: controller.Context, stores_: state.Stores) -> None:
        self.context = context
        self.stores = stores_
        self.loop: reconciling.Reconciling[state.NamespacedName] = reconciling.Reconciling(
            context, stores_.mirrors, self.guard, kind="ComputeDomain", scope="guardian"
        )

    async def guard(self, key: state.NamespacedName) -> None:
        decided = decide(self.stores, key, gate_enabled=self.context.gate_enabled)
        if decided is not None:
            await executor.apply(self.loop.writer, *decided)

    def publish_gauges(self) -> None:
        terminating = sum(
            1
            for key in self.stores.domain_keys()
            if (facts := self.stores.domain(key)) and facts.deleting and facts.protected
        )
        telemetry.TERMINATING.set(terminating)


def decide(
    stores_: state.Stores, key: state.NamespacedName, *, gate_enabled: bool
) -> tuple[facts.DomainFacts, planner.Action] | None:
    """The guardian's work for one queued domain, from the stores: O(1), whatever the number of domains."""
    domain = stores_.domain(key)
    if domain is None:
        return None
    return domain, planner.decide(domain, template_in_use=stores_.in_use(domain), gate_enabled=gate_enabled)


_guardian: Guardian | None = None


def guardian() -> Guardian:
    assert _guardian is not None, "the guardian has not started"
    return _guardian


@kopf.on.startup(registry=state.registry, id="start-guardian")
async def start(memo: Any, **_: Any) -> None:
    global _guardian  # noqa: PLW0603 - one guardian per process, created once kopf runs
    _guardian = Guardian(controller.context_of(memo), STORES)
    every = _guardian.context.configuration.reconciliation.resync_seconds
    memo["tasks"] = _guardian.loop.start(STORES.domain_keys, every=every, then=_guardian.publish_gauges)
    memo["deny_reads"] = state.DenyReads(stores=STORES, synced=_guardian.loop.sync.synced, writer=_guardian.loop.writer)


#: Only managed ComputeDomains and scoped pods are sent to this controller.
WATCH_SELECTORS = watches.register(
    state.registry, STORES.mirrors, lambda touched: guardian().loop.queue.enqueue(*touched)
)
