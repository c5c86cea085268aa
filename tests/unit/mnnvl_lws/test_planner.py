from __future__ import annotations

import dataclasses

import pytest

from mnnvl_api import events, keys
from mnnvl_api.decisions import domains, plans
from mnnvl_lws import planner

from ..mnnvl_api import domain_builders
from . import build

D0 = "deepseek-r1-0-x7k2b"
D0_NEW = "deepseek-r1-0-bbbbb"
D1 = "deepseek-r1-1-qqqqq"


def expected_labels(group: str) -> dict[str, str]:
    return {
        keys.OWNER_UID_LABEL: domain_builders.UID,
        keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER,
        keys.SCOPE_LABEL: keys.SCOPE_REPLICA,
        keys.WORKLOAD_NAME_LABEL: "deepseek-r1",
        keys.GROUP_INDEX_LABEL: group,
    }


def test_each_live_leader_incarnation_gets_its_domain_created_with_our_labels() -> None:
    plan = planner.plan(build.snapshot(pods_=(build.leader(0, D0, gated=True), build.leader(1, D1, gated=True))))
    assert plan == plans.Plan(
        create=(
            plans.DomainToCreate(
                name=D0, namespace="serving", claim_template=f"{D0}-channel", labels=expected_labels("0")
            ),
            plans.DomainToCreate(
                name=D1, namespace="serving", claim_template=f"{D1}-channel", labels=expected_labels("1")
            ),
        )
    )


def test_pods_stay_gated_until_the_claim_template_exists() -> None:
    pods = (build.leader(0, D0, gated=True), build.worker(0, 1, D0, gated=True))
    assert (
        planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0),), templates=())) == plans.Plan()
    )
    ready = planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0),)))
    assert ready == plans.Plan(
        ungate=(
            plans.PodRef(name="deepseek-r1-0", uid="uid-deepseek-r1-0", gate_at=0),
            plans.PodRef(name="deepseek-r1-0-1", uid="uid-deepseek-r1-0-1", gate_at=0),
        )
    )


def test_a_terminating_domain_releases_no_pods() -> None:
    pods = (build.leader(0, D0, gated=True),)
    plan = planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0, deleting=True),), in_use=(D0,)))
    assert plan.ungate == ()


def test_a_replaced_leader_gets_a_new_domain_and_the_unreferenced_old_one_is_deleted() -> None:
    plan = planner.plan(
        build.snapshot(
            pods_=(build.leader(0, D0_NEW, gated=True),),
            domains_=(domain_builders.domain(D0),),
            templates=(f"{D0}-channel",),
        )
    )
    assert [d.name for d in plan.create] == [D0_NEW]
    assert plan.delete == (D0,)


def test_an_obsolete_domain_still_referenced_by_a_pod_is_kept() -> None:
    plan = planner.plan(
        build.snapshot(
            pods_=(build.leader(0, D0_NEW),),
            domains_=(domain_builders.domain(D0), domain_builders.domain(D0_NEW)),
            in_use=(D0,),
        )
    )
    assert plan.delete == ()
    assert plan.release == ()


def test_a_domain_recorded_by_a_terminating_leader_is_not_obsolete() -> None:
    leaving = planner.ReplicaPodFacts(
        name="deepseek-r1-0",
        uid="uid-deepseek-r1-0",
        group=0,
        is_leader=True,
        domain=D0,
        gate_at=None,
        terminal=False,
        deleting=True,
    )
    assert planner.plan(build.snapshot(pods_=(leaving,), domains_=(domain_builders.domain(D0),))).delete == ()


def test_a_deleted_domain_is_released_only_when_unreferenced() -> None:
    deleting = domain_builders.domain(D0, deleting=True)
    assert planner.plan(build.snapshot(domains_=(deleting,), in_use=(D0,))).release == ()
    assert planner.plan(build.snapshot(domains_=(deleting,))).release == (D0,)


def test_when_the_lws_is_gone_its_domains_go_once_unreferenced() -> None:
    plan = planner.plan(
        build.snapshot(domains_=(domain_builders.domain(D0), domain_builders.domain(D1)), in_use=(D1,), gone=True)
    )
    assert plan == plans.Plan(delete=(D0,))


def test_a_deleting_lws_creates_nothing_new() -> None:
    plan = planner.plan(
        build.snapshot(pods_=(build.leader(0, D0, gated=True),), workload_=build.workload(deleting=True))
    )
    assert plan.create == ()


@pytest.mark.parametrize(
    "foreign",
    [
        pytest.param(domain_builders.domain(D0, owner_uid=None, manager=None, workload_name=None), id="unmanaged"),
        pytest.param(domain_builders.domain(D0, owner_uid="someone-else"), id="other-owner-uid"),
        pytest.param(domain_builders.domain(D0, manager=keys.DS_CONTROLLER), id="other-controller"),
    ],
)
def test_a_foreign_domain_with_the_generated_name_is_not_adopted(foreign: object) -> None:
    assert isinstance(foreign, domains.DomainFacts)
    plan = planner.plan(build.snapshot(pods_=(build.leader(0, D0, gated=True),), domains_=(foreign,)))
    assert plan.create == ()
    assert plan.ungate == ()
    assert plan.delete == ()
    assert [w.reason for w in plan.warnings] == [events.UNEXPECTED_OWNER_REASON]
    assert D0 in plan.warnings[0].message
    assert "leader deepseek-r1-0 stays gated" in plan.warnings[0].message


def test_with_the_gate_disabled_nothing_is_done() -> None:
    snapshot = build.snapshot(
        pods_=(build.leader(0, D0_NEW, gated=True),),
        domains_=(domain_builders.domain(D0), domain_builders.domain(D1, deleting=True)),
        gate_enabled=False,
    )
    assert planner.plan(snapshot) == plans.Plan()


def test_domains_of_other_workloads_are_never_touched() -> None:
    other = domain_builders.domain("other-0-bbbbb", workload_name="other")
    assert planner.plan(build.snapshot(domains_=(other,))) == plans.Plan()


def test_a_converged_snapshot_yields_an_empty_plan() -> None:
    pods = (build.leader(0, D0), build.worker(0, 1, D0), build.leader(1, D1))
    plan = planner.plan(
        build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0), domain_builders.domain(D1)), in_use=(D0, D1))
    )
    assert plan.empty


def test_builders_refuse_a_worker_without_its_leader() -> None:
    with pytest.raises(ValueError, match="no leader"):
        build.snapshot(pods_=(build.worker(0, 1, D0),))


def test_terminal_or_terminating_pods_are_never_ungated() -> None:
    """Onto a ready domain, only pods that can still run are released."""
    finished = dataclasses.replace(build.worker(0, 1, D0, gated=True), terminal=True)
    leaving = dataclasses.replace(build.worker(0, 2, D0, gated=True), deleting=True)
    waiting = build.worker(0, 3, D0, gated=True)
    pods = (build.leader(0, D0), finished, leaving, waiting)
    plan = planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0),)))
    assert plan.ungate == (plans.PodRef(name="deepseek-r1-0-3", uid="uid-deepseek-r1-0-3", gate_at=0),)


def test_a_worker_is_ungated_only_onto_its_live_leaders_domain() -> None:
    stray = build.worker(0, 1, D0, gated=True)
    pods = (build.leader(0, D0_NEW), stray)
    plan = planner.plan(
        build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0), domain_builders.domain(D0_NEW)))
    )
    assert plan.ungate == ()


def test_a_condemned_domain_releases_no_pod_and_is_lifted_while_wanted() -> None:
    pods = (build.leader(0, D0, gated=True),)
    plan = planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0, condemned=True),)))
    assert plan == plans.Plan(uncondemn=(D0,))


def test_a_domain_recorded_by_a_live_pod_is_in_use_without_any_claim() -> None:
    plan = planner.plan(build.snapshot(domains_=(domain_builders.domain(D0),), recorded=(D0,), gone=True))
    assert plan == plans.Plan()


def test_only_an_opted_in_workload_gets_domains() -> None:
    not_opted = planner.LeaderWorkerSetFacts(
        namespace="serving", name="deepseek-r1", uid=domain_builders.UID, opted_in=False
    )
    plan = planner.plan(build.snapshot(pods_=(build.leader(0, D0, gated=True),), workload_=not_opted))
    assert plan.create == ()


def test_after_opting_out_a_restarted_group_of_an_opted_in_revision_gets_its_domain_and_is_released() -> None:
    """Upstream recreates a group the rollout has not reached from its old, stamped revision: that group keeps
    its revision's semantics, a new domain for the new incarnation, while the other groups' domains stay."""
    opted_out = planner.LeaderWorkerSetFacts(
        namespace="serving", name="deepseek-r1", uid=domain_builders.UID, opted_in=False
    )
    restarted = build.leader(0, D0_NEW, gated=True, revision="old")
    running = build.leader(1, D1, revision="old")
    waiting = build.snapshot(
        pods_=(restarted, running),
        domains_=(domain_builders.domain(D0), domain_builders.domain(D1)),
        in_use=(D0, D1),
        workload_=opted_out,
        stamped_revisions=("old",),
    )
    plan = planner.plan(waiting)
    assert [created.name for created in plan.create] == [D0_NEW]
    assert plan.delete == ()  # the old incarnation's domain is still in use, and the other group's is wanted
    ready = dataclasses.replace(waiting, domains={**waiting.domains, D0_NEW: domain_builders.domain(D0_NEW)})
    ready = dataclasses.replace(ready, existing_templates=ready.existing_templates | {f"{D0_NEW}-channel"})
    assert planner.plan(ready).ungate == (plans.PodRef(name="deepseek-r1-0", uid="uid-deepseek-r1-0", gate_at=0),)


def test_after_opting_out_a_leader_of_a_revision_that_was_not_opted_in_gets_no_domain() -> None:
    opted_out = planner.LeaderWorkerSetFacts(
        namespace="serving", name="deepseek-r1", uid=domain_builders.UID, opted_in=False
    )
    pods = (build.leader(0, D0, gated=True, revision="new"),)
    plan = planner.plan(build.snapshot(pods_=pods, workload_=opted_out, stamped_revisions=("old",)))
    assert plan.create == ()


def test_a_leader_recording_a_name_the_scope_does_not_derive_gets_no_domain_and_a_warning() -> None:
    plan = planner.plan(build.snapshot(pods_=(build.leader(0, "NOT A NAME!!", gated=True),)))
    assert plan.create == ()
    assert [w.reason for w in plan.warnings] == [events.INVALID_DOMAIN_NAME_REASON]
    assert "'NOT A NAME!!'" in plan.warnings[0].message


def test_a_leader_being_deleted_gets_no_new_domain() -> None:
    assert planner.plan(build.snapshot(pods_=(build.leader(0, D0, gated=True, deleting=True),))).create == ()


def test_a_pod_running_without_its_channel_claim_is_reported() -> None:
    unprotected = dataclasses.replace(build.worker(0, 1, D0), missing_claim=True)
    pods = (build.leader(0, D0), unprotected)
    plan = planner.plan(build.snapshot(pods_=pods, domains_=(domain_builders.domain(D0),), in_use=(D0,)))
    assert [w.reason for w in plan.warnings] == [events.POD_WITHOUT_CHANNEL_CLAIM_REASON]
    assert "deepseek-r1-0-1" in plan.warnings[0].message


@pytest.mark.parametrize(
    "look_alike",
    [
        pytest.param(domain_builders.domain(D0, created_by="kubectl-label"), id="labelled-by-someone-else"),
        pytest.param(domain_builders.domain(D0, created_by=None), id="no-recorded-creator"),
        pytest.param(dataclasses.replace(domain_builders.domain(D0), group="1"), id="name-not-derived-from-its-group"),
        pytest.param(
            dataclasses.replace(domain_builders.domain(D0), claim_template="someone-elses"), id="other-template"
        ),
    ],
)
def test_a_domain_that_only_looks_like_ours_is_never_deleted_or_released(look_alike: object) -> None:
    assert isinstance(look_alike, domains.DomainFacts)
    assert planner.plan(build.snapshot(domains_=(look_alike,), gone=True)) == plans.Plan()
    deleting = dataclasses.replace(look_alike, deleting=True)
    assert planner.plan(build.snapshot(domains_=(deleting,), gone=True)) == plans.Plan()


def test_a_domain_created_at_admission_and_seen_before_its_leader_is_obsolete_until_the_leader_is_seen() -> None:
    """The pod webhook creates a leader's domain at admission; its watch event may come before the leader's. Until
    then nothing records it, so it is condemned; the fence outlasts the leader's admission, whose pod then makes it
    wanted again."""
    assert planner.plan(build.snapshot(domains_=(domain_builders.domain(D0),))).delete == (D0,)
    marked = domain_builders.domain(D0, condemned=True)
    assert planner.plan(build.snapshot(pods_=(build.leader(0, D0, gated=True),), domains_=(marked,))).uncondemn == (D0,)
