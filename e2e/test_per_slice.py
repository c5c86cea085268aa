"""Option 2: Per-Slice ComputeDomain (DisaggregatedSet), the Per-Role Scope Matrix, and the lifecycle of slice
domains, on upstream LWS v0.10.0 with mnnvl-ds.

Every DisaggregatedSet here places each slice on a clique of its own (`ExclusiveSlice` on the clique label). A
testbed node has one IMEX channel, so a slice holds at most 4 pods with the channel (a clique's nodes), and roles
roll out with `maxSurge: 0`, so a slice's revisions take turns on those nodes.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from mnnvl_api import events, keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, dra_driver, processes, testing

from . import workloads

Pods = list[kube.Object]


def by_role(pods: Pods) -> dict[str, Pods]:
    found: dict[str, Pods] = {}
    for pod in pods:
        found.setdefault(workloads.role_of(pod), []).append(pod)
    return found


def domain_path(ns: str, name: str) -> str:
    return kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)


@pytest.mark.image_run
def test_one_compute_domain_per_active_slice_and_revision_shared_across_enrolled_roles(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """Per DisaggregatedSet slice (disaggregatedset.x-k8s.io/auto-compute-domain: "enabled"): one ComputeDomain per active (slice, revision), shared across enrolled roles (such as prefill and decode) within the same slice."""
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.stop(dra_driver.COMPONENT)  # no driver: domains get no claim template, so enrolled pods stay gated
    try:
        created = workloads.create_ds(api, ns, workloads.ds_example())
        name = created["metadata"]["name"]

        def gated() -> Pods | None:
            pods = workloads.ds_pods(api, ns, name)
            enrolled = [p for p in pods if workloads.role_of(p) != "encoder"]
            ready = len(enrolled) == 8 and all(workloads.is_gated(p) for p in enrolled)
            return (
                pods
                if ready and {workloads.domain_of(p) for p in enrolled} <= set(workloads.domains(api, ns))
                else None
            )

        held = testing.wait_for(
            gated,
            what="every prefill and decode pod gated on an existing domain while it has no claim template",
            state=testing.state_of(lambda: workloads.ds_summary(api, ns, name)),
            timeout=workloads.TIMEOUT,
        )
        assert all(not p["spec"].get("nodeName") for p in held if workloads.role_of(p) != "encoder")
    finally:
        cluster.start_driver_part(supervisor, testbed, dra_driver.COMPONENT)

    per_slice = workloads.wait_slices_running(api, ns, name, pods_per_slice={0: 5, 1: 5})
    revisions = {s: workloads.revision_of(pods[0]) for s, pods in per_slice.items()}
    assert len(set(revisions.values())) == 1
    expected = {s: workloads.slice_domain(name, s, revision) for s, revision in revisions.items()}
    found = workloads.domains(api, ns)
    assert set(found) == set(expected.values())
    for slice_index, domain_name in expected.items():
        domain = found[domain_name]
        assert domain["spec"]["numNodes"] == 0
        assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{domain_name}-channel"
        labels = domain["metadata"]["labels"]
        assert labels[keys.OWNER_UID_LABEL] == created["metadata"]["uid"]
        assert labels[keys.SLICE_LABEL] == str(slice_index)
        assert labels[keys.REVISION_LABEL] == revisions[slice_index]
        assert labels[keys.MANAGED_BY_LABEL] == keys.DS_CONTROLLER
        assert keys.PROTECTION_FINALIZER in domain["metadata"]["finalizers"]
        assert not domain["metadata"].get("ownerReferences")
        roles = by_role(per_slice[slice_index])
        assert sorted(roles) == ["decode", "encoder", "prefill"]
        # prefill and decode share the slice's domain: the channel claim in their GPU containers ...
        for pod in roles["prefill"] + roles["decode"]:
            assert workloads.domain_of(pod) == domain_name, pod["metadata"]["name"]
            assert workloads.claimed_containers(pod) == [workloads.role_of(pod)], pod["metadata"]["name"]
            assert pod["spec"]["resourceClaims"] == [
                {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": f"{domain_name}-channel"}
            ]
        # ... and the opted-out encoder is left alone.
        [encoder] = roles["encoder"]
        assert workloads.domain_of(encoder) is None
        assert workloads.claimed_containers(encoder) == []
        assert "resourceClaims" not in encoder["spec"]
        assert keys.SCOPE_LABEL not in encoder["metadata"]["labels"]
    # Each domain existed before any pod of its slice: created as soon as the slice's first LeaderWorkerSet was.
    children = workloads.children(api, ns, name)
    for slice_index, domain_name in expected.items():
        born = found[domain_name]["metadata"]["creationTimestamp"]
        first_child = min(c["metadata"]["creationTimestamp"] for c in children if workloads.slice_of(c) == slice_index)
        assert first_child <= born
        assert all(born <= p["metadata"]["creationTimestamp"] for p in per_slice[slice_index])


def test_each_role_replica_receives_its_own_compute_domain(api: kube.Kube, ns: str) -> None:
    """Intra-role MNNVL with RDMA KV transfer: Leave disaggregatedset.x-k8s.io/auto-compute-domain unset on the DisaggregatedSet and set leaderworkerset.sigs.k8s.io/auto-compute-domain: "enabled" on individual roles in spec.roles[i].metadata.annotations. Each role replica receives its own ComputeDomain."""
    per_replica = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}
    roles = [
        workloads.role_manifest("prefill", replicas=2, annotations=per_replica),
        workloads.role_manifest("decode", gpus="1"),
    ]
    manifest = workloads.ds_manifest("intra", roles=roles, opt_in=None, placement=False)
    workloads.create_ds(api, ns, manifest)
    [pods] = workloads.wait_slices_running(api, ns, "intra", pods_per_slice={0: 3}).values()
    roles_found = by_role(pods)
    [prefill_lws] = [c for c in workloads.children(api, ns, "intra") if workloads.role_of(c) == "prefill"]
    assert prefill_lws["metadata"]["annotations"][keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] == "enabled"
    per_group = workloads.group_domains(roles_found["prefill"])
    assert sorted(per_group) == ["0", "1"]
    assert len(set(per_group.values())) == 2
    found = workloads.domains(api, ns)
    assert set(found) == set(per_group.values())
    for domain in found.values():
        assert domain["metadata"]["labels"][keys.MANAGED_BY_LABEL] == keys.LWS_CONTROLLER
        assert domain["metadata"]["labels"][keys.OWNER_UID_LABEL] == prefill_lws["metadata"]["uid"]
    for pod in roles_found["prefill"]:
        assert workloads.claimed_containers(pod) == ["vllm"]
    [decode] = roles_found["decode"]
    assert workloads.domain_of(decode) is None
    assert workloads.claimed_containers(decode) == []


def test_enrolled_roles_asking_for_per_replica_domains_bad_values_and_reserved_names_are_rejected(
    api: kube.Kube, ns: str
) -> None:
    """Reserved names: The lws-compute-domain-channel claim name and the leaderworkerset.sigs.k8s.io/compute-domain-prefix and leaderworkerset.sigs.k8s.io/compute-domain-name template annotations are managed by LWS. The admission webhook rejects them in user templates."""
    webhook = 'admission webhook "validate-disaggregatedset.mnnvl-ds.mnnvl.dev" denied the request: '
    per_replica = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}
    conflict = workloads.ds_manifest(
        "conflict",
        roles=[workloads.role_manifest("prefill"), workloads.role_manifest("decode", annotations=per_replica)],
    )
    assert workloads.rejection(lambda: workloads.create_ds(api, ns, conflict)) == webhook + (
        "spec.roles[1].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Invalid value: "
        '"enabled": role "decode" is already enrolled in the slice ComputeDomain by the DisaggregatedSet\'s '
        "disaggregatedset.x-k8s.io/auto-compute-domain, and a pod can join only one ComputeDomain; set "
        'disaggregatedset.x-k8s.io/auto-compute-domain: "disabled" on this role to give it per-replica '
        "ComputeDomains, or remove this annotation to keep it in the slice ComputeDomain"
    )
    for where, value in (("the set", "true"), ("a role", "Enabled")):
        bad = workloads.ds_manifest("bad", opt_in=value if where == "the set" else None)
        path = "metadata.annotations"
        if where == "a role":
            bad["spec"]["roles"][0]["metadata"] = {"annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: value}}
            path = "spec.roles[0].metadata.annotations"
        assert workloads.rejection(functools.partial(workloads.create_ds, api, ns, bad)) == webhook + (
            f'{path}[disaggregatedset.x-k8s.io/auto-compute-domain]: Unsupported value: "{value}": supported values: '
            '"enabled", "disabled"; or remove the annotation'
        )
    reserved: list[tuple[str, dict[str, Any], str]] = [
        (
            "workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-name]",
            {"metadata": {"annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "mine"}}},
            'Invalid value: "mine": this annotation is managed by the AutoComputeDomain feature; remove it from the '
            "template",
        ),
        (
            "workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-prefix]",
            {"metadata": {"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "mine"}}},
            'Invalid value: "mine": this annotation is managed by the AutoComputeDomain feature; remove it from the '
            "template",
        ),
        (
            "workerTemplate.spec.resourceClaims[0].name",
            {"spec": {"resourceClaims": [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "mine"}]}},
            'Invalid value: "lws-compute-domain-channel": this claim name is reserved for the automatically managed '
            "ComputeDomain channel; rename your claim",
        ),
    ]
    for field, addition, detail in reserved:
        manifest = workloads.ds_manifest("reserved")
        worker = manifest["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        for part, values in addition.items():
            worker.setdefault(part, {}).update(values)
        message = workloads.rejection(functools.partial(workloads.create_ds, api, ns, manifest))
        assert message == webhook + f"spec.roles[1].spec.leaderWorkerTemplate.{field}: {detail}"
    assert api.list_objects(workloads.DS_API, keys.DS_PLURAL, namespace=ns) == []


def test_slice_scope_without_a_placement_policy_on_the_clique_label_is_admitted_with_a_warning(
    api: kube.Kube, ns: str
) -> None:
    """Pair auto-compute-domain with placement constraints (such as leaderworkerset.sigs.k8s.io/exclusive-topology or DisaggregatedSet.spec.placementPolicy) so pods sharing a ComputeDomain co-locate on the same NVLink clique while separate domains (replicas, role-scoped domains, or surging revisions) land on distinct nodes."""
    zero = [workloads.role_manifest("prefill", replicas=0), workloads.role_manifest("decode", replicas=0)]
    _, warnings = workloads.create_ds_with_warnings(
        api, ns, workloads.ds_manifest("unplaced", roles=zero, placement=False)
    )
    assert warnings == [
        "spec.placementPolicy: slice ComputeDomains are enabled, but no placement policy keeps each slice within one "
        "nvidia.com/gpu.clique: an IMEX channel only connects GPUs within one NVLink clique, so a slice spread over "
        "several cliques cannot use its ComputeDomain; set spec.placementPolicy to type ExclusiveSlice (or "
        "ExclusiveTopology) with topology nvidia.com/gpu.clique"
    ]
    _, placed = workloads.create_ds_with_warnings(api, ns, workloads.ds_manifest("placed", roles=zero))
    assert placed == []


def test_setting_or_removing_the_annotation_changes_the_revision_and_unset_and_disabled_produce_the_same_one(
    api: kube.Kube, ns: str
) -> None:
    """Rollouts: Setting or removing either auto-compute-domain annotation changes the workload revision, so it triggers a rolling update of all groups. Unset and "disabled" produce the same revision, so upgrading LWS does not restart existing workloads."""
    # No groups: upstream still creates a child LeaderWorkerSet per (slice, revision, role), labelled with the
    # revision, and rolls to a new revision at once.
    zero = [workloads.role_manifest("prefill", replicas=0), workloads.role_manifest("decode", replicas=0)]

    def revision(name: str, *, not_in: frozenset[str] = frozenset()) -> str:
        def settled() -> str | None:
            found = workloads.children(api, ns, name)
            revisions = {workloads.revision_of(c) for c in found}
            if len(found) != 2 or len(revisions) != 1 or revisions <= not_in:
                return None
            return revisions.pop()

        return testing.wait_for(
            settled,
            what=f"both child LeaderWorkerSets of {name} at one revision, not {sorted(not_in)}",
            state=testing.state_of(lambda: workloads.children(api, ns, name)),
            timeout=60,
        )

    workloads.create_ds(api, ns, workloads.ds_manifest("unset", roles=zero, opt_in=None))
    workloads.create_ds(api, ns, workloads.ds_manifest("disabled", roles=zero, opt_in="disabled"))
    plain = revision("unset")
    assert revision("disabled") == plain

    def annotate(name: str, value: str | None, role: int | None = None) -> None:
        annotations = {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: value}
        if role is None:
            workloads.patch_ds(api, ns, name, {"metadata": {"annotations": annotations}})
            return
        stored = api.request("GET", workloads.ds_path(ns, name))
        stored["spec"]["roles"][role].setdefault("metadata", {})["annotations"] = {
            k: v for k, v in annotations.items() if v is not None
        }
        api.request("PUT", workloads.ds_path(ns, name), body=stored)

    annotate("unset", "enabled")  # setting it on the set
    enrolled = revision("unset", not_in=frozenset({plain}))
    annotate("unset", None)  # removing it
    assert revision("unset", not_in=frozenset({enrolled})) == plain
    annotate("disabled", "enabled", role=0)  # setting it on a role
    role_enrolled = revision("disabled", not_in=frozenset({plain}))
    annotate("disabled", None, role=0)  # removing it from the role
    assert revision("disabled", not_in=frozenset({role_enrolled})) == plain


def domains_in_use_exist(api: kube.Kube, ns: str, ds: str) -> Pods:
    """The pods of `ds` now, asserting that the domain each records exists and is not being deleted."""
    pods = workloads.ds_pods(api, ns, ds)
    found = workloads.domains(api, ns)
    for pod in pods:
        domain = workloads.domain_of(pod)
        if domain is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        assert domain in found, f"{pod['metadata']['name']} uses {domain}, which is gone"
        assert not found[domain]["metadata"].get("deletionTimestamp"), (
            f"{domain} deleted under {pod['metadata']['name']}"
        )
    return pods


def wait_slices(
    api: kube.Kube,
    ns: str,
    ds: str,
    slices: dict[int, int],
    seen: set[str] | None = None,
    *,
    not_revision: str | None = None,
) -> dict[int, Pods]:
    """`workloads.wait_slices_running` (at a revision other than `not_revision`), checking on every look that no
    domain a pod uses is gone or going; `seen` collects every domain that existed meanwhile."""

    def settled() -> dict[int, Pods] | None:
        pods = domains_in_use_exist(api, ns, ds)
        if seen is not None:
            seen.update(workloads.domains(api, ns))
        by_slice: dict[int, Pods] = {}
        for pod in pods:
            by_slice.setdefault(workloads.slice_of(pod), []).append(pod)
        if {s: len(p) for s, p in by_slice.items()} != slices:
            return None
        if any(p["metadata"].get("deletionTimestamp") or workloads.is_gated(p) for p in pods):
            return None
        revisions = {workloads.revision_of(p) for p in pods}
        if len(testing.running(pods)) != len(pods) or len(revisions) != 1 or not_revision in revisions:
            return None
        return by_slice

    return testing.wait_for(
        settled,
        what=f"pods of {ds} Running at one revision per slice: {slices}",
        state=testing.state_of(lambda: workloads.ds_summary(api, ns, ds)),
        timeout=240,
    )


def wait_exact_domains(api: kube.Kube, ns: str, ds: str, expected: set[str]) -> None:
    testing.wait_for(
        lambda: domains_in_use_exist(api, ns, ds) is not None and set(workloads.domains(api, ns)) == expected,
        what=f"exactly the domains {sorted(expected)}",
        state=testing.state_of(lambda: workloads.ds_summary(api, ns, ds)),
        timeout=workloads.TIMEOUT,
    )


def test_rollouts_and_slice_changes_replace_slice_domains_only_once_their_pods_are_gone(
    api: kube.Kube, ns: str
) -> None:
    """The DisaggregatedSet deletes a slice ComputeDomain once no child LeaderWorkerSet remains for its (slice, revision) and no Pod references it."""
    workloads.create_ds(api, ns, workloads.ds_manifest("llm", slices=2))
    first = wait_slices(api, ns, "llm", {0: 3, 1: 3})
    old = workloads.revision_of(first[0][0])
    wait_exact_domains(api, ns, "llm", {workloads.slice_domain("llm", s, old) for s in (0, 1)})

    # A rolling update with maxSurge: 0: each slice gets a new domain for the new revision, and the old one goes
    # only once the old revision has drained (never while a pod uses it: checked on every look, and by the
    # teardown witness, which records any teardown of a domain in use).
    workloads.set_role_image(api, ns, "llm", 0, "nvcr.io/nvidia/vllm:2")
    seen: set[str] = set()
    rolled = wait_slices(api, ns, "llm", {0: 3, 1: 3}, seen, not_revision=old)
    new = workloads.revision_of(rolled[0][0])
    assert new != old
    assert {workloads.slice_domain("llm", s, r) for s in (0, 1) for r in (old, new)} <= seen | set(
        workloads.domains(api, ns)
    )
    wait_exact_domains(api, ns, "llm", {workloads.slice_domain("llm", s, new) for s in (0, 1)})
    for slice_index, pods in rolled.items():
        assert {workloads.domain_of(p) for p in pods} == {workloads.slice_domain("llm", slice_index, new)}

    # slices 2 -> 1: upstream deletes slice 1's LeaderWorkerSets; its domain goes once its pods have.
    kept = {p["metadata"]["uid"] for p in rolled[0]}
    workloads.patch_ds(api, ns, "llm", {"spec": {"slices": 1}})
    remaining = wait_slices(api, ns, "llm", {0: 3})
    assert {p["metadata"]["uid"] for p in remaining[0]} == kept
    wait_exact_domains(api, ns, "llm", {workloads.slice_domain("llm", 0, new)})

    # slices 1 -> 3: the new slices get domains of their own.
    workloads.patch_ds(api, ns, "llm", {"spec": {"slices": 3}})
    grown = wait_slices(api, ns, "llm", {0: 3, 1: 3, 2: 3})
    wait_exact_domains(api, ns, "llm", {workloads.slice_domain("llm", s, new) for s in (0, 1, 2)})
    assert {p["metadata"]["uid"] for p in grown[0]} == kept
    for slice_index, pods in grown.items():
        assert {workloads.domain_of(p) for p in pods} == {workloads.slice_domain("llm", slice_index, new)}


def test_a_colliding_compute_domain_is_not_adopted_and_keeps_its_slice_unscaled(api: kube.Kube, ns: str) -> None:
    """Name collisions: If a ComputeDomain with the generated name exists and is not managed by the same workload, LWS does not adopt it. It emits an UnexpectedComputeDomainOwner Warning event and keeps the leader gated or the slice unscaled."""
    # The revision is a hash of the roles' templates only: a set of another name with the same roles tells it.
    zero = [workloads.role_manifest("prefill", replicas=0, size=2), workloads.role_manifest("decode", replicas=0)]
    workloads.create_ds(api, ns, workloads.ds_manifest("probe", roles=zero))
    revision = testing.wait_for(
        lambda: {workloads.revision_of(c) for c in workloads.children(api, ns, "probe")},
        what="a child LeaderWorkerSet of the probe",
        timeout=60,
    ).pop()
    api.request("DELETE", workloads.ds_path(ns, "probe"))
    foreign = workloads.slice_domain("llm", 1, revision)
    workloads.create_foreign_domain(api, ns, foreign, {"team": "someone-else"})

    created = workloads.create_ds(api, ns, workloads.ds_manifest("llm", slices=2))
    testing.wait_for(
        lambda: [
            e
            for e in workloads.events(api, ns, events.UNEXPECTED_OWNER_REASON)
            if e["involvedObject"]["uid"] == created["metadata"]["uid"] and foreign in e["message"]
        ],
        what=f"an {events.UNEXPECTED_OWNER_REASON} Warning on the DisaggregatedSet naming {foreign}",
        state=testing.state_of(lambda: workloads.events(api, ns, events.UNEXPECTED_OWNER_REASON)),
        timeout=workloads.TIMEOUT,
    )
    # The other slice runs; the colliding one has no LeaderWorkerSet, and the foreign domain is untouched.
    first = wait_slices(api, ns, "llm", {0: 3})
    assert workloads.revision_of(first[0][0]) == revision
    assert {workloads.slice_of(c) for c in workloads.children(api, ns, "llm")} == {0}
    untouched = api.request("GET", domain_path(ns, foreign))
    assert untouched["metadata"]["labels"] == {"team": "someone-else"}
    assert not untouched["metadata"].get("deletionTimestamp")
    # The same request upstream makes is refused, saying why and what to do.
    [child] = [c for c in workloads.children(api, ns, "llm") if workloads.role_of(c) == "decode"]
    copy = {
        "apiVersion": workloads.LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": child["metadata"]["name"].replace("llm-0-", "llm-1-"),
            "labels": {**child["metadata"]["labels"], keys.DS_SLICE_LABEL: "1"},
            "ownerReferences": child["metadata"]["ownerReferences"],
        },
        "spec": child["spec"],
    }
    assert workloads.rejection(lambda: workloads.create_lws(api, ns, copy)).endswith(
        f"metadata.name: Forbidden: ComputeDomain {foreign} already exists and is not managed by mnnvl; it is not "
        'adopted and slice 1 of DisaggregatedSet "llm" stays unscaled: delete or rename that ComputeDomain'
    )

    # Once the foreign domain is gone, the slice comes up on a domain of its own.
    api.request("DELETE", domain_path(ns, foreign))
    both = wait_slices(api, ns, "llm", {0: 3, 1: 3})
    assert {workloads.domain_of(p) for p in both[1]} == {foreign}
    assert workloads.domains(api, ns)[foreign]["metadata"]["labels"][keys.OWNER_UID_LABEL] == created["metadata"]["uid"]

    # Ownership and cleanup: the DisaggregatedSet deleted, its domains go once their last pod has exited.
    api.request("DELETE", workloads.ds_path(ns, "llm"))
    wait_exact_domains(api, ns, "llm", set())
    assert workloads.ds_pods(api, ns, "llm") == []


def test_a_role_scaled_by_a_disaggregatedsetrolescaler_joins_its_slice_domain_like_any_other(
    api: kube.Kube, ns: str
) -> None:
    """External scaling: roles scaled by a DisaggregatedSetRoleScaler (slices: 1) behave the same."""
    decode = workloads.role_manifest("decode")
    del decode["spec"]["replicas"]
    decode["scaling"] = {"mode": "External"}
    workloads.create_ds(
        api, ns, workloads.ds_manifest("scaled", roles=[workloads.role_manifest("prefill", size=2), decode])
    )
    [before] = wait_slices(api, ns, "scaled", {0: 3}).values()  # upstream seeds the new scaler with 1 group
    domain = workloads.slice_domain("scaled", 0, workloads.revision_of(before[0]))
    scale = kube.path_of(workloads.DS_API, "disaggregatedsetrolescalers", namespace=ns, name="scaled-decode") + "/scale"

    api.patch(scale, {"spec": {"replicas": 2}})  # what an autoscaler does
    [grown] = wait_slices(api, ns, "scaled", {0: 4}).values()
    decoders = [p for p in grown if workloads.role_of(p) == "decode"]
    assert len(decoders) == 2
    for pod in grown:
        assert workloads.domain_of(pod) == domain, pod["metadata"]["name"]
        assert workloads.claimed_containers(pod) == ["vllm"], pod["metadata"]["name"]
    assert set(workloads.domains(api, ns)) == {domain}

    api.patch(scale, {"spec": {"replicas": 1}})
    [shrunk] = wait_slices(api, ns, "scaled", {0: 3}).values()
    assert {p["metadata"]["uid"] for p in shrunk} <= {p["metadata"]["uid"] for p in grown}
    assert set(workloads.domains(api, ns)) == {domain}  # still used by the slice's other pods
