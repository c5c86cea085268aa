"""The topology seed's Grove path with the real Grove operator v0.1.0-alpha.11 and the real KAI Scheduler v0.16.7
(NVCF's pins): "Grove maps its workload hierarchy to the KAI topology through a ClusterTopologyBinding."

Grove and KAI run only for this module (`grove.ensure_running`, `kai.ensure_running`); the binding is
mnnvl-topology's. Grove alpha.11 asks KAI for a Topology of the *binding's* name (grove#828, docs/topology.md), so
the seed's PodCliqueSet, which names `nvcf-mnnvl-topology-binding`, is placed only when a Topology of that name
exists: the tests configure it as docs/topology.md tells users of that release to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from mnnvl_api import events, keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, grove, kai, testing

from . import workloads
from .test_kai_scheduler import PLACEMENT, cliques, kai_refusal
from .test_topology import BINDING, CLIQUE_AND_HOST, TOPOLOGY, run, wait_event, wait_object

#: The seed's names: the binding Grove workloads name, and the Topology the seed's binding refers to.
SEED_BINDING = "nvcf-mnnvl-topology-binding"
SEED_TOPOLOGY = "nvcf-mnnvl-topology"


@pytest.fixture(scope="module")
def grove_testbed(testbed: cluster.Testbed) -> Iterator[cluster.Testbed]:
    """The testbed with KAI's Topology CRD at v0.16.7, KAI Scheduler and the Grove operator running; both stopped
    after the module."""
    with_crds = testing.topology_crds(testbed, "kai-v0.16.7")
    try:
        kai.ensure_running(with_crds)
        grove.ensure_running(with_crds)
        yield with_crds
    finally:
        try:
            grove.stop(with_crds)
        finally:
            kai.stop(with_crds)


def binding_of(entry: dict[str, Any]) -> str:
    """The name of the binding mnnvl-topology makes for a configured topology."""
    return str(entry.get("groveBinding", {}).get("name", entry["name"] + "-binding"))


@contextlib.contextmanager
def topologies(testbed: cluster.Testbed, *entries: dict[str, Any]) -> Iterator[controllers.Replica]:
    """mnnvl-topology running with `entries`, their Topologies and bindings made; all deleted afterwards."""
    replica = run(testbed, *entries)
    api = testbed.api()
    try:
        for entry in entries:
            wait_object(api, TOPOLOGY, entry["name"])
            wait_object(api, BINDING, binding_of(entry))
        yield replica
    finally:
        controllers.stop(testbed, keys.TOPOLOGY_CONTROLLER)
        for entry in entries:
            for resource, name in ((BINDING, binding_of(entry)), (TOPOLOGY, entry["name"])):
                with contextlib.suppress(kube.ApiError):
                    api.delete(kube.path_of(*resource, name=name))


#: What docs/topology.md tells users of Grove alpha.11 to configure: a Topology named like the binding Grove
#: workloads name, its binding of the same name.
SEED_WITH_GROVE_ALPHA_11 = {"name": SEED_BINDING, "levels": CLIQUE_AND_HOST, "groveBinding": {"name": SEED_BINDING}}


def podcliqueset(name: str, ns: str, *, workers: int = 2) -> dict[str, Any]:
    """The seed's PodCliqueSet: one replica of `workers` workers (the seed's two), four GPUs each, packed in one
    `gpuclique`."""
    worker = {
        "name": "worker",
        "image": "nvcr.io/nvidia/vllm:latest",
        "resources": {"limits": {keys.GPU_RESOURCE: "4"}},
    }
    return {
        "apiVersion": keys.GROVE_API_VERSION,
        "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "template": {
                "topologyConstraint": {"topologyName": SEED_BINDING, "pack": {"required": "gpuclique"}},
                "cliques": [
                    {
                        "name": "worker",
                        "spec": {
                            "roleName": "worker",
                            "replicas": workers,
                            "minAvailable": workers,
                            "podSpec": {"containers": [worker]},
                        },
                    }
                ],
            },
        },
    }


def grove_pods(api: kube.Kube, ns: str, name: str) -> list[kube.Object]:
    return api.list_objects("v1", "pods", namespace=ns, labelSelector=f"app.kubernetes.io/part-of={name}")


def wait_in_one_clique(api: kube.Kube, ns: str, name: str) -> str:
    """Until both workers of PodCliqueSet `name` run; the one clique they run in."""
    pods = testing.wait_for(
        lambda: found if len(found := testing.running(grove_pods(api, ns, name))) == 2 else None,
        what=f"both workers of {name} placed by KAI",
        state=testing.state_of(lambda: [(p["metadata"]["name"], kai_refusal(p)) for p in grove_pods(api, ns, name)]),
        timeout=workloads.TIMEOUT,
    )
    assert {p["spec"]["schedulerName"] for p in pods} == {kai.SCHEDULER_NAME}
    clique_of = cliques(api)
    [clique] = {clique_of[p["spec"]["nodeName"]] for p in pods}
    return clique


def assert_packed_in_a_clique(api: kube.Kube, ns: str, name: str) -> None:
    """Grove's PodGang of PodCliqueSet `name` asks for the clique label, and KAI's PodGroup for it carries the
    binding's Topology with the clique label as required level: placement in one clique is KAI obeying that, not
    luck."""
    # Grove names the PodGang of a PodCliqueSet's replica `<name>-<replica index>`.
    gang = api.request(
        "GET", kube.path_of(keys.GROVE_SCHEDULER_API_VERSION, "podgangs", namespace=ns, name=f"{name}-0")
    )
    assert gang["spec"]["topologyConstraint"]["packConstraint"]["required"] == keys.GPU_CLIQUE_LABEL
    [group] = [
        g
        for g in api.list_objects(kai.PODGROUP_API, "podgroups", namespace=ns)
        if any(owner["uid"] == gang["metadata"]["uid"] for owner in g["metadata"].get("ownerReferences", []))
    ]
    constraint = group["spec"]["topologyConstraint"]
    assert (constraint["topology"], constraint["requiredTopologyLevel"]) == (SEED_BINDING, keys.GPU_CLIQUE_LABEL)
    assert group["spec"]["minMember"] == 2


def test_the_seeds_podcliqueset_is_placed_by_kai_in_one_clique(grove_testbed: cluster.Testbed, ns: str) -> None:
    """The seed's PodCliqueSet names the binding and the portable `gpuclique` domain: Grove translates it to
    nvidia.com/gpu.clique on its PodGang, KAI's podgrouper makes a gang with that required level, and KAI places the
    gang in one clique."""
    api = grove_testbed.api()
    with topologies(grove_testbed, SEED_WITH_GROVE_ALPHA_11):
        stored = api.create(podcliqueset("distributed-inference", ns), "podcliquesets")
        # Grove's defaulting webhook, registered from its chart, filled in what the seed leaves out.
        assert stored["spec"]["template"]["terminationDelay"] == "4h0m0s"
        wait_in_one_clique(api, ns, "distributed-inference")
        assert_packed_in_a_clique(api, ns, "distributed-inference")


def test_an_edited_or_deleted_binding_is_repaired_and_grove_workloads_still_land_in_one_clique(
    grove_testbed: cluster.Testbed, ns: str
) -> None:
    """mnnvl-topology owns the binding: an edit (the `gpuclique` domain renamed) is patched back and a deleted
    binding is made again, with Grove's validating webhook registered, and a PodCliqueSet created after each repair
    is packed in one clique."""
    api = grove_testbed.api()
    path = kube.path_of(*BINDING, name=SEED_BINDING)
    with topologies(grove_testbed, SEED_WITH_GROVE_ALPHA_11):
        desired = api.request("GET", path)["spec"]
        edited = [
            {**level, "domain": "rack"} if level["domain"] == "gpuclique" else level for level in desired["levels"]
        ]
        api.patch(path, {"spec": {"levels": edited}})
        wait_object(api, BINDING, SEED_BINDING, check=lambda found: found["spec"] == desired)
        api.create(podcliqueset("after-edit", ns), "podcliquesets")
        wait_in_one_clique(api, ns, "after-edit")
        assert_packed_in_a_clique(api, ns, "after-edit")

        api.delete(path)
        wait_object(api, BINDING, SEED_BINDING, check=lambda found: found["spec"] == desired)
        api.create(podcliqueset("after-delete", ns), "podcliquesets")
        wait_in_one_clique(api, ns, "after-delete")
        assert_packed_in_a_clique(api, ns, "after-delete")


def test_a_podcliqueset_no_clique_can_hold_is_refused_by_kai_and_warned_about_by_mnnvl(
    grove_testbed: cluster.Testbed, ns: str
) -> None:
    """The seed's PodCliqueSet with one worker more than a clique has nodes: KAI refuses every worker with its
    topology reason, and mnnvl-topology posts NoCliqueFitsGroup on the PodCliqueSet, what the user wrote."""
    api = grove_testbed.api()
    workers = grove_testbed.nodes_per_clique + 1
    with topologies(grove_testbed, SEED_WITH_GROVE_ALPHA_11):
        created = api.create(podcliqueset("too-wide", ns, workers=workers), "podcliquesets")
        wait_refused(api, ns, "too-wide", workers, naming=PLACEMENT.format(topology=SEED_BINDING))
        kind, _, message = wait_event(api, "too-wide", events.CLIQUE_TOO_SMALL_REASON, namespace=ns)
    assert kind == "Warning"
    assert message.startswith(f"needs {workers} nodes in one clique; "), message
    [event] = [
        e for e in api.list_objects("v1", "events", namespace=ns) if e["reason"] == events.CLIQUE_TOO_SMALL_REASON
    ]
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]


def wait_refused(api: kube.Kube, ns: str, name: str, workers: int, *, naming: str) -> None:
    """Until KAI has refused every one of the `workers` workers of PodCliqueSet `name` with a message naming
    `naming`. KAI may first refuse a pod for a passing reason (its PodGroup's subgroups not yet written), so the
    wait is for the settled verdict."""

    def messages() -> list[str]:
        return [message for p in grove_pods(api, ns, name) if (message := kai_refusal(p))]

    def refused() -> bool:
        found = messages()
        return len(grove_pods(api, ns, name)) == workers and len(found) == workers and all(naming in m for m in found)

    testing.wait_for(
        refused,
        what=f"KAI refusing all {workers} workers of {name}, naming {naming!r}",
        state=testing.state_of(
            lambda: {"placement": testing.placement(grove_pods(api, ns, name)), "refusals": messages()}
        ),
        timeout=workloads.TIMEOUT,
    )


def test_with_the_seeds_two_names_grove_alpha_11_asks_kai_for_a_topology_that_does_not_exist(
    grove_testbed: cluster.Testbed, ns: str
) -> None:
    """grove#828, as docs/topology.md says: with only the seed's Topology `nvcf-mnnvl-topology` (binding
    `nvcf-mnnvl-topology-binding` referring to it), Grove alpha.11 sends the binding's name to KAI, which finds no
    such Topology and places nothing."""
    api = grove_testbed.api()
    with topologies(grove_testbed, {"name": SEED_TOPOLOGY, "levels": CLIQUE_AND_HOST}):
        api.create(podcliqueset("distributed-inference", ns), "podcliquesets")
        wait_refused(api, ns, "distributed-inference", 2, naming=SEED_BINDING)
        [group] = api.list_objects(kai.PODGROUP_API, "podgroups", namespace=ns)
        assert group["spec"]["topologyConstraint"]["topology"] == SEED_BINDING
