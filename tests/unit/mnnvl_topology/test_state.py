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
