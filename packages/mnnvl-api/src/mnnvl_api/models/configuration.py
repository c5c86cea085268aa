"""The controllers' configuration file: `config.lws.x-k8s.io/v1` `Configuration`.

It carries the seed's feature gates (`AutoComputeDomain`, off by default) and the settings mnnvl's
controllers need. Unknown keys are kept, so one file can also carry settings of other components.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import pydantic

from .. import keys
from .base import KubeModel

API_VERSION: Final = "config.lws.x-k8s.io/v1"
KIND: Final = "Configuration"


class DeletionProtection(enum.Enum):
    #: The seed's behaviour: the protection finalizer holds a deleted domain until no Pod references it.
    FINALIZER = "Finalizer"
    #: Also refuse the DELETE of an in-use managed domain at admission, so the driver never starts teardown.
    DENY = "Deny"


class ComputeDomainSettings(KubeModel):
    deletion_protection: DeletionProtection = DeletionProtection.FINALIZER


class WebhookSettings(KubeModel):
    host: str = "0.0.0.0"
    port: int = pydantic.Field(default=9443, ge=1, le=65535)
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    #: How often the serving certificate files are re-read; a change (cert-manager rotation) restarts serving.
    cert_check_interval_seconds: float = pydantic.Field(default=60.0, gt=0)


class LeaderElectionSettings(KubeModel):
    leader_elect: bool = True
    lease_duration_seconds: int = pydantic.Field(default=15, ge=1)
    renew_deadline_seconds: int = pydantic.Field(default=10, ge=1)
    retry_period_seconds: int = pydantic.Field(default=2, ge=1)

    @pydantic.model_validator(mode="after")
    def _renew_before_expiry(self) -> LeaderElectionSettings:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError("leaderElection: need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds")
        return self


class Configuration(KubeModel):
    api_version: Literal["config.lws.x-k8s.io/v1"] = API_VERSION
    kind: Literal["Configuration"] = KIND
    feature_gates: dict[str, bool] = pydantic.Field(default_factory=dict)
    compute_domain: ComputeDomainSettings = pydantic.Field(default_factory=ComputeDomainSettings)
    webhook: WebhookSettings = pydantic.Field(default_factory=WebhookSettings)
    leader_election: LeaderElectionSettings = pydantic.Field(default_factory=LeaderElectionSettings)
    metrics_bind_address: str = ":8080"
    health_bind_address: str = ":8081"

    @property
    def auto_compute_domain(self) -> bool:
        """The AutoComputeDomain feature gate; off unless the file turns it on."""
        return self.feature_gates.get(keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE, False)
