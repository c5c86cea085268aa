"""Safety of the replica planner over arbitrary snapshots: whatever it sees, it never deletes or releases a domain
whose claim template a live pod references, never touches domains it does not own, and never ungates a pod
onto a domain that is not ready."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_api.decisions import plans
from mnnvl_lws import planner

from . import build

DOMAINS = [f"deepseek-r1-{g}-{t}" for g in (0, 1) for t in ("bbbbb", "ccccc")]


@st.composite
def snapshots(draw: st.DrawFn) -> planner.Snapshot:
    pods: list[planner.PodFacts] = []
    for group in (0, 1):
        if not draw(st.booleans()):
            continue
        domain = draw(st.sampled_from([None, *DOMAINS]))
        pods.append(build.leader(group, domain, gated=draw(st.booleans()), terminal=draw(st.booleans())))
        pods += [
            build.worker(group, i, domain, gated=draw(st.booleans())) for i in range(1, draw(st.integers(0, 2)) + 1)
        ]
    domains = []
    for name in draw(st.lists(st.sampled_from(DOMAINS), unique=True)):
        foreign = draw(st.booleans())
        domains.append(
            build.domain(
                name,
                owner_uid=None if foreign else draw(st.sampled_from([build.UID, "previous-incarnation-uid"])),
                manager=None if foreign else keys.LWS_CONTROLLER,
                deleting=draw(st.booleans()),
                protected=draw(st.booleans()),
            )
        )
    return build.snapshot(
        pods_=tuple(pods),
        domains_=tuple(domains),
        templates=tuple(names.claim_template_name(d) for d in draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        in_use=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        gate_enabled=draw(st.booleans()),
        gone=draw(st.booleans()),
    )


@given(snapshot=snapshots())
def test_the_planner_never_acts_unsafely(snapshot: planner.Snapshot) -> None:
    plan = planner.plan(snapshot)
    if not snapshot.gate_enabled:
        assert plan == plans.Plan()
        return
    for name in (*plan.delete, *plan.release):
        domain = snapshot.domains[name]
        assert domain.claim_template not in snapshot.templates_in_use, f"{name} is in use"
        assert domain.managed_by == keys.LWS_CONTROLLER
        assert not any(p.domain == name and p.is_leader and not p.terminal for p in snapshot.pods)
    assert all(snapshot.domains[name].deleting for name in plan.release)
    assert not any(snapshot.domains[name].deleting for name in plan.delete)
    created = {d.name for d in plan.create}
    assert created.isdisjoint(snapshot.domains)
    by_name = {p.name: p for p in snapshot.pods}
    for pod in plan.ungate:
        domain = snapshot.domains[str(by_name[pod.name].domain)]
        assert snapshot.workload is not None
        assert domain.owner_uid == snapshot.workload.uid
        assert not domain.deleting
        assert domain.claim_template in snapshot.existing_templates
