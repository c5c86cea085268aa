"""The watch stores: events of two incarnations of one pod name may be handled in any order."""

from __future__ import annotations

import itertools
from typing import Any

import jsonpatch
import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains
from mnnvl_lws import planner, rules, state

from ..mnnvl_api import domain_builders
from . import build

D_OLD = "deepseek-r1-2-ccccc"
D_NEW = "deepseek-r1-2-bbbbb"


def leader(uid: str, domain: str, *, deleting: bool = False) -> dict[str, Any]:
    pod = build.pod("deepseek-r1-2", uid=uid, annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain})
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return pod


# A surge replica's leader is replaced (old → new), then the surge ends and the new leader goes too.
OLD_EVENTS = [(leader("old", D_OLD), False), (leader("old", D_OLD, deleting=True), False), (leader("old", D_OLD), True)]
NEW_EVENTS = [(leader("new", D_NEW), False), (leader("new", D_NEW), True)]


def interleavings() -> list[list[tuple[dict[str, Any], bool]]]:
    """Every merge of the two incarnations' event sequences that keeps each one's own order."""
    merged = []
    total = len(OLD_EVENTS) + len(NEW_EVENTS)
    for old_slots in itertools.combinations(range(total), len(OLD_EVENTS)):
        old, new = iter(OLD_EVENTS), iter(NEW_EVENTS)
        merged.append([next(old) if slot in old_slots else next(new) for slot in range(total)])
    return merged


@pytest.mark.parametrize("events", interleavings())
def test_whatever_the_order_no_stale_pod_keeps_an_obsolete_domain(events: list[tuple[dict[str, Any], bool]]) -> None:
    stores = state.Stores()
    stores.workload_mirror.observe(build.opted_in(), deleted=False)
    for name in (D_OLD, D_NEW):
        stores.domain_mirror.observe(domain_builders.domain_object(name, group=2), deleted=False)
    for pod, deleted in events:
        stores.pod_mirror.observe(pod, deleted=deleted)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.pods == ()
    assert planner.plan(snapshot).delete == tuple(sorted((D_OLD, D_NEW)))


def test_a_late_deletion_of_the_old_leader_does_not_hide_the_new_one() -> None:
    stores = state.Stores()
    stores.workload_mirror.observe(build.opted_in(), deleted=False)
    stores.domain_mirror.observe(domain_builders.domain_object(D_OLD, group=2), deleted=False)
    stores.pod_mirror.observe(leader("new", D_NEW), deleted=False)
    stores.pod_mirror.observe(leader("old", D_OLD), deleted=True)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert [p.domain for p in snapshot.pods] == [D_NEW]
    plan = planner.plan(snapshot)
    assert [c.name for c in plan.create] == [D_NEW]
    assert plan.delete == (D_OLD,)


def gpu_pod(name: str, domain: str, *, uid: str, leader: str | None = None, phase: str = "Running") -> dict[str, Any]:
    """A replica-scope pod as admitted: it records `domain` and holds its channel claim."""
    pod = build.pod(name, uid=uid, leader=leader, annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain})
    pod["spec"]["resourceClaims"] = [
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(domain)}
    ]
    pod["status"] = {"phase": phase}
    return pod


def template(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "serving", "uid": f"uid-{name}", "resourceVersion": "3"}}


def fed(*domains_: str) -> state.Stores:
    stores = state.Stores()
    stores.workload_mirror.observe(build.opted_in(), deleted=False)
    for name in domains_:
        stores.domain_mirror.observe(domain_builders.domain_object(name, group=int(name.split("-")[-2])), deleted=False)
    return stores


def test_a_domain_whose_claim_a_live_pod_of_another_workload_holds_is_in_use_and_kept() -> None:
    stores = fed(D_OLD)
    other = gpu_pod("borrower", D_OLD, uid="b")
    other["metadata"]["labels"][keys.LWS_NAME_LABEL] = "other"
    stores.pod_mirror.observe(other, deleted=False)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.templates_in_use == frozenset({names.claim_template_name(D_OLD)})
    assert planner.plan(snapshot).delete == ()


def ready(snapshot: planner.Snapshot, domain: str) -> bool:
    """Whether the planner takes `domain` for ready, from the snapshot the stores give it."""
    assert snapshot.workload is not None
    return domains.is_ready(
        snapshot.domains.get(domain),
        owner_uid=snapshot.workload.uid,
        manager=planner.MANAGER,
        template_exists=names.claim_template_name(domain) in snapshot.existing_templates,
    )


def test_only_claim_templates_that_exist_count_and_readiness_needs_one() -> None:
    stores = fed(D_NEW)
    stores.pod_mirror.observe(leader("new", D_NEW), deleted=False)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.existing_templates == frozenset()
    assert not ready(snapshot, D_NEW)
    stores.template_mirror.observe(template(names.claim_template_name(D_NEW)), deleted=False)
    stores.template_mirror.observe(template("unrelated-channel"), deleted=False)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.existing_templates == frozenset({names.claim_template_name(D_NEW)})
    assert ready(snapshot, D_NEW)


def test_events_of_a_domain_and_its_template_queue_every_workload_that_uses_it() -> None:
    stores = state.Stores()
    borrower = gpu_pod("other-0", D_OLD, uid="b")
    borrower["metadata"]["labels"][keys.LWS_NAME_LABEL] = "other"
    stores.pod_mirror.observe(borrower, deleted=False)
    queued = stores.domain_mirror.observe(domain_builders.domain_object(D_OLD, group=2), deleted=False)
    assert queued == [("serving", "deepseek-r1"), ("serving", "other")]
    queued = stores.template_mirror.observe(template(names.claim_template_name(D_OLD)), deleted=False)
    assert queued == [("serving", "deepseek-r1"), ("serving", "other")]


def test_a_pod_event_queues_its_workload_also_when_it_leaves() -> None:
    stores = state.Stores()
    pod = gpu_pod("deepseek-r1-2", D_NEW, uid="p")
    assert stores.pod_mirror.observe(pod, deleted=False) == [("serving", "deepseek-r1")]
    assert stores.pod_mirror.observe(pod, deleted=True) == [("serving", "deepseek-r1")]


def test_a_finished_cpu_only_leader_no_longer_keeps_its_domain() -> None:
    stores = fed(D_OLD)
    stores.pod_mirror.observe(leader("old", D_OLD), deleted=False)
    assert planner.plan(stores.snapshot("serving", "deepseek-r1", gate_enabled=True)).delete == ()
    finished = leader("old", D_OLD)
    finished["status"] = {"phase": "Failed"}
    finished["metadata"]["resourceVersion"] = "99"
    stores.pod_mirror.observe(finished, deleted=False)
    assert planner.plan(stores.snapshot("serving", "deepseek-r1", gate_enabled=True)).delete == (D_OLD,)


def test_the_revision_store_gives_a_snapshot_the_stamped_revisions_of_this_lws_and_its_pods_revisions() -> None:
    """StatefulSets' ControllerRevisions carry the same hash label and are not template revisions."""
    stores = state.Stores()
    lws = build.opted_in()
    stamped: dict[str, Any] = jsonpatch.apply_patch(lws, rules.template_patch(lws, build.ENV_ON))
    revisions = [
        build.controller_revision(stamped, "old"),
        build.controller_revision(build.lws(), "new"),
        build.controller_revision(stamped, "sts", owner_kind="StatefulSet"),
        build.controller_revision(stamped, "earlier", uid="uid-of-an-earlier-lws"),
    ]
    for index, revision in enumerate(revisions):
        revision["metadata"]["uid"] = f"revision-{index}"
        assert stores.revision_mirror.observe(revision, deleted=False) == (
            [] if index == 2 else [("serving", "deepseek-r1")]
        )
    stores.workload_mirror.observe(build.lws(), deleted=False)
    stores.pod_mirror.observe(build.pod("deepseek-r1-0", revision="old"), deleted=False)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.stamped_revisions == frozenset({"old"})
    assert [pod.revision for pod in snapshot.pods] == ["old"]
    stores.revision_mirror.observe(revisions[0], deleted=True)
    assert stores.snapshot("serving", "deepseek-r1", gate_enabled=True).stamped_revisions == frozenset()
