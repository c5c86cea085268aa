"""LeaderWorkerSet `leaderworkerset.x-k8s.io/v1`: the fields mnnvl reads; everything else is kept as is."""

from __future__ import annotations

from typing import Any, Final, Literal

import pydantic

from .. import keys
from .base import KubeModel, ObjectMeta, PodTemplateSpec

API_VERSION: Final = keys.LWS_API_VERSION
KIND: Final = "LeaderWorkerSet"


class LeaderWorkerTemplate(KubeModel):
    size: int = 1
    leader_template: PodTemplateSpec | None = None
    worker_template: PodTemplateSpec = pydantic.Field(default_factory=PodTemplateSpec)
    restart_policy: str | None = None


class LeaderWorkerSetSpec(KubeModel):
    replicas: int = 1
    leader_worker_template: LeaderWorkerTemplate = pydantic.Field(default_factory=LeaderWorkerTemplate)
    rollout_strategy: dict[str, Any] | None = None
    startup_policy: str | None = None

    def templates(self, path: str) -> list[tuple[str, PodTemplateSpec]]:
        """Each pod template with its field path under `path` (leader first when present)."""
        found: list[tuple[str, PodTemplateSpec]] = []
        if self.leader_worker_template.leader_template is not None:
            found.append((f"{path}.leaderWorkerTemplate.leaderTemplate", self.leader_worker_template.leader_template))
        found.append((f"{path}.leaderWorkerTemplate.workerTemplate", self.leader_worker_template.worker_template))
        return found


class LeaderWorkerSet(KubeModel):
    api_version: Literal["leaderworkerset.x-k8s.io/v1"] = API_VERSION
    kind: Literal["LeaderWorkerSet"] = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: LeaderWorkerSetSpec = pydantic.Field(default_factory=LeaderWorkerSetSpec)
    status: dict[str, Any] | None = None
