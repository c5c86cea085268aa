"""Pydantic models of the API objects mnnvl reads and writes. Unknown fields are always kept."""

from .base import KubeModel, ObjectMeta, PodTemplateSpec, TemplateMeta
from .computedomain import ComputeDomain
from .configuration import Configuration, DeletionProtection
from .disaggregatedset import DisaggregatedSet, Role
from .leaderworkerset import LeaderWorkerSet, LeaderWorkerSetSpec
from .topology import ClusterTopologyBinding, Topology

__all__ = [
    "ClusterTopologyBinding",
    "ComputeDomain",
    "Configuration",
    "DeletionProtection",
    "DisaggregatedSet",
    "KubeModel",
    "LeaderWorkerSet",
    "LeaderWorkerSetSpec",
    "ObjectMeta",
    "PodTemplateSpec",
    "Role",
    "TemplateMeta",
    "Topology",
]
