"""DisaggregatedSet `disaggregatedset.x-k8s.io/v1`: roles of LeaderWorkerSet specs, copied per slice."""

from __future__ import annotations

from typing import Any, Final, Literal

import pydantic

from .. import keys
from .base import KubeModel, ObjectMeta, TemplateMeta
from .leaderworkerset import LeaderWorkerSetSpec

API_VERSION: Final = keys.DS_API_VERSION
KIND: Final = "DisaggregatedSet"


class Role(KubeModel):
    name: str
    metadata: TemplateMeta = pydantic.Field(default_factory=TemplateMeta)
    spec: LeaderWorkerSetSpec = pydantic.Field(default_factory=LeaderWorkerSetSpec)
    scaling: dict[str, Any] | None = None


class PlacementPolicy(KubeModel):
    type: str = "None"
    topology: str | None = None


class DisaggregatedSetSpec(KubeModel):
    roles: list[Role] = pydantic.Field(default_factory=list)
    slices: int = 1
    placement_policy: PlacementPolicy | None = None


class DisaggregatedSet(KubeModel):
    api_version: Literal["disaggregatedset.x-k8s.io/v1"] = API_VERSION
    kind: Literal["DisaggregatedSet"] = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: DisaggregatedSetSpec = pydantic.Field(default_factory=DisaggregatedSetSpec)
    status: dict[str, Any] | None = None
