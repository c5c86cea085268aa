"""The chaos watcher's decisions on plain objects: each invariant caught when broken, quiet when kept, and judged at
the resourceVersion the deletion started, whatever order the pod and domain watches deliver in."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_testbed import invariants

NS = "serving"
DOMAIN = "w-0-x7k2b"
TEMPLATE = f"{DOMAIN}-channel"


def pod(
    name: str,
    *,
    version: int,
    uid: str | None = None,
    phase: str = "Running",
    recorded: str | None = DOMAIN,
    claimed: bool = True,
    bound: bool = True,
    scope: str | None = keys.SCOPE_REPLICA,
    leader: bool = True,
    owner: tuple[str, str] | None = None,
    gpus: str = "4",
    deleting: bool = False,
    ds_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {
        keys.LWS_NAME_LABEL: "w",
        keys.LWS_GROUP_INDEX_LABEL: "0",
        keys.LWS_WORKER_INDEX_LABEL: "0" if leader else "1",
    }
    labels.update(ds_labels or {})
    if scope is not None:
        labels[keys.SCOPE_LABEL] = scope
    container: dict[str, Any] = {"name": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: gpus}}}
    spec: dict[str, Any] = {"containers": [container]}
    if claimed:
        container["resources"]["claims"] = [{"name": keys.CHANNEL_CLAIM_NAME}]
        spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE}]
    if bound:
        spec["nodeName"] = "gb200-0"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": str(version),
        "labels": labels,
        "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: recorded} if recorded else {},
    }
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "uid": owner[1], "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def domain(
    *, version: int, deleting: bool = False, uid: str = "uid-d", name: str = DOMAIN, managed: bool = True
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": str(version)}
    if managed:
        meta["labels"] = {keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "spec": {"channel": {"resourceClaimTemplate": {"name": TEMPLATE}}}}


def owned(kind: str, uid: str, owner: tuple[str, str]) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"uid": uid, "ownerReferences": [{"kind": owner[0], "uid": owner[1], "controller": True}]},
    }


def kinds(found: list[invariants.Violation]) -> list[str]:
    return [v.invariant for v in found]


def test_a_deletion_starting_under_a_running_pod_is_judged_once_the_pod_watch_passes_its_start() -> None:
    watcher = invariants.Watcher()
    watcher.on_domain("ADDED", domain(version=1))
    watcher.on_pod("ADDED", pod("w-0", version=2))
    assert watcher.on_domain("MODIFIED", domain(version=3, deleting=True)) == []  # the pod watch is at 2 yet
    found = watcher.progress(3)
    assert kinds(found) == [invariants.DELETED_UNDER_A_POD]
    assert found[0].objects == (f"{NS}/{DOMAIN}", f"{NS}/w-0")
    assert found[0].moment == 3
    assert watcher.on_domain("DELETED", domain(version=4, deleting=True)) == []  # its deletion began once
    assert watcher.progress(5) == []
    assert watcher.checks[invariants.DELETED_UNDER_A_POD] == 1


def test_a_pod_gone_before_the_deletion_started_is_not_a_user_though_its_event_arrives_later() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_domain("MODIFIED", domain(version=6, deleting=True))
    # The pod watch delivers the deletion (revision 5, before the domain's 6) only now.
    assert watcher.on_pod("DELETED", pod("w-0", version=5)) == []
    assert watcher.on_pod("ADDED", pod("other", version=7, recorded="another", claimed=False, gpus="0")) == []
    assert watcher.violations == []
    assert watcher.checks[invariants.DELETED_UNDER_A_POD] == 1


def test_a_pod_deleted_after_the_deletion_started_was_its_user() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_domain("MODIFIED", domain(version=6, deleting=True))
    assert kinds(watcher.on_pod("DELETED", pod("w-0", version=7))) == [invariants.DELETED_UNDER_A_POD]


def test_a_domain_deleted_at_once_under_a_pod_holding_only_its_claim_is_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2, recorded=None))
    assert kinds(watcher.on_domain("DELETED", domain(version=3))) == []
    assert kinds(watcher.progress(3)) == [invariants.DELETED_UNDER_A_POD]


def test_a_deletion_the_pod_watch_never_reached_is_inconclusive_not_judged() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_domain("MODIFIED", domain(version=8, deleting=True))
    assert watcher.finish() == []
    assert watcher.violations == []
    assert len(watcher.inconclusive) == 1


def test_finished_pods_pods_elsewhere_and_pods_made_after_the_start_are_not_users() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2, phase="Succeeded"))
    elsewhere = pod("w-9", version=3)
    elsewhere["metadata"]["namespace"] = "other"
    watcher.on_pod("ADDED", elsewhere)
    watcher.on_domain("MODIFIED", domain(version=4, deleting=True))
    watcher.on_pod("ADDED", pod("w-0-1", version=5))
    assert watcher.violations == []
    assert watcher.checks[invariants.DELETED_UNDER_A_POD] == 1


def test_a_pod_gone_in_a_pod_watch_gap_is_neither_a_user_nor_forgotten() -> None:
    """The pod watch broke at 3 and re-listed at 8: a domain deleted at 6 may have gone after the pod did (the
    controller was right) or before it (a violation); the watcher cannot tell, and says so."""
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_pod("ADDED", pod("w-1", version=3))
    watcher.on_domain("MODIFIED", domain(version=6, deleting=True))
    assert watcher.relisted_pods(3, 8, present=["uid-w-1"]) != []  # w-1 still holds it after the gap: certain
    assert [v.objects for v in watcher.violations] == [(f"{NS}/{DOMAIN}", f"{NS}/w-1")]
    assert len(watcher.inconclusive) == 1  # w-0: unknown


def test_a_domain_listed_already_deleting_after_a_gap_is_judged_over_the_gap() -> None:
    watcher = invariants.Watcher()
    watcher.on_domain("ADDED", domain(version=1))
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.relisting_domains(2)
    watcher.on_domain(invariants.LISTED, domain(version=6, deleting=True))  # its deletion began in (2, 6]
    assert kinds(watcher.relisted_domains(7, present=["uid-d"])) == []
    assert kinds(watcher.progress(7)) == [invariants.DELETED_UNDER_A_POD]  # w-0 referenced it throughout


def test_a_relist_forgets_the_pods_it_no_longer_lists() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_pod("ADDED", pod("w-1", version=3, recorded=None, claimed=False, gpus="0"))
    watcher.relisted_pods(0, 9, present=["uid-w-1"])
    watcher.on_domain("MODIFIED", domain(version=10, deleting=True))
    watcher.progress(10)
    assert watcher.violations == []
    assert watcher.checks[invariants.DELETED_UNDER_A_POD] == 1


def test_a_bound_opted_in_pod_lacking_its_claim_in_a_gpu_container_is_a_violation() -> None:
    watcher = invariants.Watcher()
    found = watcher.on_pod("ADDED", pod("w-0", version=1, claimed=False))
    assert kinds(found) == [invariants.RUNS_WITHOUT_CLAIM]
    assert "vllm" in found[0].detail
    assert watcher.on_pod("MODIFIED", pod("w-0", version=2, claimed=False)) == []  # reported once


@pytest.mark.parametrize(
    "change",
    [
        {"bound": False},
        {"scope": None},
        {"phase": "Failed"},
        {"gpus": "0"},
        {"gpus": "0.0"},
        {"gpus": "0m"},
    ],
    ids=["unbound", "not-opted-in", "finished", "zero-gpus", "zero-decimal", "zero-milli"],
)
def test_no_claim_is_expected_of_an_unbound_plain_finished_or_gpu_less_pod(change: dict[str, Any]) -> None:
    watcher = invariants.Watcher()
    assert watcher.on_pod("ADDED", pod("w-0", version=1, claimed=False, **change)) == []


@pytest.mark.parametrize(("text", "positive"), [("4", True), ("1k", True), ("500m", True), ("0", False), ("", True)])
def test_quantities(text: str, positive: bool) -> None:
    assert invariants.quantity_positive(text) is positive


def test_a_worker_recording_another_domain_than_its_leader_is_a_violation_once_its_statefulset_is_known() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=1, uid="leader-1"))
    worker = pod("w-0-1", version=2, leader=False, owner=("StatefulSet", "sts-1"), recorded="w-0-other")
    assert watcher.on_pod("ADDED", worker) == []  # its incarnation is not known yet
    found = watcher.on_owner("ADDED", owned("StatefulSet", "sts-1", ("Pod", "leader-1")))
    assert kinds(found) == [invariants.ONE_GROUP_ONE_DOMAIN]
    assert set(found[0].objects) == {f"{NS}/w-0-1", f"{NS}/w-0 ({DOMAIN})"}


def test_pods_of_two_incarnations_of_a_group_may_record_two_domains() -> None:
    watcher = invariants.Watcher()
    watcher.on_owner("ADDED", owned("StatefulSet", "sts-old", ("Pod", "leader-old")))
    watcher.on_pod("ADDED", pod("w-0-1", version=1, leader=False, owner=("StatefulSet", "sts-old")))
    # The leader was deleted and made again: a new incarnation, a new domain, while the old worker still runs.
    assert watcher.on_pod("ADDED", pod("w-0", version=2, uid="leader-new", recorded="w-0-new")) == []
    assert watcher.on_pod("MODIFIED", pod("w-0-1", version=3, leader=False, owner=("StatefulSet", "sts-old"))) == []
    assert watcher.checks[invariants.ONE_GROUP_ONE_DOMAIN] == 3


def test_a_slice_recording_two_domains_is_a_violation_but_a_recreated_set_is_another_incarnation() -> None:
    watcher = invariants.Watcher()
    slice_labels = {keys.DS_SLICE_LABEL: "0", keys.DS_REVISION_LABEL: "abc"}
    for lws, ds in (("lws-1", "ds-1"), ("lws-2", "ds-2"), ("lws-3", "ds-1")):
        watcher.on_owner("ADDED", owned("StatefulSet", f"sts-{lws}", ("LeaderWorkerSet", lws)))
        watcher.on_owner("ADDED", owned("LeaderWorkerSet", lws, (keys.DS_KIND, ds)))

    def slice_pod(name: str, version: int, lws: str, recorded: str) -> dict[str, Any]:
        return pod(
            name,
            version=version,
            scope=keys.SCOPE_SLICE,
            owner=("StatefulSet", f"sts-{lws}"),
            recorded=recorded,
            ds_labels=slice_labels,
        )

    watcher.on_pod("ADDED", slice_pod("prefill-0", 1, "lws-1", "s-0-abc"))
    assert watcher.on_pod("ADDED", slice_pod("again-0", 2, "lws-2", "s-0-abc-new")) == []
    assert kinds(watcher.on_pod("ADDED", slice_pod("decode-0", 3, "lws-3", "s-0-other"))) == [
        invariants.ONE_GROUP_ONE_DOMAIN
    ]


def test_a_write_to_a_foreign_object_is_a_violation_and_its_events_are_not_counted_as_ours() -> None:
    watcher = invariants.Watcher(tolerated_finalizers=frozenset({"driver/finalizer"}))
    look_alike = domain(version=1, uid="foreign")
    watcher.watch_foreign(keys.COMPUTE_DOMAIN_PLURAL, look_alike)
    assert watcher.on_domain("ADDED", look_alike) == []
    driven = domain(version=2, uid="foreign")
    driven["metadata"]["finalizers"] = ["driver/finalizer"]
    driven["status"] = {"status": "Ready"}
    assert watcher.on_domain("MODIFIED", driven) == []  # the driver's part
    guarded = domain(version=3, uid="foreign")
    guarded["metadata"]["finalizers"] = ["driver/finalizer", "mnnvl.dev/protection"]
    found = watcher.on_domain("MODIFIED", guarded)
    assert kinds(found) == [invariants.NOTHING_FOREIGN_WRITTEN]
    assert "finalizers" in found[0].detail
    watcher.on_domain("ADDED", domain(version=3, uid="ours", name="w-1-abc"))
    watcher.on_domain("DELETED", domain(version=4, uid="ours", name="w-1-abc"))
    watcher.on_domain("ADDED", domain(version=5, uid="theirs", name="mine", managed=False))
    assert (watcher.created, watcher.deleted) == ({"ours"}, {"ours"})
    assert watcher.checks[invariants.NOTHING_FOREIGN_WRITTEN] == 3


def test_a_domain_gone_in_a_watch_gap_is_judged_at_the_relist() -> None:
    watcher = invariants.Watcher()
    watcher.on_domain("ADDED", domain(version=1))
    watcher.on_domain("ADDED", domain(version=2, uid="kept", name="kept"))
    watcher.on_pod("ADDED", pod("w-0", version=3))
    watcher.relisting_domains(3)
    assert watcher.relisted_domains(9, present=["kept"]) == []  # the pod watch is at 3 yet
    assert kinds(watcher.progress(9)) == [invariants.DELETED_UNDER_A_POD]
    assert watcher.relisted_domains(10, present=["kept"]) == []  # judged once


def test_a_domain_gone_in_a_gap_after_its_pod_left_is_not_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.on_domain("ADDED", domain(version=1))
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.relisting_domains(3)
    watcher.on_pod("DELETED", pod("w-0", version=4))
    watcher.relisted_domains(9, present=[])
    watcher.progress(9)
    assert watcher.violations == []


def test_a_leaving_pod_of_the_group_may_still_record_the_old_domain() -> None:
    watcher = invariants.Watcher()
    watcher.on_owner("ADDED", owned("StatefulSet", "sts-1", ("Pod", "leader-1")))
    watcher.on_pod("ADDED", pod("w-0", version=1, uid="leader-1"))
    leaving = pod("w-0-1", version=2, leader=False, owner=("StatefulSet", "sts-1"), recorded="old", deleting=True)
    assert watcher.on_pod("ADDED", leaving) == []
    staying = pod("w-0-2", version=3, leader=False, owner=("StatefulSet", "sts-1"), recorded="old")
    assert kinds(watcher.on_pod("ADDED", staying)) == [invariants.ONE_GROUP_ONE_DOMAIN]


def test_only_a_controller_reference_makes_an_owner() -> None:
    watcher = invariants.Watcher()
    not_controller = owned("StatefulSet", "sts-1", ("Pod", "leader-1"))
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    watcher.on_owner("ADDED", not_controller)
    watcher.on_pod("ADDED", pod("w-0", version=1, uid="leader-1"))
    assert (
        watcher.on_pod("ADDED", pod("w-0-1", version=2, leader=False, owner=("StatefulSet", "sts-1"), recorded="x"))
        == []
    )


def test_a_slice_worker_reaches_its_set_through_its_leader_pod() -> None:
    watcher = invariants.Watcher()
    labels = {keys.DS_SLICE_LABEL: "0", keys.DS_REVISION_LABEL: "abc"}
    watcher.on_owner("ADDED", owned("LeaderWorkerSet", "lws-1", (keys.DS_KIND, "ds-1")))
    watcher.on_owner("ADDED", owned("StatefulSet", "leader-sts", ("LeaderWorkerSet", "lws-1")))
    watcher.on_owner("ADDED", owned("StatefulSet", "worker-sts", ("Pod", "leader-1")))
    watcher.on_pod(
        "ADDED",
        pod(
            "p-0",
            version=1,
            uid="leader-1",
            scope=keys.SCOPE_SLICE,
            owner=("StatefulSet", "leader-sts"),
            ds_labels=labels,
        ),
    )
    worker = pod(
        "p-0-1",
        version=2,
        leader=False,
        scope=keys.SCOPE_SLICE,
        owner=("StatefulSet", "worker-sts"),
        recorded="y",
        ds_labels=labels,
    )
    assert kinds(watcher.on_pod("ADDED", worker)) == [invariants.ONE_GROUP_ONE_DOMAIN]


def test_a_restartable_gpu_init_container_needs_the_claim_and_a_plain_init_container_does_not() -> None:
    watcher = invariants.Watcher()
    sidecar = pod("w-0", version=1)
    sidecar["spec"]["initContainers"] = [
        {"name": "setup", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}},
        {"name": "nccl", "restartPolicy": "Always", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}},
    ]
    found = watcher.on_pod("ADDED", sidecar)
    assert kinds(found) == [invariants.RUNS_WITHOUT_CLAIM]
    assert "['nccl']" in found[0].detail


def test_listed_pods_move_no_moment_until_the_list_is_in() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=2))
    watcher.on_domain("MODIFIED", domain(version=5, deleting=True))
    watcher.on_pod(invariants.LISTED, pod("w-1", version=9, recorded="other", claimed=False, gpus="0"))
    assert watcher.checks[invariants.DELETED_UNDER_A_POD] == 0
    assert kinds(watcher.relisted_pods(0, 9, present=["uid-w-0", "uid-w-1"])) == [invariants.DELETED_UNDER_A_POD]


def test_an_older_state_delivered_late_does_not_replace_a_newer_one() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", version=4, phase="Succeeded"))
    watcher.on_pod(invariants.LISTED, pod("w-0", version=2))
    watcher.on_domain("MODIFIED", domain(version=6, deleting=True))
    watcher.progress(6)
    assert watcher.violations == []


def test_a_foreign_object_deleted_or_made_again_under_its_name_is_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.watch_foreign("topologies", {"metadata": {"name": "t", "uid": "1", "resourceVersion": "1"}, "spec": {}})
    again = {"metadata": {"name": "t", "uid": "2", "resourceVersion": "3"}, "spec": {}}
    assert "made under its name" in watcher.on_foreign("topologies", again, "ADDED")[0].detail
    gone = {"metadata": {"name": "t", "uid": "2", "resourceVersion": "4"}, "spec": {}}
    assert "deleted" in watcher.on_foreign("topologies", gone, "DELETED")[0].detail
