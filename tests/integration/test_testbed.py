"""The testbed is real Kubernetes: upstream LWS creates workloads, the scheduler allocates DRA claims, and
the DRA simulator tears ComputeDomains down the way the NVIDIA driver does."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from mnnvl_api import keys
from mnnvl_testbed import cluster, manifests, testing, versions

LWS_GROUP = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
DS_GROUP = ("disaggregatedset.x-k8s.io", "v1", "disaggregatedsets")
CD_GROUP = (keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL)


def container(name: str, gpus: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "image": "registry.example/workload:1"}
    if gpus:
        spec["resources"] = {"limits": {keys.GPU_RESOURCE: str(gpus)}}
    return spec


def lws_spec(replicas: int, size: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {"containers": [container("vllm", 4)]}}},
    }


def running(pods: list[client.V1Pod]) -> list[client.V1Pod]:
    return [pod for pod in pods if pod.status.phase == "Running" and pod.spec.node_name]


def test_the_api_server_reports_the_version_it_was_built_from(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().git_version == versions.KUBERNETES_VERSION


def test_fake_nodes_look_like_gb200_nodes_in_nvlink_cliques(api: client.ApiClient, testbed: cluster.Testbed) -> None:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{manifests.TESTBED_NODE_LABEL}=true").items
    assert len(nodes) == testbed.nodes
    cliques = {node.metadata.labels[keys.GPU_CLIQUE_LABEL] for node in nodes}
    assert len(cliques) == -(-testbed.nodes // manifests.NODES_PER_CLIQUE)
    for node in nodes:
        assert node.status.allocatable[keys.GPU_RESOURCE] == "4"
        assert not node.spec.taints
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name


def test_upstream_lws_creates_statefulsets_and_pods_that_run_on_fake_nodes(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        *LWS_GROUP[:2],
        ns,
        LWS_GROUP[2],
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "web"},
            "spec": lws_spec(2, 3),
        },
    )
    apps = client.AppsV1Api(api)

    def statefulsets() -> list[str]:
        return sorted(sts.metadata.name for sts in apps.list_namespaced_stateful_set(ns).items)

    testing.wait_for(
        lambda: statefulsets() == ["web", "web-0", "web-1"],
        what="leader and worker StatefulSets",
        state=statefulsets,
        timeout=90,
    )
    testing.wait_for(
        lambda: len(running(testing.pods(api, ns))) == 6,
        what="6 pods Running on fake nodes",
        state=testing.state_of(
            lambda: [(p.metadata.name, p.status.phase, p.spec.node_name) for p in testing.pods(api, ns)]
        ),
        timeout=120,
    )
    names = sorted(pod.metadata.name for pod in testing.pods(api, ns))
    assert names == ["web-0", "web-0-1", "web-0-2", "web-1", "web-1-1", "web-1-2"]
    leader = next(pod for pod in testing.pods(api, ns) if pod.metadata.name == "web-1")
    assert leader.metadata.labels[keys.LWS_GROUP_INDEX_LABEL] == "1"
    worker = next(pod for pod in testing.pods(api, ns) if pod.metadata.name == "web-1-2")
    assert worker.metadata.annotations[keys.LWS_LEADER_NAME_ANNOTATION] == "web-1"


def create_domain(api: client.ApiClient, ns: str, name: str) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *CD_GROUP[:2],
        ns,
        CD_GROUP[2],
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        },
    )


def claim_template(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    templates = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaimtemplates"
    )
    return next((t for t in templates["items"] if t["metadata"]["name"] == name), None)


def channel_pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    **container("vllm", 1),
                    "resources": {"limits": {keys.GPU_RESOURCE: "1"}, "claims": [{"name": "channel"}]},
                }
            ],
        },
    }


def test_pods_claiming_the_channel_get_allocated_claims_and_never_share_a_node(api: client.ApiClient, ns: str) -> None:
    create_domain(api, ns, "cd-a")
    template = testing.wait_for(
        lambda: claim_template(api, ns, "cd-a-channel"), what="the simulator to create the claim template", timeout=30
    )
    assert template["metadata"]["labels"][manifests.DRIVER_TARGET_LABEL] == "Workload"
    assert not template["metadata"].get("ownerReferences")
    core = client.CoreV1Api(api)
    for index in range(2):
        core.create_namespaced_pod(ns, channel_pod(f"rank-{index}", "cd-a-channel"))
    placed = testing.wait_for(
        lambda: (found := running(testing.pods(api, ns))) and len(found) == 2 and found,
        what="both channel pods placed and Running",
        state=testing.state_of(lambda: testing.pods(api, ns)),
        timeout=90,
    )
    assert len({pod.spec.node_name for pod in placed}) == 2
    claims = client.CustomObjectsApi(api).list_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims")[
        "items"
    ]
    assert len(claims) == 2
    for claim in claims:
        allocation = claim["status"]["allocation"]
        assert allocation["devices"]["results"][0]["device"] == "channel-0"
        assert allocation["devices"]["results"][0]["driver"] == keys.COMPUTE_DOMAIN_DRIVER


def test_one_node_cannot_hold_two_channel_claims(api: client.ApiClient, ns: str, testbed: cluster.Testbed) -> None:
    create_domain(api, ns, "cd-b")
    testing.wait_for(lambda: claim_template(api, ns, "cd-b-channel"), what="claim template", timeout=30)
    core = client.CoreV1Api(api)
    node = "gb200-000"
    for index in range(2):
        pod = channel_pod(f"pinned-{index}", "cd-b-channel")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        core.create_namespaced_pod(ns, pod)

    def outcome() -> tuple[int, int]:
        pods = testing.pods(api, ns)
        unschedulable = sum(
            1
            for p in pods
            for c in p.status.conditions or []
            if c.type == "PodScheduled" and c.reason == "Unschedulable"
        )
        return len(running(pods)), unschedulable

    testing.wait_for(
        lambda: outcome() == (1, 1),
        what="one pod placed, the other unschedulable",
        state=testing.state_of(lambda: testing.pods(api, ns)),
        timeout=90,
    )


def test_deleting_a_domain_tears_it_down_at_once_and_names_pods_still_using_it(api: client.ApiClient, ns: str) -> None:
    create_domain(api, ns, "cd-c")
    testing.wait_for(lambda: claim_template(api, ns, "cd-c-channel"), what="claim template", timeout=30)
    custom = client.CustomObjectsApi(api)
    # A finalizer of someone else's must not delay the driver's teardown.
    custom.patch_namespaced_custom_object(
        *CD_GROUP[:2], ns, CD_GROUP[2], "cd-c", {"metadata": {"finalizers": ["example.com/keep"]}}
    )
    client.CoreV1Api(api).create_namespaced_pod(ns, channel_pod("user", "cd-c-channel"))
    testing.wait_for(lambda: len(running(testing.pods(api, ns))) == 1, what="the user pod Running", timeout=90)
    custom.delete_namespaced_custom_object(*CD_GROUP[:2], ns, CD_GROUP[2], "cd-c")
    testing.wait_for(
        lambda: claim_template(api, ns, "cd-c-channel") is None, what="the claim template deleted", timeout=30
    )
    recorded = testing.wait_for(lambda: testing.teardowns(api, ns), what="a recorded teardown", timeout=30)
    assert recorded == [
        {
            "domain": "cd-c",
            "referencing_pods": ["user"],
            "message": "IMEX teardown of ComputeDomain cd-c while referenced by non-terminal pods: user",
        }
    ]
    domain = custom.get_namespaced_custom_object(*CD_GROUP[:2], ns, CD_GROUP[2], "cd-c")
    assert domain["metadata"]["finalizers"] == ["example.com/keep"]
    custom.patch_namespaced_custom_object(*CD_GROUP[:2], ns, CD_GROUP[2], "cd-c", {"metadata": {"finalizers": None}})


def test_a_disaggregatedset_gets_child_leaderworkersets_and_pods_from_upstream(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    roles = [
        {"name": "prefill", "spec": lws_spec(1, 2)},
        {"name": "decode", "spec": lws_spec(1, 1)},
    ]
    custom.create_namespaced_custom_object(
        *DS_GROUP[:2],
        ns,
        DS_GROUP[2],
        {
            "apiVersion": "disaggregatedset.x-k8s.io/v1",
            "kind": "DisaggregatedSet",
            "metadata": {"name": "llm"},
            "spec": {"roles": roles},
        },
    )

    def children() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = custom.list_namespaced_custom_object(*LWS_GROUP[:2], ns, LWS_GROUP[2])["items"]
        return items

    found = testing.wait_for(
        lambda: (items := children()) and len(items) == 2 and items,
        what="two child LeaderWorkerSets",
        state=testing.state_of(children),
        timeout=90,
    )
    by_role = {item["metadata"]["labels"][keys.DS_ROLE_LABEL]: item for item in found}
    assert set(by_role) == {"prefill", "decode"}
    for item in found:
        owner = item["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("DisaggregatedSet", "llm", True)
    testing.wait_for(
        lambda: len(running(testing.pods(api, ns))) == 3,
        what="3 pods Running (prefill 1x2, decode 1x1)",
        state=testing.state_of(lambda: testing.pods(api, ns)),
        timeout=120,
    )
