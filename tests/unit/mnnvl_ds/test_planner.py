"""The slice planner: one ComputeDomain per active (slice, revision), pods released once it is ready, and a
domain deleted only once no LeaderWorkerSet of its (slice, revision) remains and no pod references it."""

from __future__ import annotations

import dataclasses

import pytest

from mnnvl_api import events, keys
from mnnvl_api.decisions import domains, plans
from mnnvl_ds import planner

from . import build

D0 = build.domain_name(0)
D1 = build.domain_name(1)
D0_NEXT = build.domain_name(0, build.NEXT_REVISION)
D1_NEXT = build.domain_name(1, build.NEXT_REVISION)


def to_create(slice_index: int, revision: str = build.REVISION) -> plans.DomainToCreate:
    name = build.domain_name(slice_index, revision)
    return plans.DomainToCreate(
        name=name,
        namespace=build.NS,
        claim_template=f"{name}-channel",
        labels={
            keys.OWNER_UID_LABEL: build.UID,
            keys.MANAGED_BY_LABEL: keys.DS_CONTROLLER,
            keys.SCOPE_LABEL: keys.SCOPE_SLICE,
            keys.WORKLOAD_NAME_LABEL: build.DS,
            keys.SLICE_LABEL: str(slice_index),
            keys.REVISION_LABEL: revision,
        },
    )


def seed_children(revision: str = build.REVISION) -> tuple[planner.Child, ...]:
    """The seed's Option 2 at one revision: 2 slices of prefill and decode (enrolled) and encoder (opted out)."""
    return tuple(
        build.child_facts(slice_index, revision, role, slice_scope=role != "encoder")
        for slice_index in (0, 1)
        for role in ("prefill", "decode", "encoder")
    )


# --- creation --------------------------------------------------------------------------------------------


def test_each_slice_gets_one_domain_as_soon_as_its_first_child_exists_before_any_pod() -> None:
    plan = planner.plan(build.snapshot(children=seed_children()))
    assert plan == plans.Plan(create=(to_create(0), to_create(1)))


def test_the_enrolled_roles_of_a_slice_share_one_domain() -> None:
    plan = planner.plan(build.snapshot(children=seed_children()[:2]))
    assert [d.name for d in plan.create] == [D0]


def test_a_slice_whose_children_are_all_opted_out_gets_no_domain() -> None:
    children = (build.child_facts(0, role_name="encoder", slice_scope=False),)
    assert planner.plan(build.snapshot(children=children)) == plans.Plan()


def test_a_new_revision_gets_new_domains_per_slice_while_the_old_ones_stay() -> None:
    plan = planner.plan(
        build.snapshot(
            children=(*seed_children(), *seed_children(build.NEXT_REVISION)),
            domains_=(build.domain(slice_index=0), build.domain(slice_index=1)),
        )
    )
    assert plan == plans.Plan(create=(to_create(0, build.NEXT_REVISION), to_create(1, build.NEXT_REVISION)))


def test_a_new_slice_gets_its_domain() -> None:
    children = (*seed_children(), build.child_facts(2))
    plan = planner.plan(
        build.snapshot(children=children, domains_=(build.domain(slice_index=0), build.domain(slice_index=1)))
    )
    assert plan == plans.Plan(create=(to_create(2),))


def test_a_deleting_set_creates_nothing() -> None:
    workload = build.workload(deleting=True)
    assert planner.plan(build.snapshot(children=seed_children(), workload_=workload)).create == ()


def test_a_stamped_child_keeps_its_slice_domain_after_the_set_opts_out_until_the_rollout_drains_it() -> None:
    """Upstream never updates a child's templates: the revision enrolled before the opt-out keeps its semantics,
    so a domain it lacks (deleted by hand, or never made) is created for its pods, and none is deleted."""
    opted_out = build.workload(opted_in=False, slices=1)
    stamped = build.child_facts(0)
    plan = planner.plan(build.snapshot(children=(stamped,), workload_=opted_out))
    assert [created.name for created in plan.create] == [D0]
    kept = planner.plan(build.snapshot(children=(stamped,), domains_=(build.domain(),), workload_=opted_out))
    assert (kept.create, kept.delete) == ((), ())
    unstamped = dataclasses.replace(stamped, slice_scope=False)
    assert planner.plan(build.snapshot(children=(unstamped,), workload_=opted_out)).create == ()


def test_a_child_of_a_previous_set_of_that_name_creates_nothing() -> None:
    children = (build.child_facts(0, owner_uid="previous-incarnation"),)
    assert planner.plan(build.snapshot(children=children)) == plans.Plan()


def test_a_deleting_child_creates_nothing() -> None:
    assert planner.plan(build.snapshot(children=(build.child_facts(0, deleting=True),))) == plans.Plan()


# --- collisions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "foreign",
    [
        pytest.param(build.domain(D0, owner_uid=None, manager=None, workload_name=None), id="unmanaged"),
        pytest.param(build.domain(D0, owner_uid="someone-else"), id="other-owner-uid"),
        pytest.param(build.domain(D0, manager=keys.LWS_CONTROLLER), id="other-controller"),
        pytest.param(build.domain(D0, created_by="kubectl"), id="labels-forged"),
    ],
)
def test_a_foreign_domain_with_the_generated_name_is_never_adopted(foreign: domains.DomainFacts) -> None:
    pods = (build.pod_facts("llm-serving-0-3f9a0c2e-prefill-0", D0, gated=True),)
    plan = planner.plan(build.snapshot(children=(build.child_facts(0),), pods_=pods, domains_=(foreign,)))
    assert (plan.create, plan.ungate, plan.delete, plan.release) == ((), (), (), ())
    assert [w.reason for w in plan.warnings] == [events.UNEXPECTED_OWNER_REASON]
    assert plan.warnings[0].message.startswith(f"ComputeDomain {D0} already exists and is ")
    assert plan.warnings[0].message.endswith(
        "it is not adopted and slice 0 (revision 3f9a0c2e) stays unscaled, its pods gated: delete or rename that "
        "ComputeDomain"
    )


def test_the_collision_message_names_the_owner_its_labels_claim() -> None:
    foreign = build.domain(D0, owner_uid="u2", manager=keys.LWS_CONTROLLER)
    [warning] = planner.plan(build.snapshot(children=(build.child_facts(0),), domains_=(foreign,))).warnings
    assert 'is managed by "mnnvl-lws" for owner u2; it is not adopted' in warning.message


def collisions(snapshot: planner.Snapshot) -> list[str]:
    return [
        w.message.split(";")[0] for w in planner.plan(snapshot).warnings if w.reason == events.UNEXPECTED_OWNER_REASON
    ]


def test_a_set_created_again_while_the_previous_ones_pods_run_is_told_why_its_slices_stay_unscaled() -> None:
    """Same name, same templates, so the same domain names: the new set's LeaderWorkerSets are refused until
    the previous set's domains are gone, and the planner never sees them; the previous domains name the slices."""
    previous = tuple(build.domain(slice_index=s, owner_uid="previous-incarnation") for s in (0, 1))
    assert collisions(build.snapshot(domains_=previous, in_use=(D0, D1))) == [
        f'ComputeDomain {D0} already exists and is managed by "mnnvl-ds" for owner previous-incarnation',
        f'ComputeDomain {D1} already exists and is managed by "mnnvl-ds" for owner previous-incarnation',
    ]


def test_a_slice_added_by_scaling_up_is_told_why_it_stays_unscaled() -> None:
    foreign = build.domain(build.domain_name(2), owner_uid=None, manager=None, workload_name=None)
    snapshot = build.snapshot(
        children=seed_children(),
        domains_=(build.domain(slice_index=0), build.domain(slice_index=1), foreign),
        workload_=build.workload(slices=3),
    )
    assert collisions(snapshot) == [f"ComputeDomain {build.domain_name(2)} already exists and is not managed by mnnvl"]


def test_a_slice_whose_new_revision_is_refused_during_a_rollout_is_told_why() -> None:
    foreign = build.domain(D0_NEXT, owner_uid=None, manager=None, workload_name=None)
    children = (*seed_children(), build.child_facts(1, build.NEXT_REVISION))
    snapshot = build.snapshot(children=children, domains_=(build.domain(), build.domain(slice_index=1), foreign))
    assert collisions(snapshot) == [f"ComputeDomain {D0_NEXT} already exists and is not managed by mnnvl"]


def test_domains_of_a_revision_the_set_no_longer_runs_are_no_collision() -> None:
    """The set was created again with other templates: its slices run at their new revision."""
    previous = tuple(build.domain(slice_index=s, owner_uid="previous-incarnation") for s in (0, 1))
    snapshot = build.snapshot(children=seed_children(build.NEXT_REVISION), domains_=previous, in_use=(D0, D1))
    assert collisions(snapshot) == []


# --- asking upstream to retry -----------------------------------------------------------------------------


def due(snapshot: planner.Snapshot, *, asked: bool, held_before: frozenset[str] = frozenset()) -> bool:
    return planner.upstream_retry_due(snapshot, asked_this_term=asked, held_before=held_before)


def test_upstream_is_asked_to_retry_a_managed_set_once_per_lease_term() -> None:
    """Our webhook fails closed: while this controller was down, upstream's child creations were refused and it
    backed off; nothing it watches changes when we come back."""
    snapshot = build.snapshot(children=seed_children())
    assert due(snapshot, asked=False)
    assert not due(snapshot, asked=True)


def test_upstream_is_asked_to_retry_once_a_foreign_domain_no_longer_holds_a_slice() -> None:
    foreign = build.domain(build.domain_name(2), owner_uid=None, manager=None, workload_name=None)
    held = build.snapshot(
        children=seed_children(),
        domains_=(build.domain(slice_index=0), build.domain(slice_index=1), foreign),
        workload_=build.workload(slices=3),
    )
    assert planner.holders(held) == {foreign.name}
    freed = dataclasses.replace(held, domains={name: d for name, d in held.domains.items() if name != foreign.name})
    assert planner.holders(freed) == frozenset()
    assert due(freed, asked=True, held_before=planner.holders(held))
    assert not due(held, asked=True, held_before=planner.holders(held))  # still held: no news for upstream
    assert due(held, asked=False)  # other slices may have been refused while we were down


@pytest.mark.parametrize(
    "snapshot",
    [
        build.snapshot(children=seed_children(), gate_enabled=False),
        build.snapshot(children=seed_children(), gone=True),
        build.snapshot(children=seed_children(), workload_=build.workload(deleting=True)),
        build.snapshot(children=seed_children(), workload_=build.workload(opted_in=False)),
    ],
    ids=["gate-disabled", "set-gone", "set-deleting", "set-not-managed"],
)
def test_upstream_is_never_asked_about_a_set_we_refuse_anyway_or_do_not_manage(snapshot: planner.Snapshot) -> None:
    assert not due(snapshot, asked=False, held_before=frozenset({D0}))


# --- ungating --------------------------------------------------------------------------------------------


def test_pods_stay_gated_until_the_claim_template_exists() -> None:
    pods = (build.pod_facts("p0", D0, gated=True), build.pod_facts("p1", D0, gated=True))
    snapshot = build.snapshot(children=(build.child_facts(0),), pods_=pods, domains_=(build.domain(),), templates=())
    assert planner.plan(snapshot) == plans.Plan()
    ready = build.snapshot(children=(build.child_facts(0),), pods_=pods, domains_=(build.domain(),))
    assert planner.plan(ready) == plans.Plan(
        ungate=(plans.PodRef(name="p0", uid="uid-p0", gate_at=0), plans.PodRef(name="p1", uid="uid-p1", gate_at=0))
    )


@pytest.mark.parametrize(
    "domain",
    [
        pytest.param(build.domain(deleting=True), id="deleting"),
        pytest.param(build.domain(condemned=True), id="condemned"),
    ],
)
def test_a_domain_on_its_way_out_releases_no_pods(domain: domains.DomainFacts) -> None:
    pods = (build.pod_facts("p0", D0, gated=True),)
    assert planner.plan(build.snapshot(children=(build.child_facts(0),), pods_=pods, domains_=(domain,))).ungate == ()


def test_pods_of_a_set_that_opted_out_since_are_still_released_onto_their_domain() -> None:
    """They were gated while it was enrolled; nothing else would lift their gate."""
    pods = (build.pod_facts("p0", D0, gated=True),)
    snapshot = build.snapshot(
        children=(build.child_facts(0),),
        pods_=pods,
        domains_=(build.domain(),),
        workload_=build.workload(opted_in=False),
    )
    assert [p.name for p in planner.plan(snapshot).ungate] == ["p0"]


def test_terminal_or_deleting_pods_are_not_ungated() -> None:
    pods = (
        build.pod_facts("done", D0, gated=True, terminal=True),
        build.pod_facts("going", D0, gated=True, deleting=True),
    )
    assert (
        planner.plan(build.snapshot(children=(build.child_facts(0),), pods_=pods, domains_=(build.domain(),))).ungate
        == ()
    )


def test_a_pod_recording_a_domain_of_no_live_child_stays_gated() -> None:
    pods = (build.pod_facts("p0", D1, gated=True),)
    snapshot = build.snapshot(
        children=(build.child_facts(0),), pods_=pods, domains_=(build.domain(), build.domain(slice_index=1))
    )
    assert planner.plan(snapshot).ungate == ()


# --- garbage collection ----------------------------------------------------------------------------------


def test_after_a_rollout_drains_the_old_revision_its_domains_go_once_unreferenced() -> None:
    old = (build.domain(slice_index=0), build.domain(slice_index=1))
    new = (
        build.domain(D0_NEXT, revision_hash=build.NEXT_REVISION),
        build.domain(D1_NEXT, slice_index=1, revision_hash=build.NEXT_REVISION),
    )
    snapshot = build.snapshot(children=seed_children(build.NEXT_REVISION), domains_=(*old, *new), in_use=(D1,))
    assert planner.plan(snapshot) == plans.Plan(delete=(D0,))


def test_during_a_rollout_the_old_revision_keeps_its_domains_while_any_of_its_children_remains() -> None:
    """Upstream drains the old revision by scaling it to 0 first; its LeaderWorkerSets stay until then."""
    children = (build.child_facts(0, role_name="encoder", slice_scope=False), *seed_children(build.NEXT_REVISION))
    domains_ = (build.domain(), build.domain(D0_NEXT, revision_hash=build.NEXT_REVISION))
    assert planner.plan(build.snapshot(children=children, domains_=domains_)).delete == ()


def test_a_deleting_child_still_holds_its_domain() -> None:
    snapshot = build.snapshot(children=(build.child_facts(0, deleting=True),), domains_=(build.domain(),))
    assert planner.plan(snapshot).delete == ()


def test_after_slices_shrink_the_removed_slices_domain_goes_once_its_pods_have_exited() -> None:
    children = tuple(c for c in seed_children() if c.slice == 0)
    domains_ = (build.domain(slice_index=0), build.domain(slice_index=1))
    pods = (build.pod_facts("llm-serving-1-3f9a0c2e-prefill-0", D1),)
    assert planner.plan(build.snapshot(children=children, domains_=domains_, pods_=pods)).delete == ()
    assert planner.plan(build.snapshot(children=children, domains_=domains_)).delete == (D1,)


def test_a_terminal_pod_does_not_hold_a_domain() -> None:
    pods = (build.pod_facts("done", D1, terminal=True),)
    plan = planner.plan(
        build.snapshot(children=seed_children()[:3], domains_=(build.domain(slice_index=1),), pods_=pods)
    )
    assert plan.delete == (D1,)


def test_a_domain_recorded_by_a_cpu_only_pod_is_in_use() -> None:
    """A pod without GPU containers holds no claim but records its domain."""
    assert planner.plan(build.snapshot(domains_=(build.domain(),), recorded=(D0,), gone=True)) == plans.Plan()


def test_when_the_set_is_deleted_its_domains_go_once_their_last_pod_exits() -> None:
    domains_ = (build.domain(slice_index=0), build.domain(slice_index=1))
    plan = planner.plan(build.snapshot(children=seed_children(), domains_=domains_, in_use=(D0,), gone=True))
    assert plan == plans.Plan(delete=(D1,))


def test_the_domains_of_a_previous_set_of_that_name_go_once_unreferenced_even_if_its_children_linger() -> None:
    old = build.domain(owner_uid="previous-incarnation")
    children = (build.child_facts(0, owner_uid="previous-incarnation"),)
    assert planner.plan(build.snapshot(children=children, domains_=(old,))).delete == (D0,)


def test_a_deleted_domain_is_released_only_when_unreferenced() -> None:
    deleting = build.domain(deleting=True)
    assert planner.plan(build.snapshot(domains_=(deleting,), in_use=(D0,), gone=True)).release == ()
    assert planner.plan(build.snapshot(domains_=(deleting,), gone=True)).release == (D0,)


def test_a_condemned_domain_that_is_wanted_again_is_uncondemned() -> None:
    """A rollback to a revision whose LeaderWorkerSets were being drained: the same (slice, revision) again."""
    snapshot = build.snapshot(children=(build.child_facts(0),), domains_=(build.domain(condemned=True),))
    assert planner.plan(snapshot) == plans.Plan(uncondemn=(D0,))


@pytest.mark.parametrize(
    "foreign",
    [
        pytest.param(build.domain(D0, owner_uid=None, manager=None, workload_name=None), id="unmanaged"),
        pytest.param(build.domain(D0, manager=keys.LWS_CONTROLLER), id="other-controller"),
        pytest.param(build.domain(D0, created_by="kubectl"), id="labels-forged"),
        pytest.param(build.domain("llm-serving-0-3f9a0c2e-x"), id="name-not-derived"),
        pytest.param(build.domain(D0, workload_name="other"), id="other-workload"),
    ],
)
def test_only_domains_that_are_ours_by_identity_are_ever_deleted_or_released(foreign: domains.DomainFacts) -> None:
    assert planner.plan(build.snapshot(domains_=(foreign,), gone=True)) == plans.Plan()
    deleting = dataclasses.replace(foreign, deleting=True)
    assert planner.plan(build.snapshot(domains_=(deleting,), gone=True)) == plans.Plan()


# --- the gate, and pods admitted without our webhook -----------------------------------------------------


def test_with_the_gate_disabled_nothing_is_created_ungated_deleted_or_released() -> None:
    snapshot = build.snapshot(
        children=seed_children(),
        pods_=(build.pod_facts("p0", D0, gated=True),),
        domains_=(build.domain(), build.domain(slice_index=5), build.domain(slice_index=6, deleting=True)),
        gate_enabled=False,
    )
    assert planner.plan(snapshot) == plans.Plan()


def test_a_pod_without_its_channel_claim_is_reported() -> None:
    pods = (build.pod_facts("p0", D0, missing_claim=True),)
    [warning] = planner.plan(
        build.snapshot(children=(build.child_facts(0),), domains_=(build.domain(),), pods_=pods)
    ).warnings
    assert warning.reason == events.POD_WITHOUT_CHANNEL_CLAIM_REASON
    assert warning.message.startswith("Pod p0 of DisaggregatedSet llm-serving has GPU containers but no ComputeDomain")


def test_converged_input_yields_an_empty_plan() -> None:
    pods = (build.pod_facts("p0", D0), build.pod_facts("p1", D1))
    snapshot = build.snapshot(
        children=seed_children(), pods_=pods, domains_=(build.domain(), build.domain(slice_index=1)), in_use=(D0, D1)
    )
    assert planner.plan(snapshot) == plans.Plan()


# --- identity --------------------------------------------------------------------------------------------


def test_a_slice_label_that_is_not_a_number_makes_a_domain_not_ours() -> None:
    odd = dataclasses.replace(build.domain(), slice="zero")
    assert not planner.is_ours(odd, build.DS)
    assert planner.is_ours(build.domain(), build.DS)
