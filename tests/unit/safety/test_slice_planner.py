"""Safety of the slice planner over arbitrary snapshots: whatever it sees, it never deletes or releases a domain
that a non-terminal pod references (holds its claim or records it) or whose (slice, revision) still has a
LeaderWorkerSet of its DisaggregatedSet, never touches domains it does not own, never creates one over an
existing object, and never ungates a pod onto a domain that is not ready."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import plans
from mnnvl_ds import planner

from ..mnnvl_ds import build
from .settings import PURE_SEARCH, RARELY

POSITIONS = [(s, r) for s in (0, 1) for r in (build.REVISION, build.NEXT_REVISION)]
DOMAINS = [build.domain_name(*position) for position in POSITIONS]
OWNERS = [build.UID, "previous-incarnation"]


@st.composite
def snapshots(draw: st.DrawFn) -> planner.Snapshot:
    children = tuple(
        build.child_facts(
            slice_index,
            revision,
            role,
            slice_scope=not draw(RARELY),
            owner_uid=draw(st.sampled_from(OWNERS)),
            deleting=draw(RARELY),
        )
        for (slice_index, revision), role in draw(
            st.lists(st.tuples(st.sampled_from(POSITIONS), st.sampled_from(("prefill", "decode"))), unique=True)
        )
    )
    pods = tuple(
        build.pod_facts(
            f"pod-{index}",
            draw(st.sampled_from([None, *DOMAINS])),
            gated=draw(st.booleans()),
            terminal=draw(RARELY),
            deleting=draw(RARELY),
        )
        for index in range(draw(st.integers(0, 4)))
    )
    domains = []
    templates = []
    for position in POSITIONS:
        if not draw(st.booleans()):
            continue
        kind = draw(st.sampled_from(("ours", "ours", "unmanaged", "forged", "other-controller", "misnamed")))
        found = build.domain(
            # labelled for this position, named as the slice scope never names one
            f"{build.DS}-{position[0]}-zz" if kind == "misnamed" else None,
            slice_index=position[0],
            revision_hash=position[1],
            owner_uid=None if kind == "unmanaged" else draw(st.sampled_from(OWNERS)),
            manager={"unmanaged": None, "other-controller": keys.LWS_CONTROLLER}.get(kind, keys.DS_CONTROLLER),
            created_by="kubectl" if kind == "forged" else "manager",
            deleting=draw(RARELY),
            protected=draw(st.booleans()),
            condemned=draw(RARELY),
        )
        domains.append(found)
        if not draw(RARELY):  # the driver made its claim template (or not yet)
            templates.append(found.claim_template)
    return build.snapshot(
        children=children,
        pods_=pods,
        domains_=tuple(domains),
        templates=tuple(templates),
        in_use=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        recorded=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        workload_=build.workload(deleting=draw(RARELY), opted_in=draw(st.booleans())),
        gone=draw(RARELY),
        gate_enabled=not draw(RARELY),
    )


def current_positions(snapshot: planner.Snapshot) -> set[tuple[int, str]]:
    """The (slice, revision)s with a live slice-scope LeaderWorkerSet of the current set."""
    workload = snapshot.workload
    return {
        (c.slice, c.revision)
        for c in snapshot.children
        if workload is not None and c.owner_uid == workload.uid and c.slice_scope and not c.deleting
    }


@PURE_SEARCH
@given(snapshot=snapshots())
def test_the_planner_never_acts_unsafely(snapshot: planner.Snapshot) -> None:
    plan = planner.plan(snapshot)
    if not snapshot.gate_enabled:
        assert plan == plans.Plan()
        return
    live_references = {p.domain for p in snapshot.pods if p.domain and not p.terminal} | snapshot.domains_recorded
    for name in (*plan.delete, *plan.release, *plan.uncondemn):
        domain = snapshot.domains[name]
        assert domain.managed_by == keys.DS_CONTROLLER
        assert domain.created_by == keys.DS_CONTROLLER
        assert name in DOMAINS, f"{name} is not a name the slice scope derives"
    for name in (*plan.delete, *plan.release):
        domain = snapshot.domains[name]
        assert domain.claim_template not in snapshot.templates_in_use, f"{name} is in use"
        assert name not in live_references, f"{name} is recorded by a live pod"
        if snapshot.workload is not None and snapshot.workload.uid == domain.owner_uid:
            assert not any(
                c.owner_uid == domain.owner_uid and (str(c.slice), c.revision) == (domain.slice, domain.revision)
                for c in snapshot.children
            ), f"{name} still has a LeaderWorkerSet of its (slice, revision)"
    assert all(snapshot.domains[name].deleting for name in plan.release)
    assert not any(snapshot.domains[name].deleting for name in plan.delete)
    current = {build.domain_name(*position) for position in current_positions(snapshot)}
    for created in plan.create:
        assert created.name not in snapshot.domains
        assert created.name in current, f"{created.name} has no live LeaderWorkerSet of the current set"
    by_name = {p.name: p for p in snapshot.pods}
    for pod in plan.ungate:
        joined = snapshot.domains.get(str(by_name[pod.name].domain))
        assert joined is not None, f"{pod.name} released onto a domain that does not exist"
        assert snapshot.workload is not None
        assert joined.owner_uid == snapshot.workload.uid
        assert joined.created_by == keys.DS_CONTROLLER
        assert not joined.deleting
        assert not joined.condemned
        assert joined.claim_template in snapshot.existing_templates


@PURE_SEARCH
@given(snapshot=snapshots())
def test_every_live_child_of_the_current_set_gets_its_domain(snapshot: planner.Snapshot) -> None:
    """Liveness: a (slice, revision) with a live slice-scope LeaderWorkerSet of the current set (stamped, so
    enrolled: after the set opted out too, until the rollout drains it) gets its domain created when no object holds
    the name, or its pods stay Pending forever."""
    plan = planner.plan(snapshot)
    workload = snapshot.workload
    if not snapshot.gate_enabled or workload is None or workload.deleting:
        return
    created = {d.name for d in plan.create}
    for position in current_positions(snapshot):
        name = build.domain_name(*position)
        if name not in snapshot.domains:
            assert name in created, f"the domain of {position} is not created"
