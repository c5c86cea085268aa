"""What mnnvl-topology's three writing halves (`topology_writer`, `census_writer`, `fit_warner`) share: the
process context, the stores, and Events under its own reporting component. Only the Lease holder runs these
(they are queue passes)."""

from __future__ import annotations

import dataclasses
from typing import Final

from mnnvl_api.models import configuration
from mnnvl_runtime import controller, kube, posting

from . import state

#: The ConfigMap the census is written to; Warnings about this controller itself go on it too.
CENSUS_CONFIGMAP: Final = "mnnvl-clique-census"


@dataclasses.dataclass
class Effects:
    context: controller.Context
    stores: state.Stores

    @property
    def client(self) -> kube.Kube:
        return self.context.client

    @property
    def configured(self) -> list[configuration.TopologySettings]:
        return self.context.configuration.topologies

    @property
    def installation(self) -> str:
        return self.context.configuration.installation_of(self.context.process.namespace)

    async def event(self, involved: kube.Object, reason: str, message: str, *, warning: bool = False) -> None:
        component = self.context.identity.reporting_component
        await posting.post(
            self.client,
            posting.event_for(involved, reason=reason, message=message, warning=warning, component=component),
        )

    def census_reference(self) -> kube.Object:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CENSUS_CONFIGMAP, "namespace": self.context.process.namespace},
        }
