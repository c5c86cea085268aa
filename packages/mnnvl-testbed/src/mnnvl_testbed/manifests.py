"""The objects the testbed makes: fake GB200 nodes and the NVIDIA DRA driver's objects (its CRD is upstream's)."""

from __future__ import annotations

import base64
import copy
import re
import uuid
from typing import Any

from mnnvl_api import keys

#: Nodes per NVLink clique unless a testbed asks otherwise: small enough that a few nodes make several cliques.
NODES_PER_CLIQUE = 4
#: A GB200 / GB300 NVL72 rack: 18 compute trays of 4 GPUs in one NVLink domain.
NVL72_NODES_PER_CLIQUE = 18
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
TESTBED_NODE_LABEL = "mnnvl-testbed/node"
COMPUTE_DOMAIN_FINALIZER = "resource.nvidia.com/computeDomain"
DRIVER_LABEL = "resource.nvidia.com/computeDomain"
DRIVER_TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
# Stable cluster UUIDs, so clique labels are the same on every run.
_CLUSTER_NAMESPACE = uuid.UUID("6c1b0a1e-0000-4000-8000-000000000000")


def clique_id(index: int) -> str:
    """`<clusterUUID>.<cliqueId>` as GPU Feature Discovery (and the DRA driver) label GB200 nodes: one NVLink
    domain (cluster UUID) per rack, `index` its clique."""
    return f"{uuid.uuid5(_CLUSTER_NAMESPACE, f'nvl72-rack-{index}')}.{index}"


def fake_node(index: int, *, nodes_per_clique: int = NODES_PER_CLIQUE) -> dict[str, Any]:
    """A kwok-managed GB200 node: 4 GPUs, the clique label, no taints."""
    name = f"gb200-{index:03d}"
    capacity = {"cpu": "72", "memory": "480Gi", "pods": "110", keys.GPU_RESOURCE: "4", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "arm64",
                "node.kubernetes.io/instance-type": "gb200-nvl72",
                keys.GPU_CLIQUE_LABEL: clique_id(index // nodes_per_clique),
                TESTBED_NODE_LABEL: "true",
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def channel_resource_slice(node: dict[str, Any]) -> dict[str, Any]:
    """One `channel-0` device per node, as the driver's kubelet plugin publishes it."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{name}-{keys.COMPUTE_DOMAIN_DRIVER}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": {
            "driver": keys.COMPUTE_DOMAIN_DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}],
        },
    }


def local_lws_webhooks(upstream: list[dict[str, Any]], *, base_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Upstream LWS's webhook configurations, named as its installers name them, called by URL with our CA.

    As upstream's kustomize patches and Helm chart do, the pod webhooks only see pods labelled as LWS pods.
    """
    pod_selector = {"matchExpressions": [{"key": keys.LWS_NAME_LABEL, "operator": "Exists"}]}
    encoded = base64.b64encode(ca_bundle).decode()
    configurations = copy.deepcopy(upstream)
    for configuration in configurations:
        configuration["metadata"]["name"] = "lws-" + configuration["metadata"]["name"]
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": encoded}
            if any("pods" in rule["resources"] for rule in webhook["rules"]):
                webhook["objectSelector"] = pod_selector
    return configurations


def container_environment(container: dict[str, Any], *, pod_name: str, namespace: str) -> dict[str, str]:
    """A container's environment as a kubelet sets it for a pod `namespace/pod_name`: literal values as written,
    the downward API's pod name and namespace filled in."""
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace}
    return {
        variable["name"]: str(variable["value"])
        if "value" in variable
        else downward[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        for variable in container.get("env", [])
    }


def expanded_command(command: list[str], environment: dict[str, str]) -> list[str]:
    """A container's command with each `$(NAME)` of a set variable replaced by its value, as a kubelet expands it."""
    return [re.sub(r"\$\((\w+)\)", lambda found: environment.get(found[1], found[0]), word) for word in command]
