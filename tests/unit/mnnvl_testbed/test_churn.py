"""The chaos run's churn, its pure part: what it chooses always fits the testbed and applies to its target, and a
workload reads back from its manifest as it was written (the churn re-reads its world from the API each step)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_testbed import churn

NAMESPACES = ("chaos-a-1", "chaos-b-1")


def applied(world: list[churn.Workload], operation: churn.Operation) -> list[churn.Workload]:
    """The world after `operation` succeeded, as the API would have it."""
    rest = [
        w
        for w in world
        if operation.before is None or (w.namespace, w.name) != (operation.before.namespace, operation.before.name)
    ]
    return rest + ([operation.after] if operation.after is not None else [])


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), steps=st.integers(1, 60), failures=st.sets(st.integers(0, 59)))
def test_the_churn_stays_within_the_testbed_and_each_operation_applies_to_its_target(
    seed: int, steps: int, failures: set[int]
) -> None:
    rng = random.Random(seed)
    world: list[churn.Workload] = []
    for serial in range(steps):
        operation = churn.next_operation(rng, world, serial, NAMESPACES)
        before, after = operation.before, operation.after
        if operation.action == "create":
            assert before is None
            assert after is not None
            assert after.namespace in NAMESPACES
            assert after.name.endswith(f"-{serial}")
            assert after.never_opted_in == (not after.opted_in)
        else:
            assert before in world
        if operation.action in ("scale", "restart-group", "delete-worker"):
            assert (before is not None and before.kind == churn.LWS) or operation.action == "restart-group"
        if operation.action == "delete-worker":
            assert before is not None
            assert before.size > 1
        if operation.action == "change-slices":
            assert before is not None
            assert after is not None
            assert before.kind == after.kind == churn.DS
            assert after.replicas >= 1
            assert after.replicas != before.replicas
        if operation.action == "recreate":
            assert after is not None
            assert before is not None
            assert (after.name, after.kind) == (before.name, before.kind)
        if operation.action == "toggle-opt-in":
            assert after is not None
            assert before is not None
            assert after.opted_in != before.opted_in
            assert not after.never_opted_in
        if serial not in failures:  # a refused or lost call leaves the world as it was
            world = applied(world, operation)
        assert sum(w.channel_pods for w in world) <= churn.CAPACITY


def test_a_plain_operation_is_one_about_a_workload_never_opted_in() -> None:
    plain = churn.Workload(
        kind=churn.LWS, namespace="n", name="plain-lws-1", shape="gpu-leader", opted_in=False, never_opted_in=True,
        replicas=1, size=2,
    )  # fmt: skip
    opting_in = dataclasses.replace(plain, opted_in=True, never_opted_in=False)
    assert churn.Operation(action="scale", before=plain, after=plain).plain
    assert not churn.Operation(action="toggle-opt-in", before=plain, after=opting_in).plain
    assert not churn.Operation(action="delete", before=opting_in, after=None).plain


workloads = st.builds(
    churn.Workload,
    kind=st.sampled_from([churn.LWS, churn.DS]),
    namespace=st.sampled_from(NAMESPACES),
    name=st.sampled_from(["lws-3", "plain-ds-4"]),
    shape=st.sampled_from(churn.LWS_SHAPES + churn.DS_SHAPES),
    opted_in=st.booleans(),
    never_opted_in=st.booleans(),
    replicas=st.integers(1, 3),
    size=st.integers(1, 3),
    revision=st.integers(0, 20),
).map(lambda w: dataclasses.replace(w, size=0) if w.kind == churn.DS else w)


@given(workload=workloads)
def test_a_workload_reads_back_from_its_manifest_as_written(workload: churn.Workload) -> None:
    manifest = churn.manifest(workload, "run-1")
    assert manifest["metadata"]["labels"] == {churn.CHURN_LABEL: "run-1"}
    assert churn.observed(manifest) == workload
    deleting = {**manifest, "metadata": {**manifest["metadata"], "deletionTimestamp": "2026-12-03T00:00:00Z"}}
    assert churn.observed(deleting) is None


def test_shapes_put_gpus_where_they_say() -> None:
    def workload(shape: str) -> churn.Workload:
        return churn.Workload(
            kind=churn.LWS, namespace="n", name="lws-1", shape=shape, opted_in=True, never_opted_in=False,
            replicas=1, size=2,
        )  # fmt: skip

    def gpu_names(containers: list[dict[str, object]]) -> list[object]:
        return [c["name"] for c in containers if keys.GPU_RESOURCE in str(c.get("resources"))]

    cpu_leader = churn.manifest(workload("cpu-leader"), "r")["spec"]["leaderWorkerTemplate"]
    assert gpu_names(cpu_leader["leaderTemplate"]["spec"]["containers"]) == []
    sidecar = churn.manifest(workload("gpu-sidecar"), "r")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert gpu_names(sidecar["containers"]) == []
    assert [(c["name"], c["restartPolicy"]) for c in sidecar["initContainers"]] == [("nccl-sidecar", "Always")]
    ds = dataclasses.replace(workload("slice-and-replica-role"), kind=churn.DS, size=0)
    encoder = churn.manifest(ds, "r")["spec"]["roles"][2]
    assert encoder["metadata"]["annotations"] == {
        keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "disabled",
        keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled",
    }


@given(workload=workloads, action=st.sampled_from(["roll", "toggle-opt-in", "scale", "change-slices"]))
def test_each_change_names_only_what_it_changes_and_reads_back(workload: churn.Workload, action: str) -> None:
    """Applied as a merge patch over the workload as it was, a change gives the workload as it should be after."""
    before = dataclasses.replace(workload, revision=max(workload.revision - 1, 0), replicas=workload.replicas % 3 + 1)
    if action == "toggle-opt-in":
        before = dataclasses.replace(workload, opted_in=not workload.opted_in, never_opted_in=not workload.opted_in)
        workload = dataclasses.replace(workload, never_opted_in=False)
    patched = merged(churn.manifest(before, "r"), churn.change(action, workload, "r"))
    expected = workload if action != "roll" else dataclasses.replace(workload, replicas=before.replicas)
    if action in ("scale", "change-slices"):
        expected = dataclasses.replace(workload, revision=before.revision)
    assert churn.observed(patched) == expected


def merged(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result
