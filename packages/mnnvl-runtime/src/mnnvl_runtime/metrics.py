"""Prometheus metrics shared by every controller; each controller adds its own on the same registry."""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client

from . import __version__

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

BUILD_INFO = prometheus_client.Gauge(
    "mnnvl_build_info", "Version of the running controller", ["controller", "version"], registry=REGISTRY
)
LEASE_HELD = prometheus_client.Gauge(
    "mnnvl_lease_held", "1 while this replica holds the controller's Lease and reconciles", registry=REGISTRY
)
ADMISSION_REQUESTS = prometheus_client.Counter(
    "mnnvl_admission_requests_total",
    "Admission requests answered, by webhook, operation and result (allowed, patched, denied, error)",
    ["webhook", "operation", "result"],
    registry=REGISTRY,
)
ADMISSION_DURATION = prometheus_client.Histogram(
    "mnnvl_admission_duration_seconds",
    "Time to answer an admission request",
    ["webhook"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
RECONCILE_ERRORS = prometheus_client.Counter(
    "mnnvl_reconcile_errors_total", "Reconciliations that failed and will be retried", ["kind"], registry=REGISTRY
)


#: Starts a server of a registry on host and port in a thread: plain HTTP by default.
Server = Callable[[str, int, prometheus_client.CollectorRegistry], None]


def _plain_http(host: str, port: int, registry: prometheus_client.CollectorRegistry) -> None:
    prometheus_client.start_http_server(port, addr=host, registry=registry)


def serve(controller: str, host: str, port: int, *, server: Server = _plain_http) -> None:
    """Expose the registry on `host:port` with `server` (a thread: kopf cancels every task of its loop on exit).

    Raises OSError when the port cannot be bound, before anything is served."""
    BUILD_INFO.labels(controller=controller, version=__version__).set(1)
    server(host, port, REGISTRY)


# --- scope controllers (replica and slice) ------------------------------------------------------------------

COMPUTE_DOMAINS = prometheus_client.Gauge(
    "mnnvl_compute_domains",
    "Managed ComputeDomains by state (pending: claim template not there yet, ready, terminating)",
    ["scope", "state"],
    registry=REGISTRY,
)
GATED_PODS = prometheus_client.Gauge(
    "mnnvl_gated_pods", "Pods held by the ComputeDomain scheduling gate", ["scope"], registry=REGISTRY
)
GATE_DURATION = prometheus_client.Histogram(
    "mnnvl_pod_gate_duration_seconds",
    "Time from pod creation to the removal of its ComputeDomain scheduling gate",
    ["scope"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900),
    registry=REGISTRY,
)
DOMAINS_CREATED = prometheus_client.Counter(
    "mnnvl_compute_domains_created_total", "ComputeDomains created by reconciliation", ["scope"], registry=REGISTRY
)
DOMAINS_CREATED_AT_ADMISSION = prometheus_client.Counter(
    "mnnvl_compute_domains_created_at_admission_total",
    "ComputeDomains created by the pod webhook once a pod's admission named them",
    ["scope"],
    registry=REGISTRY,
)
DOMAINS_DELETED = prometheus_client.Counter(
    "mnnvl_compute_domains_deleted_total",
    "ComputeDomains deleted once unreferenced, by reason (obsolete, workload_deleted)",
    ["scope", "reason"],
    registry=REGISTRY,
)
