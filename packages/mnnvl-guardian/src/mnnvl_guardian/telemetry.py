"""The guardian's metrics, on the shared registry."""

from __future__ import annotations

import prometheus_client

from mnnvl_runtime import metrics

TERMINATING = prometheus_client.Gauge(
    "mnnvl_protected_domains_terminating",
    "Managed ComputeDomains being deleted and still held by the protection finalizer",
    registry=metrics.REGISTRY,
)
RELEASE_WAIT = prometheus_client.Histogram(
    "mnnvl_protection_release_wait_seconds",
    "Time from a managed domain's deletion to the release of its protection finalizer",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600),
    registry=metrics.REGISTRY,
)
REFUSALS = prometheus_client.Counter(
    "mnnvl_domain_deletions_refused_total",
    "Deletions of in-use managed ComputeDomains refused in Deny mode",
    registry=metrics.REGISTRY,
)
