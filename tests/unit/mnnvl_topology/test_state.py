"""What mnnvl-topology keeps of the cluster's pods, which pods the API server sends it, and how often it computes the
census."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import references
from mnnvl_runtime import stores as runtime_stores
from mnnvl_topology import census, state

from ..mnnvl_runtime import memory_api

UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
}


def pod(name: str, *, labels: dict[str, str] | None = None, status: Any = UNSCHEDULABLE, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {}}, "spec": spec, "status": status}


GPU = [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}}]
KAI = keys.KAI_SCHEDULER_NAME


@pytest.mark.parametrize(
    ("body", "kept", "queued"),
    [
        pytest.param(pod("web"), False, [], id="unschedulable-of-no-concern"),
        pytest.param(pod("kai", schedulerName=KAI, containers=GPU), True, [("fit", "ns", "kai")], id="kai"),
        pytest.param(pod("kai-cpu", schedulerName=KAI), False, [], id="kai-without-gpus"),
        pytest.param(
            pod("kai-web", status={"phase": "Running"}, nodeName="a1", schedulerName=KAI),
            False,
            [],
            id="kai-cpu-running",
        ),
        pytest.param(
            pod("slice", labels={keys.SCOPE_LABEL: keys.SCOPE_SLICE}, containers=GPU),
            True,
            [("fit", "ns", "slice")],
            id="slice",
        ),
        pytest.param(
            pod("lws", labels={keys.SCOPE_LABEL: keys.SCOPE_REPLICA}, containers=GPU),
            True,
            [("fit", "ns", "lws")],
            id="replica",
        ),
        pytest.param(
            pod("trainer", status={"phase": "Running"}, nodeName="a1", containers=GPU),
            True,
            [state.CENSUS],
            id="gpu-pod-running",
        ),
        pytest.param(pod("idle", status={"phase": "Running"}, nodeName="a1"), False, [], id="running-without-gpu"),
    ],
)
def test_only_pods_the_census_or_the_fit_check_needs_are_kept(
    body: dict[str, Any], kept: bool, queued: list[state.Key]
) -> None:
    stores = state.Stores()
    assert stores.apply_pod("uid", body) == queued
    resynced = stores.keys()
    assert ("uid" in stores.pods, resynced[2:]) == (kept, [key for key in queued if key[0] == state.FIT])


def test_the_census_is_computed_once_until_a_fact_it_reads_changes() -> None:
    stores = state.Stores()
    stores.apply_node("n", {"metadata": {"name": "a1", "labels": {keys.GPU_CLIQUE_LABEL: "a"}}})
    first = stores.current_census()
    assert stores.current_census() is first  # each fit check of a pass reads the same census
    # A pending pod's status changing touches nothing the census reads.
    assert stores.apply_pod("p", pod("kai", schedulerName=KAI, containers=GPU)) == [("fit", "ns", "kai")]
    assert stores.current_census() is first
    assert stores.apply_pod("t", pod("t", status={"phase": "Running"}, nodeName="a1", containers=GPU)) == [state.CENSUS]
    assert stores.current_census() is not first


def running(name: str, node: str, **labels: str) -> dict[str, Any]:
    return pod(name, labels=labels, status={"phase": "Running"}, nodeName=node, schedulerName=KAI, containers=GPU)


def test_the_running_pods_of_a_group_are_counted_per_clique_of_their_nodes() -> None:
    stores = state.Stores()
    for name, clique in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("x1", None)):
        labels = {} if clique is None else {keys.GPU_CLIQUE_LABEL: clique}
        stores.apply_node(f"uid-{name}", {"metadata": {"name": name, "labels": labels}})
    gang = {keys.GROVE_PODGANG_LABEL: "g"}
    stores.apply_pod("1", running("w-0", "a1", **gang))
    stores.apply_pod("2", running("w-1", "a2", **gang))
    stores.apply_pod("3", running("w-2", "b1", **gang))
    stores.apply_pod("4", running("w-3", "x1", **gang))  # unlabelled: outside KAI's topology
    stores.apply_pod("5", running("other", "b1", **{keys.GROVE_PODGANG_LABEL: "h"}))
    stores.apply_pod("6", pod("w-4", labels=gang, schedulerName=KAI, containers=GPU))
    pending = stores.unschedulable_pod("ns", "w-4")
    assert pending is not None
    assert stores.placed_cliques(pending, None) == {"a": 2, "b": 1}
    assert stores.placed_cliques(pending, frozenset({"w-0", "w-2"})) == {"a": 1, "b": 1}
    # A pod that finishes, is deleted, or whose node goes away no longer holds the group there.
    stores.apply_pod("1", running("w-0", "a1", **gang) | {"status": {"phase": "Succeeded"}})
    stores.apply_pod("3", None)
    stores.apply_node("uid-a2", None)
    assert stores.placed_cliques(pending, None) == {}


def test_a_node_re_registered_under_its_name_keeps_its_clique_whatever_order_the_two_arrive_in() -> None:
    stores = state.Stores()
    gang = {keys.GROVE_PODGANG_LABEL: "g"}
    node = {"metadata": {"name": "a1", "labels": {keys.GPU_CLIQUE_LABEL: "a"}}}
    stores.apply_node("old", node)
    stores.apply_node("new", node)  # a relist: the new incarnation first, then the old one dropped as gone
    stores.apply_node("old", None)
    stores.apply_pod("1", running("w-0", "a1", **gang))
    stores.apply_pod("2", pod("w-1", labels=gang, schedulerName=KAI, containers=GPU))
    pending = stores.unschedulable_pod("ns", "w-1")
    assert pending is not None
    assert stores.placed_cliques(pending, None) == {"a": 1}


def test_a_pod_recreated_under_its_name_counts_once_in_its_slice_and_its_node_once() -> None:
    stores = state.Stores()
    stores.apply_node("n", {"metadata": {"name": "a1", "labels": {keys.GPU_CLIQUE_LABEL: "a"}}})
    labels = {keys.SCOPE_LABEL: keys.SCOPE_SLICE, keys.DS_NAME_LABEL: "ds", keys.DS_SLICE_LABEL: "0",
              keys.DS_REVISION_LABEL: "r"}  # fmt: skip
    claim = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "t"}]
    terminating = pod("w-0", labels=labels, status={"phase": "Running"}, nodeName="a1", resourceClaims=claim)
    stores.apply_pod("old", terminating | {"metadata": terminating["metadata"] | {"deletionTimestamp": "now"}})
    stores.apply_pod("new", pod("w-0", labels=labels, resourceClaims=claim))
    stores.apply_pod(
        "other", pod("w-1", labels=labels, status={"phase": "Running"}, nodeName="a1", resourceClaims=claim)
    )
    assert stores.slice_size("ns", "ds", "0", "r") == 2
    pending = stores.unschedulable_pod("ns", "w-0")
    assert pending is not None
    assert stores.placed_cliques(pending, None) == {"a": 1}  # two pods on one node: one node of the clique


# --- what the API server sends: non-terminal pods only ------------------------------------------------------------

SLICE = {keys.SCOPE_LABEL: keys.SCOPE_SLICE, keys.DS_NAME_LABEL: "ds", keys.DS_SLICE_LABEL: "0",
         keys.DS_REVISION_LABEL: "r"}  # fmt: skip
CHANNEL = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "t"}]
BY_HAND = [{"name": "channel", "resourceClaimTemplateName": "by-hand"}]
RUNNING = {"phase": "Running"}
#: Every kind of pod the census or the fit check keeps while it is non-terminal.
KEPT_WHILE_LIVE = [
    pytest.param(pod("trainer", status=RUNNING, nodeName="a1", containers=GPU), id="gpu-pod"),
    pytest.param(pod("hand", status=RUNNING, nodeName="a1", resourceClaims=BY_HAND), id="hand-made-domain"),
    pytest.param(pod("w-0", labels=SLICE, status=RUNNING, nodeName="a1", resourceClaims=CHANNEL), id="slice-member"),
    pytest.param(pod("w-1", labels=SLICE, resourceClaims=CHANNEL), id="slice-unschedulable"),
    pytest.param(pod("kai", schedulerName=KAI, containers=GPU), id="kai-unschedulable"),
    pytest.param(running("db-0", "a1", **{keys.GROVE_PODGANG_LABEL: "g"}), id="placed-member"),
]


def test_the_api_server_is_asked_for_non_terminal_pods() -> None:
    assert state.POD_FIELD_SELECTOR == "status.phase!=Failed,status.phase!=Succeeded"


@pytest.mark.parametrize("phase", sorted(references.TERMINAL_PHASES))
@pytest.mark.parametrize("body", KEPT_WHILE_LIVE)
def test_a_pod_the_api_server_leaves_out_is_one_the_stores_would_forget(body: dict[str, Any], phase: str) -> None:
    """Nothing is lost by the field selector: a finished pod is kept by neither the census nor the fit check, and
    its leaving the selection (a deletion on the watch) leaves the stores as its last update did without it."""
    live = census.pod_facts(body)
    finished = body | {"status": {**body["status"], "phase": phase}}
    assert (census.worth_keeping(live), census.worth_keeping(census.pod_facts(finished))) == (True, False)
    updated, deleted = state.Stores(), state.Stores()
    for stores in (updated, deleted):
        stores.apply_node("n", {"metadata": {"name": "a1", "labels": {keys.GPU_CLIQUE_LABEL: "a"}}})
        stores.apply_pod("uid", body)
        stores.current_census()
    assert updated.apply_pod("uid", finished) == deleted.apply_pod("uid", None)
    assert (updated.pods, updated.keys(), updated.current_census()) == (
        {},
        [state.TOPOLOGIES, state.CENSUS],
        deleted.current_census(),
    )


def test_the_pod_stores_lists_are_narrowed_on_the_server_as_its_watch_is() -> None:
    """The pod store's resource carries the watch's field selector, so the API server leaves the finished pods out of
    its lists too: a terminal pod is never tracked (the watch would never report its deletion), and a tracked pod
    that has finished since is dropped by the next list."""
    found = state.Stores()
    assert found.pod_mirror.resource.field_selector == state.POD_FIELD_SELECTOR
    api = memory_api.MemoryApi()
    api.put("pods", pod("trainer", status=RUNNING, nodeName="a1", containers=GPU), manager="kubelet")
    api.put("pods", pod("done", status={"phase": "Succeeded"}, nodeName="a1", containers=GPU), manager="kubelet")
    sync = runtime_stores.StoreSync(
        api.client(keys.TOPOLOGY_CONTROLLER), [found.pod_mirror], every=3600, touched=lambda _: None
    )
    assert asyncio.run(sync.resync(found.pod_mirror))
    assert (len(found.pod_mirror), [usage.name for usage in found.pods.values()]) == (1, ["trainer"])
    api.update("pods", "ns", "trainer", lambda body: body["status"].update(phase="Failed"))
    assert asyncio.run(sync.resync(found.pod_mirror))
    assert (len(found.pod_mirror), found.pods) == (0, {})
