"""The topology seed with the real KAI Scheduler v0.16.7 (NVCF's pin) placing the pods, through the Topology
mnnvl-topology creates: "KAI Scheduler reads a cluster-scoped Topology and places a gang in the requested domain."

KAI's scheduler, binder, podgrouper and status controllers run only for this module (`kai.ensure_running`); its
Topology comes from mnnvl-topology, its default queue is KAI's documented one.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mnnvl_api import events, keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, kai, testing

from . import workloads
from .test_topology import (
    BINDING,
    CLIQUE_AND_HOST,
    TOPOLOGY,
    reasons_about,
    run,
    wait_event,
    wait_object,
)

PLACEMENT = f"topology {{topology}}, requirement {keys.GPU_CLIQUE_LABEL} couldn't be satisfied"


@pytest.fixture(scope="module")
def kai_testbed(testbed: cluster.Testbed) -> Iterator[cluster.Testbed]:
    """The testbed with KAI's Topology CRD at v0.16.7 and KAI Scheduler running, stopped after the module."""
    with_crds = testing.topology_crds(testbed, "kai-v0.16.7")
    kai.ensure_running(with_crds)
    yield with_crds
    kai.stop(with_crds)


@pytest.fixture
def topology(kai_testbed: cluster.Testbed) -> Iterator[str]:
    """A Topology (clique, then host) that mnnvl-topology creates for this test, and deletes afterwards."""
    name = f"nvcf-mnnvl-{uuid.uuid4().hex[:6]}"
    run(kai_testbed, {"name": name, "levels": CLIQUE_AND_HOST})
    wait_object(kai_testbed.api(), TOPOLOGY, name)
    yield name
    controllers.stop(kai_testbed, keys.TOPOLOGY_CONTROLLER)
    api = kai_testbed.api()
    for resource, suffix in ((TOPOLOGY, ""), (BINDING, "-binding")):
        with contextlib.suppress(kube.ApiError):
            api.delete(kube.path_of(*resource, name=name + suffix))


def kai_annotations(topology: str) -> dict[str, str]:
    return {keys.KAI_TOPOLOGY_ANNOTATION: topology, keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: keys.GPU_CLIQUE_LABEL}


def cliques(api: kube.Kube) -> dict[str, str]:
    """node → its clique."""
    return {
        n["metadata"]["name"]: n["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for n in api.list_objects("v1", "nodes")
    }


def statefulset(name: str, replicas: int, topology: str, ns: str) -> dict[str, Any]:
    """The seed's StatefulSet: KAI's topology annotations on the StatefulSet object, its pods for KAI's queue."""
    labels = {"app": name, kai.QUEUE_LABEL: kai.DEFAULT_QUEUE}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "annotations": kai_annotations(topology)},
        "spec": {
            "podManagementPolicy": "Parallel",
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"schedulerName": kai.SCHEDULER_NAME, "containers": [workloads.VLLM]},
            },
        },
    }


def kai_refusal(pod: kube.Object) -> str | None:
    """KAI's message on a pod it could not place (PodScheduled False, reason Unschedulable)."""
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None


def pods_of(api: kube.Kube, ns: str, app: str) -> list[kube.Object]:
    return api.list_objects("v1", "pods", namespace=ns, labelSelector=f"app={app}")


def test_the_seeds_statefulset_lands_in_one_clique_and_a_pod_with_no_room_there_waits(
    kai_testbed: cluster.Testbed, topology: str, ns: str
) -> None:
    """Add the KAI topology annotations to the StatefulSet object: its pods land in one value of
    nvidia.com/gpu.clique. KAI v0.16.7 gives a StatefulSet a PodGroup of minMember 1, so it is no gang: a pod the
    clique of its siblings has no room for waits, with KAI's reason, while the others run
    (kai-scheduler/KAI-Scheduler#2098; the seed's "waits until all replicas fit" holds for gangs only)."""
    api = kai_testbed.api()
    clique_of = cliques(api)
    api.create(statefulset("web", 2, topology, ns), "statefulsets")
    placed = testing.wait_for(
        lambda: found if len(found := testing.running(pods_of(api, ns, "web"))) == 2 else None,
        what="both pods placed by KAI",
        state=testing.state_of(lambda: testing.placement(pods_of(api, ns, "web"))),
        timeout=workloads.TIMEOUT,
    )
    assert len({clique_of[p["spec"]["nodeName"]] for p in placed}) == 1
    assert {p["spec"]["schedulerName"] for p in placed} == {kai.SCHEDULER_NAME}

    per_clique = kai_testbed.nodes_per_clique
    api.create(statefulset("wide", per_clique + 1, topology, ns), "statefulsets")

    def settled() -> tuple[list[kube.Object], list[str]] | None:
        found = pods_of(api, ns, "wide")
        waiting = [message for p in found if not p["spec"].get("nodeName") and (message := kai_refusal(p))]
        running = testing.running(found)
        return (running, waiting) if running and waiting and len(running) + len(waiting) == len(found) else None

    running, waiting = testing.wait_for(
        settled,
        what="KAI placing what fits in one clique and refusing the rest",
        state=testing.state_of(lambda: [(p["metadata"]["name"], kai_refusal(p)) for p in pods_of(api, ns, "wide")]),
        timeout=workloads.TIMEOUT,
    )
    assert len({clique_of[p["spec"]["nodeName"]] for p in running}) == 1
    assert len(running) <= per_clique
    assert all(PLACEMENT.format(topology=topology) in message for message in waiting), waiting


def test_an_opted_in_leaderworkerset_scheduled_by_kai_gets_its_claims_and_one_clique_per_replica(
    kai_testbed: cluster.Testbed, topology: str, ns: str
) -> None:
    """LeaderWorkerSet pods scheduled by KAI: mnnvl injects the channel claim and the gate, KAI's podgrouper makes
    one gang (PodGroup) per replica, and once the domain is ready KAI places each gang in one clique and allocates
    its channel claims itself."""
    api = kai_testbed.api()
    manifest = workloads.lws_manifest("kai", replicas=2, size=2)
    manifest["metadata"]["labels"] = {kai.QUEUE_LABEL: kai.DEFAULT_QUEUE}
    manifest["metadata"]["annotations"].update(kai_annotations(topology))
    manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulerName"] = kai.SCHEDULER_NAME
    _, warnings = workloads.create_lws_with_warnings(api, ns, manifest)
    assert warnings == []  # KAI keeps each replica within one clique: no placement advice is due
    pods = workloads.wait_groups_running(api, ns, "kai", replicas=2, size=2)
    clique_of = cliques(api)
    per_group: dict[str, set[str]] = {}
    for pod in pods:
        assert pod["spec"]["schedulerName"] == kai.SCHEDULER_NAME
        assert workloads.claimed_containers(pod) == ["vllm"], pod["metadata"]["name"]
        per_group.setdefault(pod["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL], set()).add(
            clique_of[pod["spec"]["nodeName"]]
        )
    assert all(len(found) == 1 for found in per_group.values()), per_group
    groups = api.list_objects(kai.PODGROUP_API, "podgroups", namespace=ns)
    assert sorted((g["spec"]["minMember"], g["spec"]["topologyConstraint"]["topology"]) for g in groups) == [
        (2, topology),
        (2, topology),
    ]
    domains = workloads.group_domains(pods)
    for claim in api.list_objects("resource.k8s.io/v1", "resourceclaims", namespace=ns):
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["device"]) == (keys.COMPUTE_DOMAIN_DRIVER, "channel-0")
    assert len(set(domains.values())) == 2


def test_no_clique_fits_group_agrees_with_kais_verdict_and_both_clear_when_a_clique_frees(
    kai_testbed: cluster.Testbed, topology: str, ns: str
) -> None:
    """If Pods remain Pending, verify that one clique has enough free nodes for the entire gang: with one node of
    every clique taken, an opted-in LWS gang as large as a clique waits; KAI says why on its pods and mnnvl-topology
    posts NoCliqueFitsGroup on the workload. Freeing one node lets KAI place the whole gang there, and nothing
    more is posted."""
    api = kai_testbed.api()
    per_clique = kai_testbed.nodes_per_clique
    by_clique: dict[str, list[str]] = {}
    for node, clique in sorted(cliques(api).items()):
        by_clique.setdefault(clique, []).append(node)
    # One node of each clique taken by a pod holding a channel (the census counts channels, KAI the GPUs).
    template = workloads.domain_by_hand(api, ns, "taken")
    # VLLM's four GPUs and the channel claim: a whole node, for KAI and for the census.
    taker_container = {
        "name": "vllm",
        "image": "nvcr.io/nvidia/vllm:latest",
        "resources": {"limits": {keys.GPU_RESOURCE: "4"}, "claims": [{"name": "channel"}]},
    }
    takers = {}

    def free_node_per_clique() -> dict[str, str] | None:
        """A node nothing runs on in each clique, once there is one, so each taker runs at once: an earlier test's
        gang, its namespace being deleted, may still hold a whole clique for a few seconds."""
        occupied = {
            p["spec"].get("nodeName")
            for p in api.list_objects("v1", "pods")
            if p["status"].get("phase") in ("Pending", "Running")
        }
        free = {clique: [node for node in nodes if node not in occupied] for clique, nodes in by_clique.items()}
        return {clique: nodes[0] for clique, nodes in free.items()} if all(free.values()) else None

    chosen = testing.wait_for(
        free_node_per_clique,
        what="a free node in every clique",
        state=testing.state_of(lambda: testing.placement(api.list_objects("v1", "pods"))),
        timeout=workloads.TIMEOUT,
    )
    for index, clique in enumerate(sorted(by_clique)):
        takers[clique] = f"taker-{index}"
        node = chosen[clique]
        api.create(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": takers[clique], "namespace": ns},
             "spec": {"nodeSelector": {keys.HOSTNAME_LABEL: node},
                      "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
                      "containers": [taker_container]}},
            "pods",
        )  # fmt: skip
    testing.wait_for(
        lambda: len(testing.running(testing.pods(api, ns))) == len(by_clique),
        what="a node of every clique taken",
        state=testing.state_of(lambda: testing.placement(testing.pods(api, ns))),
        timeout=workloads.TIMEOUT,
    )

    manifest = workloads.lws_manifest("gang", replicas=1, size=per_clique, containers=[workloads.VLLM])
    manifest["metadata"]["labels"] = {kai.QUEUE_LABEL: kai.DEFAULT_QUEUE}
    manifest["metadata"]["annotations"].update(kai_annotations(topology))
    manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulerName"] = kai.SCHEDULER_NAME
    workloads.create_lws(api, ns, manifest)

    def refused() -> list[str] | None:
        found = workloads.lws_pods(api, ns, "gang")
        messages = [message for p in found if (message := kai_refusal(p))]
        return messages if len(found) == per_clique and len(messages) == per_clique else None

    verdicts = testing.wait_for(
        refused,
        what="KAI refusing every pod of the gang",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=workloads.TIMEOUT,
    )
    assert all(PLACEMENT.format(topology=topology) in message for message in verdicts), verdicts
    kind, _, message = wait_event(api, "gang", events.CLIQUE_TOO_SMALL_REASON, namespace=ns)
    assert kind == "Warning"
    assert message.startswith(f"needs {per_clique} nodes in one clique; largest free clique has {per_clique - 1}"), (
        message
    )

    freed = sorted(by_clique)[0]
    api.delete(kube.path_of("v1", "pods", namespace=ns, name=takers[freed]))
    pods = workloads.wait_groups_running(api, ns, "gang", replicas=1, size=per_clique)
    clique_of = cliques(api)
    assert {clique_of[p["spec"]["nodeName"]] for p in pods} == {freed}
    assert not any(kai_refusal(p) for p in pods)
    # One Warning for the whole wait, though KAI marked the pods again every cycle (each mark a pod event, a check).
    warnings = [m for _, reason, m in reasons_about(api, "gang", ns) if reason == events.CLIQUE_TOO_SMALL_REASON]
    assert warnings == [message]
