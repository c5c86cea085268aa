"""Safety of the replica planner over arbitrary snapshots: whatever it sees, it never deletes or releases a domain
whose claim template a live pod references, never touches domains it does not own, and never ungates a pod
onto a domain that is not ready."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, plans
from mnnvl_lws import planner

from ..mnnvl_api import domain_builders
from ..mnnvl_lws import build
from .settings import PURE_SEARCH, RARELY

LWS = "deepseek-r1"
#: Names the replica scope derives (two incarnations per group), and names it never derives: a leader's recorded
#: name anyone may have written, and a look-alike's.
DERIVED = [names.replica_domain_name(LWS, g, t) for g in (0, 1) for t in ("bbbbb", "ccccc")]
UNDERIVED = [f"{LWS}-0-zz", f"{LWS}-1"]
DOMAINS = DERIVED + UNDERIVED
REVISIONS = ("rev-stamped", "rev-plain")


def group_of(name: str) -> int:
    return int(name.split("-")[-2]) if name.split("-")[-2].isdigit() else 0


@st.composite
def snapshots(draw: st.DrawFn) -> planner.Snapshot:
    pods: list[planner.ReplicaPodFacts] = []
    for group in (0, 1):
        if not draw(st.booleans()):
            continue
        # mostly a name derived for its own group, as our webhook records it; now and then anything
        domain = draw(st.one_of(st.sampled_from(DERIVED[2 * group : 2 * group + 2]), st.sampled_from([None, *DOMAINS])))
        pods.append(
            build.leader(
                group,
                domain,
                gated=draw(st.booleans()),
                terminal=draw(RARELY),
                deleting=draw(RARELY),
                revision=draw(st.sampled_from(REVISIONS)),
            )
        )
        for index in range(1, draw(st.integers(0, 2)) + 1):
            # a worker records its leader's domain, or (made before a restart, or written by hand) another
            recorded = draw(st.one_of(st.just(domain), st.sampled_from([None, *DOMAINS])))
            pods.append(build.worker(group, index, recorded, gated=draw(st.booleans())))
    domains = []
    templates = []
    for name in DOMAINS:
        if not draw(st.booleans()):
            continue
        kind = draw(st.sampled_from(("ours", "ours", "previous incarnation", "look-alike", "foreign")))
        domains.append(
            domain_builders.domain(
                name,
                owner_uid=None
                if kind == "foreign"
                else domain_builders.UID
                if kind != "previous incarnation"
                else "old-uid",
                manager=None if kind == "foreign" else keys.LWS_CONTROLLER,
                created_by="kubectl" if kind == "look-alike" else "manager",
                deleting=draw(RARELY),
                protected=draw(st.booleans()),
                condemned=draw(RARELY),
            )
        )
        if not draw(RARELY):  # the driver made its claim template (or not yet)
            templates.append(names.claim_template_name(name))
    opted_in = draw(st.booleans())
    return build.snapshot(
        pods_=tuple(pods),
        domains_=tuple(domains),
        templates=tuple(templates),
        in_use=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        recorded=tuple(draw(st.lists(st.sampled_from(DOMAINS), unique=True))),
        workload_=planner.LeaderWorkerSetFacts(
            namespace="serving", name=LWS, uid=domain_builders.UID, deleting=draw(RARELY), opted_in=opted_in
        ),
        gate_enabled=not draw(RARELY),
        gone=draw(RARELY),
        stamped_revisions=(REVISIONS[0],),
    )


def ours(domain: domains.DomainFacts) -> bool:
    """Made by mnnvl-lws for a group of this LWS (any incarnation), as the API server and the name say."""
    return (
        domain.managed_by == keys.LWS_CONTROLLER
        and domain.created_by == keys.LWS_CONTROLLER
        and domain.owner_uid is not None
        and domain.workload == LWS
        and domain.name in DERIVED
    )


def in_use(snapshot: planner.Snapshot, name: str) -> bool:
    """A live pod holds the domain's claim or records it."""
    return (
        names.claim_template_name(name) in snapshot.templates_in_use
        or name in snapshot.domains_recorded
        or any(p.domain == name and not p.terminal for p in snapshot.pods)
    )


@PURE_SEARCH
@given(snapshot=snapshots())
def test_the_planner_never_acts_unsafely(snapshot: planner.Snapshot) -> None:
    """It touches only domains of ours, never one in use; it creates only names it derives for a live leader of a
    managed group; it releases a pod only onto its own group's domain, ours, live and ready."""
    plan = planner.plan(snapshot)
    if not snapshot.gate_enabled:
        assert plan == plans.Plan()
        return
    for name in (*plan.delete, *plan.release, *plan.uncondemn):
        domain = snapshot.domains[name]
        assert ours(domain), f"{name} is not ours: {domain}"
    for name in (*plan.delete, *plan.release):
        assert not in_use(snapshot, name), f"{name} is in use"
    assert all(snapshot.domains[name].deleting for name in plan.release)
    assert not any(snapshot.domains[name].deleting for name in plan.delete)
    workload = snapshot.workload
    leaders = {p.group: p for p in snapshot.pods if p.is_leader and not p.terminal and not p.deleting}
    for created in plan.create:
        assert created.name not in snapshot.domains
        assert created.name in DERIVED, f"{created.name} is not a name the replica scope derives"
        leader = leaders.get(group_of(created.name))
        assert leader is not None, f"no live leader of {created.name}'s group"
        assert leader.domain == created.name, f"no live leader records {created.name}"
        assert workload is not None
        assert workload.opted_in or leader.revision == REVISIONS[0], f"{leader.name}'s group is not managed"
    by_name = {p.name: p for p in snapshot.pods}
    for ref in plan.ungate:
        pod = by_name[ref.name]
        assert not pod.terminal
        assert not pod.deleting
        found = snapshot.domains.get(str(pod.domain))
        assert found is not None, f"{pod.name} released onto {pod.domain}, which does not exist"
        assert workload is not None
        assert found.owner_uid == workload.uid
        assert ours(found)
        assert not found.deleting
        assert not found.condemned
        assert found.claim_template in snapshot.existing_templates
        own_leader = leaders.get(pod.group)
        assert own_leader is not None, f"{pod.name} has no live leader"
        assert own_leader.domain == pod.domain, f"{pod.name} is not on its leader's domain"


@PURE_SEARCH
@given(snapshot=snapshots())
def test_every_live_leader_of_a_managed_group_gets_its_domain(snapshot: planner.Snapshot) -> None:
    """Liveness: a live leader of an opted-in LWS, or of a revision that was opted in, recording a name the scope
    derives for its group that no object holds, gets that domain created (or its pods stay Pending forever)."""
    plan = planner.plan(snapshot)
    workload = snapshot.workload
    if not snapshot.gate_enabled or workload is None or workload.deleting:
        return
    created = {d.name for d in plan.create}
    for leader in snapshot.pods:
        if (
            leader.is_leader
            and not leader.terminal
            and not leader.deleting
            and leader.domain is not None
            and names.replica_domain_token(leader.domain, LWS, leader.group) is not None
            and leader.domain not in snapshot.domains
            and (workload.opted_in or leader.revision == REVISIONS[0])
        ):
            assert leader.domain in created, f"{leader.name}'s domain {leader.domain} is not created"
