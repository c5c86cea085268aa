"""The watch stores of mnnvl-ds: what each event tells the planner, and which DisaggregatedSet it concerns."""

from __future__ import annotations

import copy
from typing import Any

from mnnvl_api import keys
from mnnvl_api.decisions import plans
from mnnvl_ds import planner, state

from . import build

KEY = (build.NS, build.DS)
D0 = build.domain_name(0)


def observed(*objects: tuple[str, dict[str, Any]]) -> state.Stores:
    stores = state.Stores()
    mirrors = {
        "ds": stores.workload_mirror,
        "lws": stores.child_mirror,
        "pod": stores.pod_mirror,
        "cd": stores.domain_mirror,
        "rct": stores.template_mirror,
    }
    for kind, body in objects:
        mirrors[kind].observe(body, deleted=False)
    return stores


def template(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": build.NS, "uid": f"uid-{name}"}}


def test_every_object_of_a_set_is_filed_under_the_set() -> None:
    stores = state.Stores()
    assert stores.workload_mirror.observe(build.seed_example(), deleted=False) == [KEY]
    assert stores.child_mirror.observe(build.child(), deleted=False) == [KEY]
    assert stores.pod_mirror.observe(build.pod(build.child()), deleted=False) == [KEY]
    assert stores.domain_mirror.observe(build.domain_object(), deleted=False) == [KEY]
    assert stores.template_mirror.observe(template(f"{D0}-channel"), deleted=False) == [KEY]
    assert stores.workload_keys() == [KEY]


def test_the_set_is_read_with_its_enrollment() -> None:
    stores = observed(("ds", build.seed_example()))
    assert stores.workload(*KEY) == build.workload()
    opted_out = observed(("ds", build.ds()))
    assert opted_out.workload(*KEY) == build.workload(opted_in=False)


def test_children_are_read_with_their_position_and_scope_and_a_missing_slice_label_is_slice_0() -> None:
    stores = observed(
        ("lws", build.child(slice_index=None)), ("lws", build.child("encoder", slice_index=1, stamped=False))
    )
    assert sorted(stores.snapshot(*KEY, gate_enabled=True).children, key=lambda c: c.slice) == [
        planner.Child(
            name=f"{build.DS}-{build.REVISION}-prefill",
            ds_name=build.DS,
            owner_uid=build.UID,
            slice=0,
            revision=build.REVISION,
            role="prefill",
            slice_scope=True,
        ),
        planner.Child(
            name=f"{build.DS}-1-{build.REVISION}-encoder",
            ds_name=build.DS,
            owner_uid=build.UID,
            slice=1,
            revision=build.REVISION,
            role="encoder",
            slice_scope=False,
        ),
    ]
    assert stores.child(build.NS, f"{build.DS}-{build.REVISION}-prefill") is not None


def test_a_leaderworkerset_not_controlled_by_its_set_is_not_a_child() -> None:
    stores = observed(("lws", build.child(owned=False)))
    assert stores.snapshot(*KEY, gate_enabled=True).children == ()


def test_a_deleted_child_leaves_the_stores() -> None:
    stores = observed(("lws", build.child()))
    assert stores.child_mirror.observe(build.child(), deleted=True) == [KEY]
    assert stores.snapshot(*KEY, gate_enabled=True).children == ()


def test_a_pod_is_read_with_its_recorded_domain_gate_and_claim() -> None:
    pod = build.pod(build.child(), annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: D0})
    pod["spec"]["schedulingGates"] = [{"name": "other"}, {"name": keys.SCHEDULING_GATE}]
    stores = observed(("pod", pod))
    [facts] = stores.snapshot(*KEY, gate_enabled=True).pods
    assert facts == planner.SlicePodFacts(
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        domain=D0,
        gate_at=1,
        terminal=False,
        deleting=False,
        missing_claim=True,
    )
    assert stores.gated_pods() == 1


def test_the_snapshot_holds_the_domains_named_for_the_sets_slices_whoever_made_them() -> None:
    foreign = {
        "metadata": {"name": D0, "namespace": build.NS, "uid": "uid-foreign", "resourceVersion": "3"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{D0}-channel"}}},
    }
    stores = observed(("ds", build.seed_example()), ("lws", build.child()), ("cd", foreign))
    snapshot = stores.snapshot(*KEY, gate_enabled=True)
    assert list(snapshot.domains) == [D0]
    assert [w.reason for w in planner.plan(snapshot).warnings] == ["UnexpectedComputeDomainOwner"]


def test_a_domain_a_running_pod_records_is_kept_and_its_pods_are_released_once_ready() -> None:
    pod = build.pod(build.child(), annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: D0})
    pod["spec"]["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    stores = observed(
        ("ds", build.seed_example()),
        ("lws", build.child()),
        ("pod", pod),
        ("cd", build.domain_object()),
        ("rct", template(f"{D0}-channel")),
    )
    plan = planner.plan(stores.snapshot(*KEY, gate_enabled=True))
    assert plan.ungate == (plans.PodRef(name=pod["metadata"]["name"], uid=pod["metadata"]["uid"], gate_at=0),)
    assert plan.delete == ()


def test_once_the_set_its_children_and_pods_are_gone_its_domain_is_deleted() -> None:
    pod = build.pod(build.child(), annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: D0})
    stores = observed(("ds", build.seed_example()), ("lws", build.child()), ("pod", pod), ("cd", build.domain_object()))
    stores.workload_mirror.observe(build.seed_example(), deleted=True)
    stores.child_mirror.observe(build.child(), deleted=True)
    assert planner.plan(stores.snapshot(*KEY, gate_enabled=True)).delete == ()
    finished = copy.deepcopy(pod)
    finished["status"]["phase"] = "Succeeded"
    stores.pod_mirror.observe(finished, deleted=False)
    assert planner.plan(stores.snapshot(*KEY, gate_enabled=True)).delete == (D0,)
    assert stores.workload_keys() == [KEY]


def test_the_snapshot_holds_the_domain_named_for_a_slice_whose_leaderworkersets_were_refused() -> None:
    name = build.domain_name(1)
    foreign = {
        "metadata": {"name": name, "namespace": build.NS, "uid": "uid-foreign", "resourceVersion": "3"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    stores = observed(("ds", build.seed_example()), ("lws", build.child()), ("cd", foreign))
    snapshot = stores.snapshot(*KEY, gate_enabled=True)
    assert name in snapshot.domains
    [warning] = planner.plan(snapshot).warnings
    assert warning.message.startswith(f"ComputeDomain {name} already exists and is not managed by mnnvl;")
