"""kopf wiring: node, pod, ComputeDomain and Topology events (and fresh lists) feed the stores and queue work; the
Lease holder syncs the topologies, publishes the census and checks unschedulable groups, never before the stores
are synced.

Pods are watched without a label selector, unlike the other controllers: the census counts every pod holding a
ComputeDomain channel or a GPU (also pods of domains made by hand, which carry no label of ours) and the fit
check looks at every unschedulable pod KAI places (whose pods carry no label of ours either). The API server
leaves out the terminal pods, which are nothing to either (`state.POD_FIELD_SELECTOR`). Per event the cost
stays O(1): only pods holding a claim or a GPU, and unschedulable pods of slice or replica scope or placed by KAI,
are kept, as a few facts (`census.worth_keeping`); the census is computed on a queue pass, once however many fit
checks read it, and again only when a fact it reads changes.
"""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_runtime import controller, preflight, reconciling, watches

from . import passes, state, telemetry, topologies

STORES = state.Stores()


class Topologist:
    def __init__(
        self, context: controller.Context, stores_: state.Stores, *, served: frozenset[topologies.OptionalApi]
    ) -> None:
        self.stores = stores_
        unwatched = frozenset(topologies.OPTIONAL_APIS) - served
        self.passes = passes.Passes(context, stores_, unwatched=unwatched)
        # Without the driver's CRD no pod holds a channel; its store would never fill, so it is left out.
        mirrors = stores_.mirrors(compute_domains=topologies.COMPUTE_DOMAINS in served)
        self.loop: reconciling.Reconciling[state.Key] = reconciling.Reconciling(
            context, mirrors, self.work, kind="Topology", scope="topology"
        )

    async def work(self, key: state.Key) -> None:
        await self.passes.work(key)
        telemetry.PASSES.labels(work=key[0]).inc()

    def enqueue(self, found: list[state.Key]) -> None:
        self.loop.queue.enqueue(*found)


_topologist: Topologist | None = None


def topologist() -> Topologist:
    assert _topologist is not None, "mnnvl-topology has not started"
    return _topologist


@kopf.on.startup(registry=state.registry, id="start-topology")
async def start(memo: Any, **_: Any) -> None:
    global _topologist  # noqa: PLW0603 - one per process, created once kopf runs
    context = controller.context_of(memo)
    # Startup handlers run before kopf looks, once, for the resources to watch: an API served here is watched, one
    # served later is not (the periodic pass says so).
    served = frozenset(
        api for api in topologies.OPTIONAL_APIS if preflight.is_served(context.client, api.api_version, api.plural)
    )
    _topologist = Topologist(context, STORES, served=served)
    running = _topologist.passes
    context.elector.on_change.append(running.on_lease_change)
    every = context.configuration.reconciliation.resync_seconds
    memo["tasks"] = _topologist.loop.start(STORES.keys, every=every, then=running.on_resync)


#: No label selectors: every node and every non-terminal pod is needed (see above; the pods' field selector leaves
#: the terminal ones out); Topologies are few and all are looked at by name.
WATCH_SELECTORS = watches.register(
    state.registry, STORES.mirrors(compute_domains=True), lambda touched: topologist().enqueue(touched)
)


# Bindings are read by name on each pass; their events only bring the next pass forward, so an edited binding is
# restored at once. Without Grove's CRD kopf serves nothing here and the periodic resync still runs.
@kopf.on.event(
    keys.GROVE_GROUP,
    keys.GROVE_VERSION,
    keys.GROVE_BINDING_PLURAL,
    id="clustertopologybindings",
    registry=state.registry,
)
async def on_binding(**_: Any) -> None:
    topologist().enqueue([state.TOPOLOGIES])
