"""Upstream LWS v0.10.0 DisaggregatedSet slices on the testbed: one child LeaderWorkerSet per (slice, revision,
role), slices placed on NVLink cliques of their own, rollouts that drain the old revision, and removed slices.

Every pod asks for 2 of a node's 4 GPUs, so a clique of 4 nodes holds a slice (3 pods) and, while a rollout
surges, its next revision too: upstream's ExclusiveSlice affinity keeps both revisions of a slice in one clique.
"""

from __future__ import annotations

import collections
from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import testing

LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
DS_NAME = "llm"
ROLES = ("prefill", "decode")
SIZES = {"prefill": 2, "decode": 1}  # one replica per role: 3 pods per slice
PODS_PER_SLICE = sum(SIZES.values())
#: Set by upstream on an old revision's children when a rollout starts: their replicas then.
INITIAL_REPLICAS_ANNOTATION = "disaggregatedset.x-k8s.io/initial-replicas"
HOLD_FINALIZER = "mnnvl-testbed.test/hold-deletion"


def role(name: str, image: str) -> dict[str, Any]:
    container = {"name": "vllm", "image": image, "resources": {"limits": {keys.GPU_RESOURCE: "2"}}}
    return {
        "name": name,
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": SIZES[name], "workerTemplate": {"spec": {"containers": [container]}}},
        },
    }


def disaggregated_set(slices: int) -> dict[str, Any]:
    return {
        "apiVersion": DS_API,
        "kind": "DisaggregatedSet",
        "metadata": {"name": DS_NAME},
        "spec": {
            "slices": slices,
            "placementPolicy": {"type": "ExclusiveSlice", "topology": keys.GPU_CLIQUE_LABEL},
            "roles": [role(name, "registry.example/vllm:1") for name in ROLES],
        },
    }


def ds_path(ns: str) -> str:
    return kube.path_of(DS_API, keys.DS_PLURAL, namespace=ns, name=DS_NAME)


def children(api: kube.Kube, ns: str) -> dict[str, dict[str, str]]:
    """Each child LeaderWorkerSet not being deleted: name → its (slice, revision, role) labels and replicas."""
    return {
        lws["metadata"]["name"]: {
            "slice": lws["metadata"]["labels"][keys.DS_SLICE_LABEL],
            "revision": lws["metadata"]["labels"][keys.DS_REVISION_LABEL],
            "role": lws["metadata"]["labels"][keys.DS_ROLE_LABEL],
            "replicas": str(lws["spec"]["replicas"]),
        }
        for lws in api.list_objects(LWS_API, "leaderworkersets", namespace=ns)
        if not lws["metadata"].get("deletionTimestamp")
    }


def one_revision_per_slice(found: dict[str, dict[str, str]], slices: int) -> dict[str, str] | None:
    """slice → revision once exactly one child per (slice, role) exists at full scale, all slices alike."""
    per_slice = {(child["slice"], child["role"]): child for child in found.values()}
    expected = {(str(slice_index), name) for slice_index in range(slices) for name in ROLES}
    if len(found) != len(expected) or set(per_slice) != expected:
        return None
    if any(child["replicas"] != "1" for child in found.values()):
        return None
    revisions = {child["slice"]: child["revision"] for child in found.values()}
    if any(child["revision"] != revisions[child["slice"]] for child in found.values()):
        return None
    return revisions


def wait_children(api: kube.Kube, ns: str, slices: int, *, not_revision: str | None = None) -> str:
    """Wait for one child per (slice, role) at one revision (other than `not_revision`); return that revision."""

    def settled() -> str | None:
        revisions = one_revision_per_slice(children(api, ns), slices)
        if revisions is None or len(set(revisions.values())) != 1:
            return None
        [revision] = set(revisions.values())
        return revision if revision != not_revision else None

    return testing.wait_for(
        settled,
        what=f"one child LeaderWorkerSet per (slice, role) for {slices} slices at one revision",
        state=testing.state_of(lambda: children(api, ns)),
        timeout=180,
    )


def wait_pods(api: kube.Kube, ns: str, revision: str, slices: int) -> list[kube.Object]:
    """Wait until exactly the pods of `revision` run, `PODS_PER_SLICE` per slice, and no other pod is left."""
    expected = slices * PODS_PER_SLICE

    def settled() -> list[kube.Object] | None:
        found = testing.pods(api, ns)
        running = testing.running(found)
        if len(found) == expected == len(running) and all(
            pod["metadata"]["labels"].get(keys.DS_REVISION_LABEL) == revision for pod in running
        ):
            return running
        return None

    return testing.wait_for(
        settled,
        what=f"{expected} pods of revision {revision} Running and no others",
        state=testing.state_of(lambda: testing.placement(testing.pods(api, ns))),
        timeout=240,
    )


def cliques_by_slice(api: kube.Kube, pods: list[kube.Object]) -> dict[str, set[str]]:
    clique_of_node = {
        node["metadata"]["name"]: node["metadata"]["labels"][keys.GPU_CLIQUE_LABEL]
        for node in api.list_objects("v1", "nodes")
    }
    by_slice: dict[str, set[str]] = collections.defaultdict(set)
    for pod in pods:
        by_slice[pod["metadata"]["labels"][keys.DS_SLICE_LABEL]].add(clique_of_node[pod["spec"]["nodeName"]])
    return dict(by_slice)


def hold_deletion(api: kube.Kube, ns: str, names: list[str]) -> None:
    """Keep these LeaderWorkerSets readable once deleted, to see the state they were deleted in."""
    for name in names:
        path = kube.path_of(LWS_API, "leaderworkersets", namespace=ns, name=name)
        api.request("PATCH", path, body={"metadata": {"finalizers": [HOLD_FINALIZER]}}, content_type=kube.MERGE_PATCH)


def wait_deleted_as_held(api: kube.Kube, ns: str, names: list[str]) -> dict[str, kube.Object]:
    def deleted() -> dict[str, kube.Object] | None:
        found = {lws["metadata"]["name"]: lws for lws in api.list_objects(LWS_API, "leaderworkersets", namespace=ns)}
        held = {name: found[name] for name in names if name in found}
        return (
            held
            if len(held) == len(names) and all(lws["metadata"].get("deletionTimestamp") for lws in held.values())
            else None
        )

    return testing.wait_for(
        deleted,
        what=f"{names} deleted by the DisaggregatedSet controller",
        state=testing.state_of(lambda: api.list_objects(LWS_API, "leaderworkersets", namespace=ns)),
        timeout=240,
    )


def release(api: kube.Kube, ns: str, names: list[str]) -> None:
    for name in names:
        path = kube.path_of(LWS_API, "leaderworkersets", namespace=ns, name=name)
        api.request("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=kube.MERGE_PATCH)


def test_two_slices_get_a_child_per_role_each_on_a_clique_of_its_own(api: kube.Kube, ns: str) -> None:
    created = api.request("POST", kube.path_of(DS_API, keys.DS_PLURAL, namespace=ns), body=disaggregated_set(slices=2))
    revision = wait_children(api, ns, slices=2)
    found = api.list_objects(LWS_API, "leaderworkersets", namespace=ns)
    assert sorted(lws["metadata"]["name"] for lws in found) == sorted(
        f"{DS_NAME}-{slice_index}-{revision}-{name}" for slice_index in (0, 1) for name in ROLES
    )
    for lws in found:
        assert lws["metadata"]["labels"][keys.DS_NAME_LABEL] == DS_NAME
        [owner] = lws["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "DisaggregatedSet",
            created["metadata"]["uid"],
            True,
        )

    first = wait_pods(api, ns, revision, slices=2)
    placed = cliques_by_slice(api, first)
    assert sorted(placed) == ["0", "1"]
    assert all(len(cliques) == 1 for cliques in placed.values()), placed
    assert placed["0"] != placed["1"]

    # A new image in one role is a new revision of the whole set: each slice gets the new revision's children
    # for every role, and the old ones are drained to zero, then deleted.
    old_children = sorted(lws["metadata"]["name"] for lws in found)
    hold_deletion(api, ns, old_children)
    image = "/spec/roles/0/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/image"
    api.request(
        "PATCH",
        ds_path(ns),
        body=[
            {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
            {"op": "replace", "path": image, "value": "registry.example/vllm:2"},
        ],
        content_type=kube.JSON_PATCH,
    )
    rolled = wait_children(api, ns, slices=2, not_revision=revision)
    assert sorted(children(api, ns)) == sorted(
        f"{DS_NAME}-{slice_index}-{rolled}-{name}" for slice_index in (0, 1) for name in ROLES
    )
    deleted = wait_deleted_as_held(api, ns, old_children)
    assert {name: lws["spec"]["replicas"] for name, lws in deleted.items()} == dict.fromkeys(old_children, 0)
    assert {lws["metadata"]["annotations"][INITIAL_REPLICAS_ANNOTATION] for lws in deleted.values()} == {"1"}
    release(api, ns, old_children)
    second = wait_pods(api, ns, rolled, slices=2)
    prefill_images = {
        pod["spec"]["containers"][0]["image"]
        for pod in second
        if pod["metadata"]["labels"][keys.DS_ROLE_LABEL] == "prefill"
    }
    assert prefill_images == {"registry.example/vllm:2"}
    assert cliques_by_slice(api, second) == placed  # the surge shared each slice's clique with the old revision

    # Fewer slices: the removed slice's children go; the remaining slice is left alone.
    kept = {pod["metadata"]["uid"] for pod in second if pod["metadata"]["labels"][keys.DS_SLICE_LABEL] == "0"}
    api.request("PATCH", ds_path(ns), body={"spec": {"slices": 1}}, content_type=kube.MERGE_PATCH)
    assert wait_children(api, ns, slices=1) == rolled
    remaining = wait_pods(api, ns, rolled, slices=1)
    assert {pod["metadata"]["uid"] for pod in remaining} == kept
    assert sorted(lws["metadata"]["name"] for lws in api.list_objects(LWS_API, "leaderworkersets", namespace=ns)) == [
        f"{DS_NAME}-0-{rolled}-{name}" for name in sorted(ROLES)
    ]
