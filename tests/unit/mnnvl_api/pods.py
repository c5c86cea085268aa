"""Seed-shaped pod templates for unit tests (the AutoComputeDomain examples, as a user writes them)."""

from __future__ import annotations

import copy
from typing import Any

from mnnvl_api import keys

VLLM = {"name": "vllm", "image": "nvcr.io/nvidia/vllm:latest", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
ROUTING_PROXY = {"name": "routing-proxy", "image": "envoyproxy/envoy:v1.31-latest"}


def deepseek_worker_spec() -> dict[str, Any]:
    """The deepseek-r1 worker: a 4-GPU vllm container and a CPU-only routing-proxy sidecar."""
    return {"containers": [copy.deepcopy(VLLM), copy.deepcopy(ROUTING_PROXY)]}


def cpu_leader_spec() -> dict[str, Any]:
    """A CPU-only leader template: nothing in it requests a GPU."""
    return {
        "containers": [
            {"name": "router", "image": "nvcr.io/nvidia/dynamo:latest", "resources": {"limits": {"cpu": "2"}}}
        ]
    }


def dra_gpu_spec() -> dict[str, Any]:
    """GPUs allocated through DRA claims, so no container requests nvidia.com/gpu."""
    return {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}],
        "containers": [
            {"name": "vllm", "image": "nvcr.io/nvidia/vllm:latest", "resources": {"claims": [{"name": "gpus"}]}},
            {"name": "routing-proxy", "image": "envoyproxy/envoy:v1.31-latest"},
        ],
    }


def dra_gpu_annotations(names: str = "vllm") -> dict[str, str]:
    return {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: names}


def restartable_init_spec() -> dict[str, Any]:
    """A sidecar-style init container (restartPolicy Always) requesting a GPU, plus a plain init container."""
    return {
        "initContainers": [
            {"name": "setup", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {
                "name": "nixl-agent",
                "image": "nvcr.io/nvidia/nixl:latest",
                "restartPolicy": "Always",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            },
        ],
        "containers": [copy.deepcopy(VLLM)],
    }


def leader_worker_template(
    size: int,
    *,
    worker_spec: dict[str, Any] | None = None,
    leader_spec: dict[str, Any] | None = None,
    worker_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `leaderWorkerTemplate` of `size` pods per group, workers from `worker_spec` (the DeepSeek worker's by
    default), with a leader template only when `leader_spec` is given."""
    template: dict[str, Any] = {"size": size, "workerTemplate": {"spec": worker_spec or deepseek_worker_spec()}}
    if worker_meta is not None:
        template["workerTemplate"]["metadata"] = copy.deepcopy(worker_meta)
    if leader_spec is not None:
        template["leaderTemplate"] = {"spec": leader_spec}
    return template
