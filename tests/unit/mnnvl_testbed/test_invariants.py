"""The chaos watcher's decisions on plain objects: each invariant caught when broken, and quiet when kept."""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_testbed import invariants

NS = "serving"
DOMAIN = "w-0-x7k2b"
TEMPLATE = f"{DOMAIN}-channel"


def pod(
    name: str,
    *,
    uid: str | None = None,
    phase: str = "Running",
    recorded: str | None = DOMAIN,
    claimed: bool = True,
    bound: bool = True,
    scope: str | None = keys.SCOPE_REPLICA,
    group: str = "0",
) -> dict[str, Any]:
    labels = {keys.LWS_NAME_LABEL: "w", keys.LWS_GROUP_INDEX_LABEL: group}
    if scope is not None:
        labels[keys.SCOPE_LABEL] = scope
    container: dict[str, Any] = {"name": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
    spec: dict[str, Any] = {"containers": [container]}
    if claimed:
        container["resources"]["claims"] = [{"name": keys.CHANNEL_CLAIM_NAME}]
        spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE}]
    if bound:
        spec["nodeName"] = "gb200-0"
    annotations = {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: recorded} if recorded else {}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def domain(*, deleting: bool = False, version: str = "1", uid: str = "uid-d") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": DOMAIN, "namespace": NS, "uid": uid, "resourceVersion": version}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "spec": {"channel": {"resourceClaimTemplate": {"name": TEMPLATE}}}}


def test_a_deletion_starting_under_a_running_pod_is_a_violation_once() -> None:
    watcher = invariants.Watcher()
    watcher.on_domain("ADDED", domain())
    watcher.on_pod("ADDED", pod("w-0"))
    found = watcher.on_domain("MODIFIED", domain(deleting=True, version="2"))
    assert [v.invariant for v in found] == ["no domain deleted under a pod"]
    assert found[0].objects == (f"{NS}/{DOMAIN}", f"{NS}/w-0")
    assert watcher.on_domain("DELETED", domain(deleting=True, version="3")) == []  # its deletion began once


def test_a_domain_deleted_at_once_under_a_pod_holding_only_its_claim_is_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", recorded=None))
    assert [v.invariant for v in watcher.on_domain("DELETED", domain())] == ["no domain deleted under a pod"]


def test_a_deletion_after_the_pods_ended_is_not_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", phase="Succeeded"))
    watcher.on_pod("ADDED", pod("w-0-1"))
    watcher.on_pod("DELETED", pod("w-0-1"))
    assert watcher.on_domain("MODIFIED", domain(deleting=True)) == []


def test_a_bound_opted_in_pod_without_its_claim_is_a_violation_a_gated_or_plain_one_is_not() -> None:
    watcher = invariants.Watcher()
    assert watcher.on_pod("ADDED", pod("gated", claimed=False, bound=False)) == []
    assert watcher.on_pod("ADDED", pod("plain", claimed=False, scope=None, recorded=None)) == []
    found = watcher.on_pod("MODIFIED", pod("gated", claimed=False))
    assert [v.invariant for v in found] == ["opted-in pod runs without its claim"]


def test_two_domains_in_one_group_are_a_violation_unless_one_pod_has_ended() -> None:
    watcher = invariants.Watcher()
    watcher.on_pod("ADDED", pod("w-0", recorded="w-0-aaaaa", phase="Failed"))
    assert watcher.on_pod("ADDED", pod("w-0-1")) == []
    found = watcher.on_pod("ADDED", pod("w-0-2", recorded="w-0-bbbbb"))
    assert [v.invariant for v in found] == ["one group, one domain"]


def test_a_write_to_a_foreign_object_is_a_violation() -> None:
    watcher = invariants.Watcher()
    watcher.watch_foreign(keys.COMPUTE_DOMAIN_PLURAL, domain(uid="foreign"))
    assert watcher.on_domain("MODIFIED", domain(uid="foreign")) == []  # a relist: same version
    found = watcher.on_domain("MODIFIED", domain(uid="foreign", version="2"))
    assert [v.invariant for v in found] == ["nothing foreign written"]
    assert watcher.violations == found
