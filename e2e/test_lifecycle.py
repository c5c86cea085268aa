"""Lifecycle and Operational Behavior: rollouts, restarts, scaling, ownership and cleanup."""

from __future__ import annotations

from mnnvl_api import events, keys
from mnnvl_runtime import kube
from mnnvl_testbed import controllers, testing

from . import workloads


def uids(pods: list[kube.Object]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def test_a_restarted_or_replaced_group_gets_a_new_compute_domain(api: kube.Kube, ns: str) -> None:
    """A restarted or replaced group gets a new ComputeDomain."""
    workloads.create_lws(api, ns, workloads.lws_manifest("restart", replicas=2, size=2))
    running = workloads.wait_groups_running(api, ns, "restart", replicas=2, size=2)
    before = workloads.group_domains(running)
    workloads.restart_group(api, ns, "restart", 1)
    after = workloads.wait_group_restarted(api, ns, "restart", 1, before, replicas=2, size=2)
    assert after["0"] == before["0"]
    workloads.wait_domains(api, ns, {str(after["0"]), str(after["1"])})
    [teardown] = [t for t in testing.teardowns(api, ns) if t["domain"] == before["1"]]
    assert teardown["referencing_pods"] == []


def test_rolling_updates_give_every_group_a_new_domain_and_delete_old_ones_once_unused(api: kube.Kube, ns: str) -> None:
    """The LeaderWorkerSet deletes an obsolete replica ComputeDomain once its leader Pod is gone and no Pod references it (rolling update)."""
    replaced: set[str] = set()
    new_image = "nvcr.io/nvidia/vllm:v2"
    for name, surge in (("nosurge", 0), ("surge", 1)):
        workloads.create_lws(api, ns, workloads.lws_manifest(name, replicas=2, size=2, max_surge=surge))
        before = workloads.group_domains(workloads.wait_groups_running(api, ns, name, replicas=2, size=2))
        after = workloads.roll_worker_image(api, ns, name, new_image, replicas=2, size=2)
        assert set(after.values()).isdisjoint(before.values())
        replaced |= {str(d) for d in before.values()}
        names = {str(d) for d in after.values()}

        def only_new_domains_left(name: str = name, names: set[str] = names) -> bool:
            left = {
                d
                for d, obj in workloads.domains(api, ns).items()
                if obj["metadata"]["labels"][keys.WORKLOAD_NAME_LABEL] == name
            }
            return left == names

        testing.wait_for(
            only_new_domains_left,
            what=f"{name}: only the new domains left",
            state=testing.state_of(lambda: workloads.summary(api, ns)),
            timeout=workloads.TIMEOUT,
        )
    # Surge groups (index 2 with maxSurge 1) come and go with domains of their own, deleted the same way.
    assert replaced <= {t["domain"] for t in testing.teardowns(api, ns)}


def test_scaling_down_deletes_the_removed_groups_domain_and_scaling_up_creates_one(api: kube.Kube, ns: str) -> None:
    """The LeaderWorkerSet deletes an obsolete replica ComputeDomain once its leader Pod is gone and no Pod references it (scale-down)."""
    workloads.create_lws(api, ns, workloads.lws_manifest("scale", replicas=2, size=2))
    before = workloads.group_domains(workloads.wait_groups_running(api, ns, "scale", replicas=2, size=2))
    workloads.patch_lws(api, ns, "scale", {"spec": {"replicas": 1}})
    workloads.wait_domains(api, ns, {str(before["0"])})
    assert [t["domain"] for t in testing.teardowns(api, ns)] == [before["1"]]
    workloads.patch_lws(api, ns, "scale", {"spec": {"replicas": 3}})
    after = workloads.group_domains(workloads.wait_groups_running(api, ns, "scale", replicas=3, size=2))
    assert after["0"] == before["0"]
    assert len(set(after.values())) == 3
    assert before["1"] not in after.values()
    workloads.wait_domains(api, ns, {str(d) for d in after.values()})


def test_setting_or_removing_the_annotation_triggers_a_rolling_update(api: kube.Kube, ns: str) -> None:
    """Setting or removing either auto-compute-domain annotation changes the workload revision, so it triggers a rolling update of all groups."""
    workloads.create_lws(api, ns, workloads.lws_manifest("toggle", replicas=2, size=2, opt_in=None))
    plain = workloads.wait_groups_running(api, ns, "toggle", replicas=2, size=2)
    assert all(workloads.domain_of(p) is None and not workloads.claimed_containers(p) for p in plain)
    workloads.patch_lws(
        api, ns, "toggle", {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}}}
    )

    def replaced_with_domains() -> list[kube.Object] | None:
        pods = workloads.wait_groups_running(api, ns, "toggle", replicas=2, size=2)
        return pods if uids(pods).isdisjoint(uids(plain)) and all(workloads.domain_of(p) for p in pods) else None

    opted = testing.wait_for(replaced_with_domains, what="every group rolled onto domains", timeout=workloads.TIMEOUT)
    workloads.patch_lws(
        api, ns, "toggle", {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: None}}}
    )

    def replaced_without_domains() -> list[kube.Object] | None:
        pods = workloads.wait_groups_running(api, ns, "toggle", replicas=2, size=2)
        return pods if uids(pods).isdisjoint(uids(opted)) and not any(workloads.domain_of(p) for p in pods) else None

    testing.wait_for(replaced_without_domains, what="every group rolled off domains", timeout=workloads.TIMEOUT)
    workloads.wait_domains(api, ns, set())


def test_after_opting_out_a_group_the_rollout_has_not_reached_keeps_its_revisions_claim_when_it_restarts(
    api: kube.Kube, ns: str
) -> None:
    """A pod of a revision that was opted in keeps that revision's semantics until the rollout replaces it."""
    workloads.create_lws(api, ns, workloads.lws_manifest("optout", replicas=3, size=2, max_surge=0))
    running = workloads.wait_groups_running(api, ns, "optout", replicas=3, size=2)
    before = workloads.group_domains(running)
    [old_revision] = {p["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL] for p in running}
    # Opt out; the new revision's pods fit no node (as on full cliques), so the rollout stops at its first group.
    unplaceable = {"nodeSelector": {"e2e.mnnvl.test/no-such-node": "true"}}
    workloads.patch_lws(
        api,
        ns,
        "optout",
        {
            "metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: None}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": unplaceable}}},
        },
    )

    def rollout_under_way() -> bool:
        leader = api.get("v1", "pods", "optout-2", namespace=ns)
        return (
            leader is not None and leader["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL] != old_revision
        )

    testing.wait_for(
        rollout_under_way,
        what="group 2 recreated at the new revision (and Pending)",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=workloads.TIMEOUT,
    )
    [old_leader] = [p["metadata"]["uid"] for p in running if p["metadata"]["name"] == "optout-0"]
    api.request("DELETE", kube.path_of("v1", "pods", namespace=ns, name="optout-0"))

    def group_0_restarted() -> list[kube.Object] | None:
        pods = [p for p in workloads.lws_pods(api, ns, "optout") if p["metadata"]["name"].startswith("optout-0")]
        fresh = [p for p in testing.running(pods) if not p["metadata"].get("deletionTimestamp")]
        leaders = [p for p in fresh if p["metadata"]["name"] == "optout-0" and p["metadata"]["uid"] != old_leader]
        return fresh if leaders and len(fresh) == len(pods) == 2 and not any(map(workloads.is_gated, fresh)) else None

    restarted = testing.wait_for(
        group_0_restarted,
        what="group 0 recreated from the old revision, running on a new domain",
        state=testing.state_of(lambda: workloads.summary(api, ns)),
        timeout=workloads.TIMEOUT,
    )
    [new_domain] = set(workloads.group_domains(restarted).values())
    assert new_domain is not None
    assert new_domain != before["0"]
    for pod in restarted:
        assert pod["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL] == old_revision
        assert workloads.claimed_containers(pod) == ["vllm"]
    # The old incarnation's domain goes once unused, and so does that of group 2 (rolled off domains); group 1's
    # stays under its running pods (the namespace fixture also requires that no domain went under a pod).
    workloads.wait_domains(api, ns, {new_domain, str(before["1"])})
    group_1 = [p for p in workloads.lws_pods(api, ns, "optout") if p["metadata"]["name"].startswith("optout-1")]
    assert {p["metadata"]["uid"] for p in group_1} <= uids(running)
    assert {t["domain"] for t in testing.teardowns(api, ns)} == {before["0"], before["2"]}


def test_unset_and_disabled_produce_the_same_revision(api: kube.Kube, ns: str) -> None:
    """Unset and "disabled" produce the same revision, so upgrading LWS does not restart existing workloads."""
    workloads.create_lws(api, ns, workloads.lws_manifest("steady", replicas=2, size=2, opt_in=None))
    before = workloads.wait_groups_running(api, ns, "steady", replicas=2, size=2)
    revision = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"] for p in before}
    updated = workloads.patch_lws(
        api, ns, "steady", {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "disabled"}}}
    )
    template_meta = updated["spec"]["leaderWorkerTemplate"]["workerTemplate"].get("metadata") or {}
    assert not template_meta.get("annotations")
    assert not template_meta.get("labels")
    # The LWS controller reconciles the update; give it a settled state to compare, then compare.
    testing.wait_for(
        lambda: (
            (lws := api.request("GET", workloads.lws_path(ns, "steady"))).get("status", {}).get("observedGeneration")
            == lws["metadata"]["generation"]
        ),
        what="upstream LWS to observe the update",
        timeout=60,
    )
    after = workloads.wait_groups_running(api, ns, "steady", replicas=2, size=2)
    assert uids(after) == uids(before)
    assert {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"] for p in after} == revision


def test_a_foreign_domain_with_the_generated_name_is_not_adopted(
    api: kube.Kube, ns: str, lws_replicas: list[controllers.Replica]
) -> None:
    """If a ComputeDomain with the generated name exists and is not managed by the same workload, LWS does not adopt it. It emits an UnexpectedComputeDomainOwner Warning event and keeps the leader gated."""
    name = workloads.leader_behind_a_foreign_domain(api, ns, lws_replicas[0])

    def warned() -> list[kube.Object]:
        found = api.list_objects("v1", "events", namespace=ns, fieldSelector=f"reason={events.UNEXPECTED_OWNER_REASON}")
        return [e for e in found if e["involvedObject"]["kind"] == "LeaderWorkerSet" and e["type"] == "Warning"]

    [event] = testing.wait_for(warned, what="an UnexpectedComputeDomainOwner Warning on the LWS", timeout=60)
    assert event["involvedObject"]["name"] == "clash"
    assert name in event["message"]
    domain = api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns)
    assert domain is not None
    assert domain["metadata"]["labels"] == {"team": "someone-else"}
    assert keys.PROTECTION_FINALIZER not in domain["metadata"].get("finalizers", [])
    assert workloads.is_gated(api.request("GET", kube.path_of("v1", "pods", namespace=ns, name="clash-0")))


def test_when_the_leaderworkerset_is_deleted_its_domains_go_once_their_last_pod_exits(api: kube.Kube, ns: str) -> None:
    """When the LeaderWorkerSet or DisaggregatedSet itself is deleted, LWS deletes its ComputeDomains once their last Pod exits."""
    workloads.create_lws(api, ns, workloads.lws_manifest("gone", replicas=2, size=2))
    domains = set(workloads.group_domains(workloads.wait_groups_running(api, ns, "gone", replicas=2, size=2)).values())
    api.request("DELETE", workloads.lws_path(ns, "gone"))
    workloads.wait_domains(api, ns, set())
    assert testing.pods(api, ns) == []
    assert {t["domain"] for t in testing.teardowns(api, ns)} == domains
