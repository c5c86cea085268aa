"""What mnnvl-topology keeps of the cluster's pods, and how often it computes the census."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_topology import state

UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
}


def pod(name: str, *, labels: dict[str, str] | None = None, status: Any = UNSCHEDULABLE, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {}}, "spec": spec, "status": status}


GPU = [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}}]


@pytest.mark.parametrize(
    ("body", "kept", "queued"),
    [
        pytest.param(pod("web"), False, [], id="unschedulable-of-no-concern"),
        pytest.param(pod("kai", schedulerName=keys.KAI_SCHEDULER_NAME), True, [("fit", "ns", "kai")], id="kai"),
        pytest.param(
            pod("slice", labels={keys.SCOPE_LABEL: keys.SCOPE_SLICE}), True, [("fit", "ns", "slice")], id="slice"
        ),
        pytest.param(
            pod("lws", labels={keys.SCOPE_LABEL: keys.SCOPE_REPLICA}), True, [("fit", "ns", "lws")], id="replica"
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
    first = stores.census()
    assert stores.census() is first  # each fit check of a pass reads the same census
    # A pending pod's status changing touches nothing the census reads.
    assert stores.apply_pod("p", pod("kai", schedulerName=keys.KAI_SCHEDULER_NAME)) == [("fit", "ns", "kai")]
    assert stores.census() is first
    assert stores.apply_pod("t", pod("t", status={"phase": "Running"}, nodeName="a1", containers=GPU)) == [state.CENSUS]
    assert stores.census() is not first


def running(name: str, node: str, **labels: str) -> dict[str, Any]:
    return pod(name, labels=labels, status={"phase": "Running"}, nodeName=node, schedulerName=keys.KAI_SCHEDULER_NAME)


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
    stores.apply_pod("6", pod("w-4", labels=gang, schedulerName=keys.KAI_SCHEDULER_NAME))
    pending = stores.unschedulable_pod("ns", "w-4")
    assert pending is not None
    assert stores.placed_cliques(pending, None) == {"a": 2, "b": 1}
    assert stores.placed_cliques(pending, frozenset({"w-0", "w-2"})) == {"a": 1, "b": 1}
    # A pod that finishes, is deleted, or whose node goes away no longer holds the group there.
    stores.apply_pod("1", running("w-0", "a1", **gang) | {"status": {"phase": "Succeeded"}})
    stores.apply_pod("3", None)
    stores.apply_node("uid-a2", None)
    assert stores.placed_cliques(pending, None) == {}
