"""Safety of the slice planner over arbitrary snapshots: whatever it sees, it never deletes or releases a domain
that a non-terminal pod references (holds its claim or records it) or whose (slice, revision) still has a
LeaderWorkerSet of its DisaggregatedSet, never touches domains it does not own, never creates one over an
existing object, and never ungates a pod onto a domain that is not ready."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_api.decisions import plans
from mnnvl_ds import planner

from . import build

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
            slice_scope=draw(st.booleans()),
            owner_uid=draw(st.sampled_from(OWNERS)),
            deleting=draw(st.booleans()),
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
            terminal=draw(st.booleans()),
            deleting=draw(st.booleans()),
        )
        for index in range(draw(st.integers(0, 4)))
    )
    domains = []
    for position in draw(st.lists(st.sampled_from(POSITIONS), unique=True)):
        foreign = draw(st.sampled_from(("ours", "unmanaged", "forged", "other-controller")))
        domains.append(
            build.domain(
                slice_index=position[0],
                revision_hash=position[1],
                owner_uid=None if foreign == "unmanaged" else draw(st.sampled_from(OWNERS)),
                manager={"unmanaged": None, "other-controller": keys.LWS_CONTROLLER}.get(foreign, keys.DS_CONTROLLER),
                created_by="kubectl" if foreign == "forged" else "manager",
                deleting=draw(st.booleans()),
                protected=draw(st.booleans()),
                condemned=draw(st.booleans()),
            )
        )
    return build.snapshot(
        children=children,
        pods_=pods,
        domains_=tuple(domains),
        templates=tuple(names.claim_template_name(d) for d in draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        in_use=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        recorded=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        workload_=build.workload(deleting=draw(st.booleans()), opted_in=draw(st.booleans())),
        gone=draw(st.booleans()),
        gate_enabled=draw(st.booleans()),
    )


@settings(max_examples=400)
@given(snapshot=snapshots())
def test_the_planner_never_acts_unsafely(snapshot: planner.Snapshot) -> None:
    plan = planner.plan(snapshot)
    if not snapshot.gate_enabled:
        assert plan == plans.Plan()
        return
    live_references = {p.domain for p in snapshot.pods if p.domain and not p.terminal} | snapshot.domains_recorded
    for name in (*plan.delete, *plan.release):
        domain = snapshot.domains[name]
        assert domain.claim_template not in snapshot.templates_in_use, f"{name} is in use"
        assert name not in live_references, f"{name} is recorded by a live pod"
        assert domain.managed_by == keys.DS_CONTROLLER
        assert domain.created_by == keys.DS_CONTROLLER
        if snapshot.workload is not None and snapshot.workload.uid == domain.owner_uid:
            assert not any(
                c.owner_uid == domain.owner_uid and (str(c.slice), c.revision) == (domain.slice, domain.revision)
                for c in snapshot.children
            ), f"{name} still has a LeaderWorkerSet of its (slice, revision)"
    assert all(snapshot.domains[name].deleting for name in plan.release)
    assert not any(snapshot.domains[name].deleting for name in plan.delete)
    assert {d.name for d in plan.create}.isdisjoint(snapshot.domains)
    by_name = {p.name: p for p in snapshot.pods}
    for pod in plan.ungate:
        domain = snapshot.domains[str(by_name[pod.name].domain)]
        assert snapshot.workload is not None
        assert domain.owner_uid == snapshot.workload.uid
        assert domain.created_by == keys.DS_CONTROLLER
        assert not domain.deleting
        assert not domain.condemned
        assert domain.claim_template in snapshot.existing_templates
