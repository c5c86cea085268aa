"""The one GPU rule (`injection.pod_requests_gpu`) as a table of pod specs: the claim injection and the clique
census (`mnnvl_topology.planner.pod_facts`) must both follow it, so both test suites read this table."""

from __future__ import annotations

from typing import Any


def gpu(amount: object = "1") -> dict[str, Any]:
    return {"resources": {"limits": {"nvidia.com/gpu": amount}}}


#: (what the pod has, its spec, whether it asks for a GPU)
GPU_RULE: list[tuple[str, dict[str, Any], bool]] = [
    ("a GPU container", {"containers": [{"name": "vllm", **gpu()}]}, True),
    ("a GPU sidecar only", {"containers": [{"name": "app"}], "initContainers": [{"name": "nixl", "restartPolicy": "Always", **gpu()}]}, True),
    ("a plain GPU init container only", {"containers": [{"name": "app"}], "initContainers": [{"name": "warm", **gpu()}]}, False),
    ("zero GPUs as a decimal", {"containers": [{"name": "app", **gpu("0.0")}]}, False),
    ("a GPU request, not a limit", {"containers": [{"name": "app", "resources": {"requests": {"nvidia.com/gpu": 2}}}]}, True),
    ("no containers", {}, False),
]  # fmt: skip
