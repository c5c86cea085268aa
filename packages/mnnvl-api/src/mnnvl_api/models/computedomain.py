"""NVIDIA ComputeDomain `resource.nvidia.com/v1beta1`.

`numNodes` is optional from driver v0.4.0 and required before; mnnvl always sends 0. `allocationMode` is
never sent (the driver defaults it to `Single`). `status.status` is informational only.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import pydantic

from .. import keys
from .base import KubeModel, ObjectMeta

API_VERSION: Final = keys.COMPUTE_DOMAIN_API_VERSION


class ResourceClaimTemplateReference(KubeModel):
    name: str


class Channel(KubeModel):
    resource_claim_template: ResourceClaimTemplateReference
    allocation_mode: Literal["All", "Single"] | None = None


class ComputeDomainSpec(KubeModel):
    num_nodes: int | None = None
    channel: Channel


class ComputeDomainNode(KubeModel):
    name: str
    ip_address: str | None = None
    clique_id: str | None = pydantic.Field(default=None, alias="cliqueID")
    index: int | None = None
    status: str | None = None


class ComputeDomainStatus(KubeModel):
    status: Literal["Ready", "NotReady"] | None = None
    nodes: list[ComputeDomainNode] = pydantic.Field(default_factory=list)


class ComputeDomain(KubeModel):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["ComputeDomain"] = keys.COMPUTE_DOMAIN_KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: ComputeDomainSpec
    status: ComputeDomainStatus | None = None

    @property
    def claim_template_name(self) -> str:
        return self.spec.channel.resource_claim_template.name


def manifest(*, name: str, namespace: str, claim_template: str, labels: dict[str, str]) -> dict[str, Any]:
    """A managed ComputeDomain as sent to the API: numNodes 0, the protection finalizer, no ownerReference."""
    domain = ComputeDomain(
        api_version=API_VERSION,
        kind=keys.COMPUTE_DOMAIN_KIND,
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels, finalizers=[keys.PROTECTION_FINALIZER]),
        spec=ComputeDomainSpec(
            num_nodes=0, channel=Channel(resource_claim_template=ResourceClaimTemplateReference(name=claim_template))
        ),
    )
    return domain.to_wire()
