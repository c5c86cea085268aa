"""The writing half of `census`: the clique gauges and the census ConfigMap, written when they change."""

from __future__ import annotations

import dataclasses
from typing import Final

from mnnvl_api import keys

from . import effects, telemetry, topologies

CENSUS_KEY: Final = "census.json"


@dataclasses.dataclass
class CensusWriter(effects.Effects):
    #: The census document last applied (None: apply it on the next pass).
    written: str | None = None
    #: Cliques the gauges have a value for.
    published_cliques: set[str] = dataclasses.field(default_factory=set)

    async def publish(self) -> None:
        found = self.stores.current_census()
        # New values first, then only the vanished cliques removed: a scrape never sees a clique missing.
        for count in found.cliques:
            telemetry.CLIQUE_NODES.labels(clique=count.clique).set(count.nodes)
            telemetry.CLIQUE_GPUS.labels(clique=count.clique).set(count.gpus)
            telemetry.CLIQUE_CHANNEL_NODES.labels(clique=count.clique).set(count.channel_nodes)
            telemetry.CLIQUE_FREE_NODES.labels(clique=count.clique).set(count.free_nodes)
        cliques = {count.clique for count in found.cliques}
        for clique in topologies.obsolete(self.published_cliques, cliques):
            for gauge in telemetry.CLIQUE_GAUGES:
                gauge.remove(clique)
        self.published_cliques = cliques
        telemetry.UNLABELLED_GPU_NODES.set(len(found.unlabelled_gpu_nodes))
        document = found.to_json()
        if document == self.written:
            return
        configmap = self.census_reference()
        configmap["metadata"]["labels"] = {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER}
        configmap["data"] = {CENSUS_KEY: document}
        await self.client.aapply(configmap, "configmaps")
        self.written = document

    def forget(self) -> None:
        """The ConfigMap may have been deleted or edited since we wrote it, so the next census pass applies it
        again (an apply that changes nothing is cheap)."""
        self.written = None
