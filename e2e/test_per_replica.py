"""Option 1: Per-Replica ComputeDomain (LeaderWorkerSet)."""

from __future__ import annotations

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, crds, dra_driver, processes, testing, versions

from . import workloads


@pytest.mark.image_run
def test_lws_creates_a_dedicated_compute_domain_for_each_replica(
    api: kube.Kube, ns: str, computedomain_crd: str
) -> None:
    """LWS creates a dedicated ComputeDomain (numNodes: 0) for each replica and injects the lws-compute-domain-channel ResourceClaim only into containers requesting nvidia.com/gpu."""
    assert crds.num_nodes_required(api) is versions.COMPUTE_DOMAIN_CRDS[computedomain_crd].num_nodes_required
    created = workloads.create_lws(api, ns, yaml.safe_load(workloads.LWS_EXAMPLE.read_text()))
    pods = workloads.wait_groups_running(api, ns, "deepseek-r1", replicas=2, size=4)
    per_group = workloads.group_domains(pods)
    assert sorted(per_group) == ["0", "1"]
    found = workloads.domains(api, ns)
    assert set(found) == set(per_group.values())
    for group, name in per_group.items():
        domain = found[str(name)]
        assert domain["spec"]["numNodes"] == 0
        assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{name}-channel"
        labels = domain["metadata"]["labels"]
        assert labels[keys.OWNER_UID_LABEL] == created["metadata"]["uid"]
        assert labels[keys.GROUP_INDEX_LABEL] == group
        assert labels[keys.MANAGED_BY_LABEL] == keys.LWS_CONTROLLER
        assert keys.PROTECTION_FINALIZER in domain["metadata"]["finalizers"]
        assert not domain["metadata"].get("ownerReferences")
    for pod in pods:
        assert workloads.claimed_containers(pod) == ["vllm"], pod["metadata"]["name"]
        assert pod["spec"]["resourceClaims"] == [
            {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": f"{workloads.domain_of(pod)}-channel"}
        ]
    groups_on_cliques = {
        group: {
            api.get("v1", "nodes", p["spec"]["nodeName"])["metadata"]["labels"][keys.GPU_CLIQUE_LABEL]  # type: ignore[index]
            for p in pods
            if p["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL] == group
        }
        for group in per_group
    }
    assert all(len(cliques) == 1 for cliques in groups_on_cliques.values()), groups_on_cliques


def test_cpu_only_leader_templates_get_no_claim(api: kube.Kube, ns: str) -> None:
    """LWS automatically skips CPU-only sidecars such as routing-proxy and CPU-only leaderTemplates."""
    router = {"name": "router", "image": "nvcr.io/nvidia/dynamo:latest", "resources": {"limits": {"cpu": "1"}}}
    workloads.create_lws(api, ns, workloads.lws_manifest("split", replicas=1, size=3, leader_containers=[router]))
    pods = workloads.wait_groups_running(api, ns, "split", replicas=1, size=3)
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert workloads.claimed_containers(by_name["split-0"]) == []
    assert "resourceClaims" not in by_name["split-0"]["spec"]
    assert workloads.domain_of(by_name["split-0"]) == workloads.domain_of(by_name["split-0-1"])
    assert workloads.claimed_containers(by_name["split-0-1"]) == ["vllm"]
    assert workloads.claimed_containers(by_name["split-0-2"]) == ["vllm"]


def test_leaders_stay_gated_until_their_domain_and_claim_template_exist(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """Pods are held by a scheduling gate until their ComputeDomain and its ResourceClaimTemplate exist."""
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.stop(dra_driver.COMPONENT)  # no driver: domains get no claim template
    try:
        workloads.create_lws(api, ns, workloads.lws_manifest("held", replicas=1, size=2))

        def gated_with_domain() -> list[kube.Object] | None:
            pods = workloads.lws_pods(api, ns, "held")
            domain = workloads.domain_of(pods[0]) if pods else None
            if len(pods) == 2 and all(workloads.is_gated(p) for p in pods) and domain in workloads.domains(api, ns):
                return pods
            return None

        pods = testing.wait_for(
            gated_with_domain,
            what="both pods gated while their domain has no claim template",
            state=testing.state_of(lambda: workloads.summary(api, ns)),
            timeout=60,
        )
        assert all(p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName") for p in pods)
    finally:
        cluster.start_driver_part(supervisor, testbed, dra_driver.COMPONENT)
    pods = workloads.wait_groups_running(api, ns, "held", replicas=1, size=2)
    claims = api.list_objects("resource.k8s.io/v1", "resourceclaims", namespace=ns)
    assert len(claims) == 2
    for claim in claims:
        assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "channel-0"
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
