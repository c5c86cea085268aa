"""The testbed is real Kubernetes: upstream LWS creates workloads, the scheduler allocates DRA claims, and
NVIDIA's real ComputeDomain controller brings domains up and tears them down, watched by the teardown witness."""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, dra_driver, manifests, processes, testing, thirdparty, versions

LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
DRA_API = "resource.k8s.io/v1"


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


def create(api: kube.Kube, ns: str, api_version: str, plural: str, body: dict[str, Any]) -> kube.Object:
    return api.request("POST", kube.path_of(api_version, plural, namespace=ns), body=body)


def create_domain(api: kube.Kube, ns: str, name: str) -> None:
    body = {
        "apiVersion": CD_API,
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    create(api, ns, CD_API, keys.COMPUTE_DOMAIN_PLURAL, body)


def claim_template(api: kube.Kube, ns: str, name: str) -> kube.Object | None:
    return api.get(DRA_API, "resourceclaimtemplates", name, namespace=ns)


def channel_pod(name: str, template: str, node: str | None = None) -> dict[str, Any]:
    gpu = container("vllm", 1)
    gpu["resources"]["claims"] = [{"name": "channel"}]
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
        "containers": [gpu],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def wait_running(api: kube.Kube, ns: str, count: int, what: str) -> list[kube.Object]:
    return testing.wait_for(
        lambda: found if len(found := testing.running(testing.pods(api, ns))) == count else None,
        what=what,
        state=testing.state_of(lambda: testing.placement(testing.pods(api, ns))),
        timeout=120,
    )


def test_the_api_server_reports_the_version_it_was_built_from(api: kube.Kube) -> None:
    assert api.request("GET", "/version")["gitVersion"] == versions.KUBERNETES_VERSION


def test_fake_nodes_look_like_gb200_nodes_in_nvlink_cliques(api: kube.Kube, testbed: cluster.Testbed) -> None:
    nodes = api.list_objects("v1", "nodes", labelSelector=f"{manifests.TESTBED_NODE_LABEL}=true")
    assert len(nodes) == testbed.nodes
    cliques = collections.Counter(node["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for node in nodes)
    assert len(cliques) == testbed.cliques
    assert max(cliques.values()) == testbed.nodes_per_clique
    assert all(
        re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.\d+", clique) for clique in cliques
    )
    for node in nodes:
        assert node["status"]["allocatable"][keys.GPU_RESOURCE] == "4"
        assert not node["spec"].get("taints")
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert kube.is_condition_true(node, "Ready")


def test_upstream_lws_creates_statefulsets_and_pods_that_run_on_fake_nodes(api: kube.Kube, ns: str) -> None:
    lws = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": {"name": "web"}, "spec": lws_spec(2, 3)}
    create(api, ns, LWS_API, "leaderworkersets", lws)

    def statefulsets() -> list[str]:
        return sorted(sts["metadata"]["name"] for sts in api.list_objects("apps/v1", "statefulsets", namespace=ns))

    testing.wait_for(
        lambda: statefulsets() == ["web", "web-0", "web-1"],
        what="the leader StatefulSet and one worker StatefulSet per group",
        state=statefulsets,
        timeout=90,
    )
    placed = wait_running(api, ns, 6, "6 pods Running on fake nodes")
    by_name = {pod["metadata"]["name"]: pod for pod in placed}
    assert sorted(by_name) == ["web-0", "web-0-1", "web-0-2", "web-1", "web-1-1", "web-1-2"]
    assert by_name["web-1"]["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL] == "1"
    assert by_name["web-1-2"]["metadata"]["annotations"][keys.LWS_LEADER_NAME_ANNOTATION] == "web-1"


def test_pods_claiming_the_channel_get_allocated_claims_and_never_share_a_node(api: kube.Kube, ns: str) -> None:
    create_domain(api, ns, "cd-a")
    template = testing.wait_for(
        lambda: claim_template(api, ns, "cd-a-channel"), what="the driver to create the claim template", timeout=30
    )
    assert template["metadata"]["labels"][manifests.DRIVER_TARGET_LABEL] == "Workload"
    assert not template["metadata"].get("ownerReferences")
    for index in range(2):
        create(api, ns, "v1", "pods", channel_pod(f"rank-{index}", "cd-a-channel"))
    placed = wait_running(api, ns, 2, "both channel pods placed and Running")
    assert len({pod["spec"]["nodeName"] for pod in placed}) == 2
    claims = api.list_objects(DRA_API, "resourceclaims", namespace=ns)
    assert len(claims) == 2
    for claim in claims:
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["device"]) == (keys.COMPUTE_DOMAIN_DRIVER, "channel-0")


def daemon_sets(api: kube.Kube, uid: str) -> list[kube.Object]:
    """The driver's DaemonSets of the domain with `uid`, in the driver's namespace."""
    return api.list_objects(
        "apps/v1", "daemonsets", namespace=dra_driver.NAMESPACE, labelSelector=f"{manifests.DRIVER_LABEL}={uid}"
    )


def test_the_real_driver_brings_a_domain_up_with_its_finalizers_a_daemon_set_and_ready_status(
    api: kube.Kube, ns: str
) -> None:
    """What the driver's controller (v25.12.0, driverManaged) does for a domain with numNodes 0, as mnnvl relies
    on it: its finalizer on the domain and on the workload claim template, a DaemonSet and a daemon claim template
    per domain in its own namespace, and the domain Ready once the workload claim template exists (no daemon pod
    is needed: kwok nodes get none, since no kubelet plugin labels them)."""
    create_domain(api, ns, "cd-up")

    def ready() -> kube.Object | None:
        domain = api.get(CD_API, keys.COMPUTE_DOMAIN_PLURAL, "cd-up", namespace=ns)
        return domain if domain and (domain.get("status") or {}).get("status") == "Ready" else None

    domain = testing.wait_for(ready, what="the domain Ready", timeout=30)
    uid = domain["metadata"]["uid"]
    assert domain["metadata"]["finalizers"] == [manifests.COMPUTE_DOMAIN_FINALIZER]
    template = claim_template(api, ns, "cd-up-channel")
    assert template is not None
    assert template["metadata"]["finalizers"] == [manifests.COMPUTE_DOMAIN_FINALIZER]
    assert template["metadata"]["labels"] == {manifests.DRIVER_LABEL: uid, manifests.DRIVER_TARGET_LABEL: "Workload"}
    [config] = template["spec"]["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["domainID"] == uid
    [daemon_set] = testing.wait_for(lambda: daemon_sets(api, uid), what="the domain's DaemonSet", timeout=30)
    assert daemon_set["metadata"]["name"] == f"computedomain-daemon-{uid}"
    assert daemon_set["metadata"]["finalizers"] == [manifests.COMPUTE_DOMAIN_FINALIZER]
    assert daemon_set["spec"]["template"]["spec"]["nodeSelector"] == {manifests.DRIVER_LABEL: uid}
    daemon_templates = api.list_objects(
        DRA_API,
        "resourceclaimtemplates",
        namespace=dra_driver.NAMESPACE,
        labelSelector=f"{manifests.DRIVER_LABEL}={uid},{manifests.DRIVER_TARGET_LABEL}=Daemon",
    )
    assert len(daemon_templates) == 1
    assert not any(
        manifests.DRIVER_LABEL in node["metadata"].get("labels", {}) for node in api.list_objects("v1", "nodes")
    )


def test_the_driver_controller_acts_as_its_charts_service_account_with_the_charts_rbac(
    testbed: cluster.Testbed,
) -> None:
    """The controller authenticates as the ServiceAccount its chart names, and may do what the chart's RBAC grants
    and nothing else: a driver that needed more than its chart gives would fail here, not at a user's."""
    api = testbed.api()
    account = dra_driver.service_account()
    kubeconfig = testbed.state_dir / dra_driver.COMPONENT / "serviceaccount.kubeconfig"
    assert f"system:serviceaccount:{dra_driver.NAMESPACE}:{account}" in kubeconfig.read_text()
    granted = {"verb": "update", "group": keys.COMPUTE_DOMAIN_GROUP, "resource": keys.COMPUTE_DOMAIN_PLURAL}
    assert testing.service_account_allowed(api, dra_driver.NAMESPACE, account, granted)
    for refused in (
        {"verb": "delete", "group": keys.COMPUTE_DOMAIN_GROUP, "resource": keys.COMPUTE_DOMAIN_PLURAL},
        {"verb": "delete", "group": "", "resource": "pods"},
        {"verb": "patch", "group": "", "resource": "pods"},
    ):
        assert not testing.service_account_allowed(api, dra_driver.NAMESPACE, account, refused), refused


def test_the_drivers_chart_values_give_its_controller_client_limits_as_strings() -> None:
    """What `--driver-qps` sets reaches the controller as helm renders the chart's Deployment: string values, as
    the API server accepts them in a cluster, and nothing of them without."""
    values = dra_driver.client_rate_values(50)
    [deployment] = [document for document in dra_driver.rendered_chart(values) if document["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert (env["KUBE_API_QPS"], env["KUBE_API_BURST"]) == ("50", "100")
    assert dra_driver.client_limits(dra_driver.controller_environment(values)) == {
        "KUBE_API_QPS": "50",
        "KUBE_API_BURST": "100",
    }
    assert not {"KUBE_API_QPS", "KUBE_API_BURST"} & dra_driver.controller_environment().keys()


def test_up_with_other_driver_values_restarts_the_controller_with_them(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """As a `helm upgrade` with new values rolls the driver's Deployment; the same values keep it running."""
    supervisor = processes.Supervisor(testbed.state_dir)
    before = cluster.Testbed.load(testbed.state_dir) or testbed
    limits_before = dra_driver.client_limits(supervisor.environment(dra_driver.COMPONENT))
    values = dra_driver.client_rate_values(50)
    log = supervisor.log(dra_driver.COMPONENT)
    logged_before = log.stat().st_size
    try:
        raised = cluster.up(testbed.state_dir, nodes=before.nodes, driver_values=values, echo=False)
        assert raised.driver_values == values
        assert cluster.Testbed.load(testbed.state_dir) == raised
        pid = supervisor.pid(dra_driver.COMPONENT)
        assert dra_driver.client_limits(supervisor.environment(dra_driver.COMPONENT)) == {
            "KUBE_API_QPS": "50",
            "KUBE_API_BURST": "100",
        }
        cluster.up(testbed.state_dir, nodes=before.nodes, driver_values=values, echo=False)
        assert supervisor.pid(dra_driver.COMPONENT) == pid
        # The restarted controller works, and had read its limits from that environment when it started.
        create_domain(api, ns, "cd-raised")
        testing.wait_for(lambda: claim_template(api, ns, "cd-raised-channel"), what="the claim template", timeout=30)
        with log.open("rb") as logged:
            logged.seek(logged_before)
            assert b"KubeAPIQPS: (float64) 50," in logged.read()
    finally:
        cluster.up(testbed.state_dir, nodes=before.nodes, driver_values=before.driver_values, echo=False)
    assert supervisor.pid(dra_driver.COMPONENT) != pid
    assert dra_driver.client_limits(supervisor.environment(dra_driver.COMPONENT)) == limits_before


def test_one_node_cannot_hold_two_channel_claims(api: kube.Kube, ns: str) -> None:
    create_domain(api, ns, "cd-b")
    testing.wait_for(lambda: claim_template(api, ns, "cd-b-channel"), what="the claim template", timeout=30)
    for index in range(2):
        create(api, ns, "v1", "pods", channel_pod(f"pinned-{index}", "cd-b-channel", node="gb200-007"))

    def outcome() -> tuple[int, int]:
        found = testing.pods(api, ns)
        unschedulable = sum(
            1
            for pod in found
            for condition in pod.get("status", {}).get("conditions", [])
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable"
        )
        return len(testing.running(found)), unschedulable

    testing.wait_for(
        lambda: outcome() == (1, 1),
        what="one pod placed on the node and the other unschedulable",
        state=testing.state_of(lambda: [pod.get("status") for pod in testing.pods(api, ns)]),
        timeout=90,
    )


def test_deleting_a_domain_tears_it_down_at_once_and_names_the_pods_still_using_it(api: kube.Kube, ns: str) -> None:
    create_domain(api, ns, "cd-c")
    testing.wait_for(lambda: claim_template(api, ns, "cd-c-channel"), what="the claim template", timeout=30)
    domain_path = kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name="cd-c")
    # Someone else's finalizer must not delay the driver's teardown.
    api.request(
        "PATCH",
        domain_path,
        body=[{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/keep"}],
        content_type=kube.JSON_PATCH,
    )
    create(api, ns, "v1", "pods", channel_pod("user", "cd-c-channel"))
    wait_running(api, ns, 1, "the user pod Running")
    api.request("DELETE", domain_path)
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
    remaining = testing.wait_for(
        lambda: (
            (domain := api.get(CD_API, keys.COMPUTE_DOMAIN_PLURAL, "cd-c", namespace=ns))
            and domain["metadata"]["finalizers"] == ["example.com/keep"]
            and domain
        ),
        what="only the foreign finalizer left",
        timeout=30,
    )
    assert remaining["metadata"]["deletionTimestamp"]
    assert daemon_sets(api, remaining["metadata"]["uid"]) == []
    # Nothing stops the pod: on a real node its IMEX daemon is gone (CUDA error 719); here it runs on, its claim
    # allocated from a template that no longer exists.
    [user] = testing.running(testing.pods(api, ns))
    [claim] = api.list_objects(DRA_API, "resourceclaims", namespace=ns)
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "channel-0"
    assert claim["metadata"]["ownerReferences"][0]["name"] == user["metadata"]["name"]
    api.request("PATCH", domain_path, body={"metadata": {"finalizers": None}}, content_type=kube.MERGE_PATCH)


def test_a_disaggregatedset_gets_child_leaderworkersets_and_pods_from_upstream(api: kube.Kube, ns: str) -> None:
    roles = [{"name": "prefill", "spec": lws_spec(1, 2)}, {"name": "decode", "spec": lws_spec(1, 1)}]
    ds = {"apiVersion": DS_API, "kind": "DisaggregatedSet", "metadata": {"name": "llm"}, "spec": {"roles": roles}}
    create(api, ns, DS_API, "disaggregatedsets", ds)

    def children() -> list[kube.Object]:
        return api.list_objects(LWS_API, "leaderworkersets", namespace=ns)

    found = testing.wait_for(
        lambda: items if len(items := children()) == 2 else None,
        what="two child LeaderWorkerSets",
        state=testing.state_of(children),
        timeout=90,
    )
    [revision] = {item["metadata"]["labels"][keys.DS_REVISION_LABEL] for item in found}
    assert sorted(item["metadata"]["name"] for item in found) == [
        f"llm-0-{revision}-decode",
        f"llm-0-{revision}-prefill",
    ]
    for item in found:
        assert item["metadata"]["labels"][keys.DS_SLICE_LABEL] == "0"
        owner = item["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("DisaggregatedSet", "llm", True)
    wait_running(api, ns, 3, "3 pods Running (prefill 1 group of 2, decode 1 group of 1)")


def test_up_without_the_third_party_directory_stops_at_once_naming_what_is_missing(tmp_path: pathlib.Path) -> None:
    """Where the Go module proxy refuses LWS v0.10.0 (here: an empty file proxy, so the test means the same on every
    machine) and no directory is named, the message names the module, the version and the variable."""
    empty_proxy = tmp_path / "proxy"
    empty_proxy.mkdir()
    environment = {key: value for key, value in os.environ.items() if key != thirdparty.ENVIRONMENT_VARIABLE}
    environment["GOPROXY"] = empty_proxy.as_uri()
    command = [sys.executable, "-m", "mnnvl_testbed.cli", "--state-dir", str(tmp_path / "state"), "up"]
    finished = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 1
    assert finished.stderr.startswith(
        "mnnvl-testbed up failed: sigs.k8s.io/lws v0.10.0 is not served by the Go module proxy ("
    )
    assert finished.stderr.endswith(
        ") and MNNVL_TESTBED_THIRD_PARTY is not set: set it to a directory holding lws-v0.10.0-src.tar.gz "
        "(sha256 88e76b33e0891784f588fa21e00d70d516ef39891cc7d906808ae2571e650ea6), or use a GOPROXY that serves "
        "sigs.k8s.io/lws@v0.10.0\n"
    )
    assert not (tmp_path / "state").exists()  # nothing was started, built or written


def test_a_running_testbed_refuses_another_clique_size_and_stays_as_it_is(testbed: cluster.Testbed) -> None:
    other = testbed.nodes_per_clique + 1
    before = cluster.Testbed.load(testbed.state_dir)
    with pytest.raises(cluster.TestbedError) as refused:
        cluster.up(testbed.state_dir, nodes=testbed.nodes, nodes_per_clique=other, echo=False)
    assert str(refused.value) == (
        f"the testbed in {testbed.state_dir} runs {testbed.nodes_per_clique} nodes per clique, not {other}: "
        "stop it first (mnnvl-testbed down), or use another --state-dir"
    )
    assert cluster.is_running(testbed.state_dir)
    assert cluster.Testbed.load(testbed.state_dir) == before


def test_a_component_that_exits_is_started_again_as_a_kubelet_would(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """kube-scheduler exits on purpose when it finds its cache corrupted (the chaos run's API server restarts
    provoke it); the chaos run starts such components again, and scheduling goes on."""
    supervisor = processes.Supervisor(testbed.state_dir)
    assert supervisor.kill("kube-scheduler") is not None
    assert not supervisor.alive("kube-scheduler")
    assert cluster.restart_exited(testbed) == ["kube-scheduler"]
    assert cluster.restart_exited(testbed) == []  # nothing else had exited, and it runs now
    create(api, ns, "v1", "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after"},
                                   "spec": {"containers": [container("app")]}})  # fmt: skip
    wait_running(api, ns, 1, "a pod scheduled by the restarted kube-scheduler")
