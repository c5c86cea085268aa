"""The controllers' configuration file: `config.lws.x-k8s.io/v1` `Configuration`.

It carries the seed's feature gates (`AutoComputeDomain`, off by default) and the settings mnnvl's
controllers need. Unknown keys and unknown feature gates are errors, at every level: a misspelt key
(`featureGate:`) would otherwise leave its setting at the default without a word.
"""

from __future__ import annotations

import difflib
import enum
import typing
from collections.abc import Sequence
from typing import Final, Literal, TypeGuard

import pydantic

from .. import keys
from .base import KubeModel

API_VERSION: Final = "config.lws.x-k8s.io/v1"
KIND: Final = "Configuration"
#: Every feature gate this release knows, in the order error messages list them.
KNOWN_FEATURE_GATES: Final = (keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE,)
BIND_ADDRESS_RULE: Final = "must be host:port or :port with a port from 1 to 65535, or empty to disable"


class DeletionProtection(enum.Enum):
    #: The seed's behaviour: the protection finalizer holds a deleted domain until no Pod references it.
    FINALIZER = "Finalizer"
    #: Also refuse the DELETE of an in-use managed domain at admission, so the driver never starts teardown.
    DENY = "Deny"


class _SettingsModel(KubeModel):
    """A section of the file: camelCase like every model, but unknown keys are rejected instead of kept."""

    model_config = pydantic.ConfigDict(extra="forbid")


class ComputeDomainSettings(_SettingsModel):
    deletion_protection: DeletionProtection = DeletionProtection.FINALIZER
    #: How long a condemned ComputeDomain waits before its final in-use check and deletion; must exceed the
    #: longest pod admission (webhook timeouts included), so a pod admitted just before the domain was
    #: condemned is persisted, and seen, before the domain is deleted.
    deletion_fence_seconds: float = pydantic.Field(default=30.0, ge=0)


class WebhookSettings(_SettingsModel):
    host: str = "0.0.0.0"
    port: int = pydantic.Field(default=9443, ge=1, le=65535)
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    #: How often the serving certificate files are re-read; a change (cert-manager rotation) restarts serving.
    cert_check_interval_seconds: float = pydantic.Field(default=60.0, gt=0)


class LeaderElectionSettings(_SettingsModel):
    leader_elect: bool = True
    lease_duration_seconds: int = pydantic.Field(default=15, ge=1)
    renew_deadline_seconds: int = pydantic.Field(default=10, ge=1)
    retry_period_seconds: int = pydantic.Field(default=2, ge=1)

    @pydantic.model_validator(mode="after")
    def _renew_before_expiry(self) -> LeaderElectionSettings:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError("need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds")
        return self


class WatchingSettings(_SettingsModel):
    #: How often every watch store is reconciled against a fresh list, so objects deleted while a watch was
    #: re-listing leave no ghost entries.
    store_resync_seconds: float = pydantic.Field(default=120.0, gt=0)


class ReconciliationSettings(_SettingsModel):
    #: How many keys (workloads, domains) the Lease holder reconciles at once; one key is never in two passes
    #: at once, whatever this is.
    concurrency: int = pydantic.Field(default=16, ge=1, le=256)


class Configuration(_SettingsModel):
    api_version: Literal["config.lws.x-k8s.io/v1"] = API_VERSION
    kind: Literal["Configuration"] = KIND
    feature_gates: dict[str, bool] = pydantic.Field(default_factory=dict)
    compute_domain: ComputeDomainSettings = pydantic.Field(default_factory=ComputeDomainSettings)
    webhook: WebhookSettings = pydantic.Field(default_factory=WebhookSettings)
    leader_election: LeaderElectionSettings = pydantic.Field(default_factory=LeaderElectionSettings)
    watching: WatchingSettings = pydantic.Field(default_factory=WatchingSettings)
    reconciliation: ReconciliationSettings = pydantic.Field(default_factory=ReconciliationSettings)
    #: Where Prometheus metrics and the liveness probe are served; the empty string turns either off.
    metrics_bind_address: str = ":8080"
    health_bind_address: str = ":8081"

    @pydantic.field_validator("feature_gates")
    @classmethod
    def _known_gates_only(cls, gates: dict[str, bool]) -> dict[str, bool]:
        problems = [_unknown_gate(name) for name in gates if name not in KNOWN_FEATURE_GATES]
        if problems:
            raise ValueError("; ".join(problems))
        return gates

    @pydantic.field_validator("metrics_bind_address", "health_bind_address")
    @classmethod
    def _bind_address_shape(cls, address: str) -> str:
        parse_bind_address(address)
        return address

    @property
    def auto_compute_domain(self) -> bool:
        """The AutoComputeDomain feature gate; off unless the file turns it on."""
        return self.feature_gates.get(keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE, False)


def _unknown_gate(name: str) -> str:
    close = difflib.get_close_matches(name, KNOWN_FEATURE_GATES, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown feature gate {name}{hint}; known gates: {', '.join(KNOWN_FEATURE_GATES)}"


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`host:port` or `:port` as (host, port), the host empty for every interface; None for "" (turned off).

    Raises ValueError with the rule when the address has another shape."""
    if address == "":
        return None
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{BIND_ADDRESS_RULE}; got {address!r}")
    return host, int(port)


def unknown_field_problem(location: Sequence[str | int]) -> str:
    """The message for a key of the file that no section knows: its path, and its likely spelling or the keys
    its section accepts. `location` is pydantic's error location of the key, e.g. ("webhook", "prot")."""
    *parents, key = (str(part) for part in location)
    prefix = "".join(f"{parent}." for parent in parents)
    known = _field_aliases(parents)
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown field {prefix}{key} (did you mean {prefix}{close[0]}?)"
    section = f" of {'.'.join(parents)}" if parents else ""
    return f"unknown field {prefix}{key}; known fields{section}: {', '.join(known)}"


def _field_aliases(path: Sequence[str]) -> list[str]:
    """The camelCase keys the section at `path` accepts (the top level for an empty path)."""
    model: type[pydantic.BaseModel] = Configuration
    for part in path:
        section = next(
            (field.annotation for name, field in model.model_fields.items() if part in (name, field.alias)), None
        )
        if not _is_model(section):
            return []
        model = section
    return [field.alias or name for name, field in model.model_fields.items()]


def _is_model(annotation: object) -> TypeGuard[type[pydantic.BaseModel]]:
    # `dict[str, bool]` passes isinstance(..., type) but is no class: rule generic aliases out first.
    return (
        typing.get_origin(annotation) is None
        and isinstance(annotation, type)
        and issubclass(annotation, pydantic.BaseModel)
    )
