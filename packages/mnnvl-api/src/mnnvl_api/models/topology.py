"""KAI `Topology` (`kai.scheduler/v1alpha1`) and Grove `ClusterTopologyBinding` (`grove.io/v1alpha1`)."""

from __future__ import annotations

from typing import Literal

import pydantic

from .base import KubeModel, ObjectMeta


class TopologyLevel(KubeModel):
    node_label: str
    alias: str | None = None


class TopologySpec(KubeModel):
    levels: list[TopologyLevel] = pydantic.Field(min_length=1, max_length=16)


class Topology(KubeModel):
    """Cluster-scoped, no status; levels are immutable once created (recreate to change them)."""

    api_version: Literal["kai.scheduler/v1alpha1"] = "kai.scheduler/v1alpha1"
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: TopologySpec


class BindingLevel(KubeModel):
    domain: str = pydantic.Field(pattern=r"^[a-z][a-z0-9-]*$", min_length=1, max_length=63)
    key: str = pydantic.Field(min_length=1, max_length=63)


class SchedulerTopologyBinding(KubeModel):
    scheduler_name: str
    topology_reference: str


class ClusterTopologyBindingSpec(KubeModel):
    levels: list[BindingLevel] = pydantic.Field(min_length=1)
    scheduler_topology_bindings: list[SchedulerTopologyBinding] = pydantic.Field(default_factory=list)


class ClusterTopologyBinding(KubeModel):
    """Cluster-scoped; levels are mutable; status reports whether each scheduler topology is in sync."""

    api_version: Literal["grove.io/v1alpha1"] = "grove.io/v1alpha1"
    kind: Literal["ClusterTopologyBinding"] = "ClusterTopologyBinding"
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: ClusterTopologyBindingSpec
    status: dict[str, object] | None = None
