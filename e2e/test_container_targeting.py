"""Explicit Container Targeting for DRA-Allocated GPUs."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import workloads

DRA_VLLM = {"name": "vllm", "image": "nvcr.io/nvidia/vllm:latest"}


def test_compute_domain_containers_names_the_containers_that_get_the_claim(api: kube.Kube, ns: str) -> None:
    """When GPUs themselves are allocated via DRA ResourceClaims rather than nvidia.com/gpu extended resources, annotate the PodTemplateSpec with leaderworkerset.sigs.k8s.io/compute-domain-containers."""
    manifest = workloads.lws_manifest(
        "dra",
        replicas=1,
        size=2,
        containers=[DRA_VLLM, workloads.ROUTING_PROXY],
        worker_annotations={keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "vllm"},
    )
    workloads.create_lws(api, ns, manifest)
    pods = workloads.wait_groups_running(api, ns, "dra", replicas=1, size=2)
    for pod in pods:
        assert workloads.claimed_containers(pod) == ["vllm"]
        assert [c["name"] for c in pod["spec"]["resourceClaims"]] == [keys.CHANNEL_CLAIM_NAME]


def test_an_unknown_container_name_is_rejected_with_the_name(api: kube.Kube, ns: str) -> None:
    """A name that does not exist is rejected at admission, with the missing names in the message."""
    manifest = workloads.lws_manifest(
        "typo",
        containers=[DRA_VLLM, workloads.ROUTING_PROXY],
        worker_annotations={keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "vllm,proxy"},
    )
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, manifest))
    assert (
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        'Invalid value: "vllm,proxy": no container named "proxy" (containers: "vllm", "routing-proxy"); '
        "name existing containers only"
    ) in message
    assert api.get(workloads.LWS_API, "leaderworkersets", "typo", namespace=ns) is None
