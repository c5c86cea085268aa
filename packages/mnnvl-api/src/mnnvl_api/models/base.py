"""The base of every model: camelCase on the wire, unknown fields kept, so a parsed object dumps back whole."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import alias_generators


class KubeModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        extra="allow", populate_by_name=True, alias_generator=alias_generators.to_camel, frozen=False
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server would send it: camelCase, unset fields left out, unknown ones kept."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class ObjectMeta(KubeModel):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generate_name: str | None = None
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    finalizers: list[str] = pydantic.Field(default_factory=list)
    owner_references: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    deletion_timestamp: str | None = None
    resource_version: str | None = None
    generation: int | None = None

    @property
    def is_deleting(self) -> bool:
        return self.deletion_timestamp is not None


class TemplateMeta(KubeModel):
    """Metadata of a pod template or of a DisaggregatedSet role: labels and annotations only."""

    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)


class PodTemplateSpec(KubeModel):
    metadata: TemplateMeta = pydantic.Field(default_factory=TemplateMeta)
    #: The pod spec stays a plain dict: claim injection works on it as JSON and patches it as JSON.
    spec: dict[str, Any] = pydantic.Field(default_factory=dict)
