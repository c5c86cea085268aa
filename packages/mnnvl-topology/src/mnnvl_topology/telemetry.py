"""mnnvl-topology's metrics, on the shared registry. Clique values are bounded by the racks of the cluster."""

from __future__ import annotations

import prometheus_client

from mnnvl_runtime import metrics

WRITES = prometheus_client.Counter(
    "mnnvl_topology_writes_total",
    "Writes to KAI Topologies and Grove ClusterTopologyBindings, by kind and action (create, patch, recreate, adopt, "
    "delete)",
    ["kind", "action"],
    registry=metrics.REGISTRY,
)
REFUSED = prometheus_client.Counter(
    "mnnvl_topology_refused_writes_total",
    "Calls on a KAI Topology or Grove ClusterTopologyBinding the API server refused (a webhook, RBAC, validation)",
    ["kind"],
    registry=metrics.REGISTRY,
)
FOREIGN = prometheus_client.Gauge(
    "mnnvl_topology_foreign_objects",
    "Configured names held by a Topology or ClusterTopologyBinding this installation did not create (another "
    "installation's, a copied manifest's, anyone else's): left alone",
    ["kind"],
    registry=metrics.REGISTRY,
)
KAI_ONLY = prometheus_client.Gauge(
    "mnnvl_topologies_kai_only",
    "Topologies that want a Grove binding while Grove's ClusterTopologyBinding API is not served",
    registry=metrics.REGISTRY,
)
CLIQUE_NODES = prometheus_client.Gauge(
    "mnnvl_clique_nodes", "Nodes per value of nvidia.com/gpu.clique", ["clique"], registry=metrics.REGISTRY
)
CLIQUE_GPUS = prometheus_client.Gauge(
    "mnnvl_clique_gpus", "nvidia.com/gpu capacity per clique", ["clique"], registry=metrics.REGISTRY
)
CLIQUE_CHANNEL_NODES = prometheus_client.Gauge(
    "mnnvl_clique_channel_nodes",
    "Nodes per clique where a pod holds a ComputeDomain channel",
    ["clique"],
    registry=metrics.REGISTRY,
)
CLIQUE_FREE_NODES = prometheus_client.Gauge(
    "mnnvl_clique_free_nodes",
    "Schedulable GPU nodes per clique without a ComputeDomain channel in use",
    ["clique"],
    registry=metrics.REGISTRY,
)
UNLABELLED_GPU_NODES = prometheus_client.Gauge(
    "mnnvl_gpu_nodes_without_clique",
    "GPU nodes without the nvidia.com/gpu.clique label (outside every clique topology)",
    registry=metrics.REGISTRY,
)
CANNOT_FIT = prometheus_client.Counter(
    "mnnvl_clique_fit_warnings_total",
    "Warnings that a Pending group needs more nodes in one clique than any clique has free",
    registry=metrics.REGISTRY,
)
PASSES = prometheus_client.Counter(
    "mnnvl_topology_passes_total",
    "Queue passes completed, by work (topologies, census, fit): the fit checks' cost, and proof a pass ran",
    ["work"],
    registry=metrics.REGISTRY,
)
CLIQUE_GAUGES = (CLIQUE_NODES, CLIQUE_GPUS, CLIQUE_CHANNEL_NODES, CLIQUE_FREE_NODES)
