"""Disabling the Feature Gate."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, testing

from . import workloads

#: The gate is cluster-wide: every controller reads it from the same Configuration. mnnvl-ds comes last: when it
#: starts leading it asks upstream to retry the sets whose child LeaderWorkerSets were refused before, which only
#: helps once the other webhooks those creations pass (mnnvl-lws's) are back too.
CONTROLLERS = (keys.GUARDIAN_CONTROLLER, keys.LWS_CONTROLLER, keys.DS_CONTROLLER)


@pytest.fixture
def gate_toggle(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> Iterator[None]:
    """Lets a test restart mnnvl's controllers with the gate off; afterwards they run with the gate on again."""
    yield
    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=True)


def upstream_log(testbed: cluster.Testbed) -> pathlib.Path:
    return testbed.state_dir / "logs" / "lws-manager.log"


def wait_reported_by_upstream(testbed: cluster.Testbed, refusals: list[str], *, what: str, since: int = 0) -> None:
    """Until upstream's reconciliation reports one of `refusals` after byte `since` of its log (the only place it
    reports them; it may quote the message JSON-escaped)."""
    log = upstream_log(testbed)

    def reported() -> bool:
        text = log.read_bytes()[since:].decode(errors="replace")
        return any(refusal.replace('"', '\\"') in text or refusal in text for refusal in refusals)

    testing.wait_for(
        reported,
        what=f"upstream's reconcile error naming {what}",
        state=lambda: log.read_text(errors="replace")[-3000:],
        timeout=workloads.TIMEOUT,
    )


def revision(pod: kube.Object) -> str:
    return str(pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"])


def test_with_the_gate_disabled_lws_stops_managing_compute_domains(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, gate_toggle: None
) -> None:
    """With the gate disabled, LWS stops creating ComputeDomains and injecting claims, and it no longer deletes ComputeDomains or releases the protection finalizer. Pod templates do not change when the gate is toggled, so running groups are not restarted."""
    workloads.create_lws(api, ns, workloads.lws_manifest("kept", replicas=2, size=2))
    before = workloads.wait_groups_running(api, ns, "kept", replicas=2, size=2)
    domains = set(workloads.group_domains(before).values())
    template_before = api.request("GET", workloads.lws_path(ns, "kept"))["spec"]["leaderWorkerTemplate"]

    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=False)

    # Opting in is rejected while the feature gate is disabled ...
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, workloads.lws_manifest("late")))
    assert (
        "metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Forbidden: the AutoComputeDomain feature "
        "gate is disabled; set featureGates.AutoComputeDomain=true (Helm) or AutoComputeDomain: true (Configuration), "
        "or remove the annotation"
    ) in message
    # ... objects that opted in earlier remain updatable, and their templates do not change.
    updated = workloads.patch_lws(
        api, ns, "kept", {"metadata": {"labels": {"team": "inference"}}, "spec": {"replicas": 3}}
    )
    assert updated["spec"]["leaderWorkerTemplate"] == template_before
    # New Pods of opted-in LeaderWorkerSets start without a ComputeDomain claim.
    pods = workloads.wait_groups_running(api, ns, "kept", replicas=3, size=2)
    assert {p["metadata"]["uid"] for p in before} <= {p["metadata"]["uid"] for p in pods}
    new_group = [p for p in pods if p["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL] == "2"]
    assert len(new_group) == 2
    for pod in new_group:
        assert workloads.domain_of(pod) is None
        assert workloads.claimed_containers(pod) == []
        assert revision(pod) == revision(before[0])
    # Nothing is deleted: scaling down leaves the removed group's domain in place.
    workloads.patch_lws(api, ns, "kept", {"spec": {"replicas": 1}})
    testing.wait_for(
        lambda: len(workloads.lws_pods(api, ns, "kept")) == 2,
        what="scaled down to one group",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=workloads.TIMEOUT,
    )
    assert set(workloads.domains(api, ns)) == domains
    # A ComputeDomain deleted while the gate is disabled stays Terminating: the finalizer is not released.
    [removed] = [d for d in domains if d not in {workloads.domain_of(p) for p in workloads.lws_pods(api, ns, "kept")}]
    api.request("DELETE", kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=str(removed)))

    def held_by_protection() -> kube.Object | None:
        domain = api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, str(removed), namespace=ns)
        return domain if domain and domain["metadata"].get("finalizers") == [keys.PROTECTION_FINALIZER] else None

    terminating = testing.wait_for(
        held_by_protection, what="the deleted domain Terminating, held only by the protection finalizer", timeout=30
    )
    assert terminating["metadata"]["deletionTimestamp"]

    # Re-enabling the gate: the unreferenced Terminating domain is released; running groups are untouched.
    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=True)
    testing.wait_for(
        lambda: api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, str(removed), namespace=ns) is None,
        what="the released domain gone",
        timeout=60,
    )
    remaining = workloads.wait_groups_running(api, ns, "kept", replicas=1, size=2)
    assert {p["metadata"]["uid"] for p in remaining} <= {p["metadata"]["uid"] for p in before}


def test_with_the_gate_disabled_a_disaggregatedset_creates_no_new_child_leaderworkersets_for_enrolled_roles(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, gate_toggle: None
) -> None:
    """A DisaggregatedSet enrolled in slice ComputeDomains does not create new child LeaderWorkerSets for enrolled roles (for example on scale-up or a new revision), because they would lack the claim that existing slices carry. Reconciliation reports an error until the gate is re-enabled or the annotation is removed."""
    created = workloads.create_ds(api, ns, workloads.ds_manifest("llm", slices=1))
    before = workloads.wait_slices_running(api, ns, "llm", pods_per_slice={0: 3})[0]
    revision = workloads.revision_of(before[0])
    domain = workloads.slice_domain("llm", 0, revision)
    assert set(workloads.domains(api, ns)) == {domain}

    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=False)
    workloads.patch_ds(api, ns, "llm", {"spec": {"slices": 2}})
    # Upstream does not create a slice's roles in a fixed order: whichever it tries first is refused.
    refusals = [
        f'metadata.name: Forbidden: role "{role}" of slice 1 of DisaggregatedSet "llm" is enrolled in slice '
        "ComputeDomains and the AutoComputeDomain feature gate is disabled: a new LeaderWorkerSet would lack the "
        "ComputeDomain channel the slice's others carry; set featureGates.AutoComputeDomain=true (Helm) or "
        "AutoComputeDomain: true (Configuration), or remove disaggregatedset.x-k8s.io/auto-compute-domain from the "
        "DisaggregatedSet"
        for role in ("prefill", "decode")
    ]
    # Upstream's reconciliation reports the refusal (its log is the only place it does) ...
    wait_reported_by_upstream(testbed, refusals, what="the refused LeaderWorkerSet of slice 1")
    # ... and creates no LeaderWorkerSet for slice 1; the running slice, its pods and its domain are untouched.
    assert {workloads.slice_of(c) for c in workloads.children(api, ns, "llm")} == {0}
    pods = workloads.ds_pods(api, ns, "llm")
    assert {p["metadata"]["uid"] for p in pods} == {p["metadata"]["uid"] for p in before}
    assert all(not workloads.is_gated(p) for p in pods)
    found = workloads.domains(api, ns)
    assert set(found) == {domain}
    assert not found[domain]["metadata"].get("deletionTimestamp")
    assert keys.PROTECTION_FINALIZER in found[domain]["metadata"]["finalizers"]

    # Re-enabling the gate unblocks the scale-up: slice 1 gets its LeaderWorkerSets, domain and pods.
    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=True)
    both = workloads.wait_slices_running(api, ns, "llm", pods_per_slice={0: 3, 1: 3})
    assert {p["metadata"]["uid"] for p in both[0]} == {p["metadata"]["uid"] for p in before}
    assert {workloads.domain_of(p) for p in both[1]} == {workloads.slice_domain("llm", 1, revision)}
    assert (
        workloads.domains(api, ns)[workloads.slice_domain("llm", 1, revision)]["metadata"]["labels"][
            keys.OWNER_UID_LABEL
        ]
        == created["metadata"]["uid"]
    )


def test_with_the_gate_disabled_a_disaggregatedset_keeps_its_domains_and_removing_the_annotation_unblocks_it(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, gate_toggle: None
) -> None:
    """With the gate disabled nothing is deleted and no finalizer released, also for slice ComputeDomains; the refusal of new child LeaderWorkerSets lasts until the gate is re-enabled or the annotation is removed: removing it lets upstream create them (without the claim), and the running slice is untouched."""
    workloads.create_ds(api, ns, workloads.ds_manifest("llm", slices=2))
    before = workloads.wait_slices_running(api, ns, "llm", pods_per_slice={0: 3, 1: 3})
    revision = workloads.revision_of(before[0][0])
    domain_0, domain_1 = (workloads.slice_domain("llm", s, revision) for s in (0, 1))
    assert set(workloads.domains(api, ns)) == {domain_0, domain_1}

    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=False)
    # Slices shrink: upstream deletes slice 1's LeaderWorkerSets, its pods go, and its domain stays.
    workloads.patch_ds(api, ns, "llm", {"spec": {"slices": 1}})
    testing.wait_for(
        lambda: {workloads.slice_of(p) for p in workloads.ds_pods(api, ns, "llm")} == {0},
        what="slice 1's pods gone",
        state=testing.state_of(lambda: workloads.ds_summary(api, ns, "llm")),
        timeout=workloads.TIMEOUT,
    )
    assert set(workloads.domains(api, ns)) == {domain_0, domain_1}
    # Deleted by hand while the gate is off, the unused domain stays Terminating: its finalizer is not released.
    api.request("DELETE", kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=domain_1))

    def held_by_protection() -> kube.Object | None:
        found = workloads.domains(api, ns).get(domain_1)
        return found if found and found["metadata"].get("finalizers") == [keys.PROTECTION_FINALIZER] else None

    held = testing.wait_for(
        held_by_protection, what=f"{domain_1} Terminating, held only by the protection finalizer", timeout=30
    )
    assert held["metadata"]["deletionTimestamp"]

    # The annotation removed (and slices raised again in the same change): the role is no longer enrolled, so
    # upstream's new LeaderWorkerSets are admitted; their pods start without a claim, and slice 0 runs on.
    annotation = keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION
    workloads.patch_ds(api, ns, "llm", {"metadata": {"annotations": {annotation: None}}, "spec": {"slices": 2}})
    after = workloads.wait_slices_running(api, ns, "llm", pods_per_slice={0: 3, 1: 3})
    assert {p["metadata"]["uid"] for p in after[0]} == {p["metadata"]["uid"] for p in before[0]}
    assert all(workloads.domain_of(p) == domain_0 for p in after[0])
    for pod in after[1]:
        assert workloads.claimed_containers(pod) == [], pod["metadata"]["name"]
        assert not workloads.is_gated(pod)
    still = workloads.domains(api, ns)
    assert set(still) == {domain_0, domain_1}
    assert not still[domain_0]["metadata"].get("deletionTimestamp")
    assert still[domain_1]["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]


def test_with_the_gate_disabled_a_child_leaderworkerset_of_an_enrolled_role_is_not_scaled_up(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, gate_toggle: None
) -> None:
    """A DisaggregatedSet enrolled in slice ComputeDomains does not create new child LeaderWorkerSets for enrolled roles (for example on scale-up or a new revision), because they would lack the claim that existing slices carry. Reconciliation reports an error until the gate is re-enabled or the annotation is removed."""
    workloads.create_ds(api, ns, workloads.ds_manifest("grow", slices=1))
    before = workloads.wait_slices_running(api, ns, "grow", pods_per_slice={0: 3})[0]
    domain = workloads.slice_domain("grow", 0, workloads.revision_of(before[0]))

    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=False)
    since = upstream_log(testbed).stat().st_size
    # One more decode group: upstream scales decode's LeaderWorkerSet up, and that is refused.
    api.request(
        "PATCH",
        workloads.ds_path(ns, "grow"),
        body=[{"op": "replace", "path": "/spec/roles/1/spec/replicas", "value": 2}],
        content_type=kube.JSON_PATCH,
    )
    refusal = (
        'spec.replicas: Forbidden: role "decode" of slice 0 of DisaggregatedSet "grow" is enrolled in slice '
        "ComputeDomains and the AutoComputeDomain feature gate is disabled: new groups of this LeaderWorkerSet "
        "would lack the ComputeDomain channel the slice's others carry"
    )
    wait_reported_by_upstream(testbed, [refusal], what="the refused scale-up of decode", since=since)
    [decode] = [c for c in workloads.children(api, ns, "grow") if workloads.role_of(c) == "decode"]
    assert decode["spec"]["replicas"] == 1
    assert {p["metadata"]["uid"] for p in workloads.ds_pods(api, ns, "grow")} == {p["metadata"]["uid"] for p in before}

    # Re-enabling the gate unblocks the scale-up: the new decode group joins the slice's domain.
    for controller in CONTROLLERS:
        controllers.start(testbed, controller, gate=True)
    grown = workloads.wait_slices_running(api, ns, "grow", pods_per_slice={0: 4})[0]
    assert {workloads.domain_of(p) for p in grown} == {domain}
    assert {p["metadata"]["uid"] for p in before} < {p["metadata"]["uid"] for p in grown}
