"""Workload manifests the testbed's users build: opted-in and plain LeaderWorkerSets and DisaggregatedSets sized
for the testbed's fake GB200 nodes, and a ComputeDomain someone else made. The e2e tests and the chaos run share them.
"""

from __future__ import annotations

import copy
from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube

LWS_API = "leaderworkerset.x-k8s.io/v1"
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
VLLM = {"name": "vllm", "image": "nvcr.io/nvidia/vllm:latest", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
ROUTING_PROXY = {"name": "routing-proxy", "image": "envoyproxy/envoy:v1.31-latest"}
DS_API = keys.DS_API_VERSION


def lws_manifest(
    name: str,
    *,
    replicas: int = 2,
    size: int = 2,
    opt_in: str | None = "enabled",
    containers: list[dict[str, Any]] | None = None,
    worker_annotations: dict[str, str] | None = None,
    leader_containers: list[dict[str, Any]] | None = None,
    max_surge: int | None = None,
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    """An LWS of `replicas` groups of `size` pods; `scheduler_name` is the pods' scheduler (the default one if None)."""
    scheduling = {"schedulerName": scheduler_name} if scheduler_name else {}
    worker: dict[str, Any] = {"spec": {"containers": copy.deepcopy(containers or [VLLM, ROUTING_PROXY]), **scheduling}}
    if worker_annotations:
        worker["metadata"] = {"annotations": dict(worker_annotations)}
    template: dict[str, Any] = {"size": size, "workerTemplate": worker}
    if leader_containers is not None:
        template["leaderTemplate"] = {"spec": {"containers": copy.deepcopy(leader_containers), **scheduling}}
    spec: dict[str, Any] = {"replicas": replicas, "leaderWorkerTemplate": template}
    if max_surge is not None:
        spec["rolloutStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": max_surge, "maxUnavailable": 1},
        }
    annotations = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in} if opt_in is not None else {}
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def role_manifest(
    name: str,
    *,
    replicas: int = 1,
    size: int = 1,
    gpus: str = "2",
    image: str = "nvcr.io/nvidia/vllm:1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A role whose pods hold a node's channel each (`gpus` of its 4 GPUs), rolled out one group at a time
    without surging (`maxSurge: 0`), so a slice's revisions share the slice's clique without needing more nodes."""
    container = {"name": "vllm", "image": image, "resources": {"limits": {keys.GPU_RESOURCE: gpus}}}
    role: dict[str, Any] = {
        "name": name,
        "spec": {
            "replicas": replicas,
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {"containers": [container]}}},
        },
    }
    if annotations:
        role["metadata"] = {"annotations": dict(annotations)}
    return role


def ds_manifest(
    name: str,
    *,
    slices: int = 1,
    roles: list[dict[str, Any]] | None = None,
    opt_in: str | None = "enabled",
    placement: bool = True,
) -> dict[str, Any]:
    """A DisaggregatedSet; by default prefill (1 group of 2) and decode (1 group of 1), each slice on a clique."""
    spec: dict[str, Any] = {
        "slices": slices,
        "roles": roles if roles is not None else [role_manifest("prefill", size=2), role_manifest("decode")],
    }
    if placement:
        spec["placementPolicy"] = {"type": "ExclusiveSlice", "topology": keys.GPU_CLIQUE_LABEL}
    annotations = {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in} if opt_in is not None else {}
    return {
        "apiVersion": DS_API,
        "kind": keys.DS_KIND,
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def generate_named(manifest: dict[str, Any], generate_name: str) -> dict[str, Any]:
    """`manifest` with `metadata.generateName` instead of a name: the API server picks the name."""
    generated = copy.deepcopy(manifest)
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = generate_name
    return generated


def create_foreign_domain(api: kube.Kube, ns: str, name: str, labels: dict[str, str]) -> kube.Object:
    """A ComputeDomain someone else made: none of mnnvl's management labels."""
    return api.request(
        "POST",
        kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns),
        body={
            "apiVersion": CD_API,
            "kind": "ComputeDomain",
            "metadata": {"name": name, "labels": labels},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        },
    )


def domains(api: kube.Kube, ns: str) -> dict[str, kube.Object]:
    """The ComputeDomains of a namespace, by name."""
    return {d["metadata"]["name"]: d for d in api.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns)}
