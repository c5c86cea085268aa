"""Option 2: Per-Slice ComputeDomain (DisaggregatedSet), the Per-Role Scope Matrix, and the lifecycle of slice
domains, on upstream LWS v0.10.0 with mnnvl-ds.

Every DisaggregatedSet here places each slice on a clique of its own (`ExclusiveSlice` on the clique label). A
testbed node has one IMEX channel, so a slice holds at most 4 pods with the channel (a clique's nodes), and roles
roll out with `maxSurge: 0`, so a slice's revisions take turns on those nodes.
"""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, processes, testing

from . import workloads

Pods = list[kube.Object]


def by_role(pods: Pods) -> dict[str, Pods]:
    found: dict[str, Pods] = {}
    for pod in pods:
        found.setdefault(workloads.role_of(pod), []).append(pod)
    return found


def domain_path(ns: str, name: str) -> str:
    return kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)


def test_one_compute_domain_per_active_slice_and_revision_shared_across_enrolled_roles(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    """Per DisaggregatedSet slice (disaggregatedset.x-k8s.io/auto-compute-domain: "enabled"): one ComputeDomain per active (slice, revision), shared across enrolled roles (such as prefill and decode) within the same slice."""
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.stop("dra-simulator")  # no driver: domains get no claim template, so enrolled pods stay gated
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
        command, env = cluster.simulator_command(testbed)
        supervisor.start("dra-simulator", command, env=env)

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
    for slice_index, domain_name in expected.items():
        born = found[domain_name]["metadata"]["creationTimestamp"]
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
        assert workloads.rejection(lambda bad=bad: workloads.create_ds(api, ns, bad)) == webhook + (
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
        message = workloads.rejection(lambda manifest=manifest: workloads.create_ds(api, ns, manifest))
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
