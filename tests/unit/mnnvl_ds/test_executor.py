"""How a slice plan reaches the API (an in-memory one): domains created as the user contract says, deleted only
by the fenced deletion, and never a domain that is not ours."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains as facts
from mnnvl_api.decisions import plans
from mnnvl_ds import planner, scope
from mnnvl_ds.retries import UpstreamRetries
from mnnvl_runtime import domain_writer, scopes

from ..mnnvl_runtime.memory_api import MemoryApi
from . import build

D0 = build.domain_name(0)


def run(api: MemoryApi, snapshot: planner.Snapshot, plan: plans.Plan) -> float | None:
    """Apply `plan` as mnnvl-ds does, with the snapshot's DisaggregatedSet in the API (creates read it afresh)."""
    if snapshot.workload is not None and api.get(keys.DS_PLURAL, build.NS, build.DS) is None:
        api.put(
            keys.DS_PLURAL,
            {"metadata": {"name": build.DS, "namespace": build.NS}},
            manager="user",
            uid=snapshot.workload.uid,
        )
    writer = domain_writer.DomainWriter(
        api.client(keys.DS_CONTROLLER), component=keys.DS_CONTROLLER, scope=keys.SCOPE_SLICE, fence_seconds=0
    )
    asking = UpstreamRetries(api.client(keys.DS_CONTROLLER), may_write=lambda: True)
    return asyncio.run(scopes.ScopeExecutor(scope.SCOPE, writer, asking).apply(snapshot, plan))


def stored(api: MemoryApi, name: str) -> dict[str, Any] | None:
    return api.get(keys.COMPUTE_DOMAIN_PLURAL, build.NS, name)


def test_a_slice_domain_is_created_with_numnodes_0_the_finalizer_our_labels_and_no_owner_reference() -> None:
    api = MemoryApi()
    snapshot = build.snapshot(children=(build.child_facts(0),))
    run(api, snapshot, planner.plan(snapshot))
    created = stored(api, D0)
    assert created is not None
    assert created["spec"] == {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{D0}-channel"}}}
    assert created["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]
    assert created["metadata"]["labels"] == planner.domain_labels(build.workload(), (0, build.REVISION))
    assert "ownerReferences" not in created["metadata"]
    found = facts.facts_of(created)
    assert planner.is_ours(found, build.DS)
    assert found.managed  # the guardian protects it


def test_an_obsolete_domain_is_condemned_then_deleted_and_a_foreign_one_never() -> None:
    api = MemoryApi()
    mine = api.put(keys.COMPUTE_DOMAIN_PLURAL, build.domain_object(1), manager=keys.DS_CONTROLLER)
    foreign_name = build.domain_name(2)
    foreign = api.put(
        keys.COMPUTE_DOMAIN_PLURAL,
        {
            "metadata": {
                "name": foreign_name,
                "namespace": build.NS,
                "labels": planner.domain_labels(build.workload(), (2, build.REVISION)),
            },
            "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(foreign_name)}}},
        },
        manager="kubectl",
    )
    snapshot = build.snapshot(domains_=(facts.facts_of(mine), facts.facts_of(foreign)), gone=True)
    plan = plans.Plan(delete=(mine["metadata"]["name"], foreign_name))
    assert run(api, snapshot, plan) == 0  # condemned: come back once the fence has passed
    run(api, snapshot, plan)
    assert stored(api, mine["metadata"]["name"]) is not None  # held by its finalizer, being deleted
    assert mine["metadata"]["name"] in api.deleted_domains
    assert [t.users for t in api.teardowns] == [()]
    kept = stored(api, foreign_name)
    assert kept is not None
    assert kept["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]


# --- asking upstream to retry -----------------------------------------------------------------------------

ASKED_AT = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)


def put_set(api: MemoryApi, annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": build.DS, "namespace": build.NS}
    if annotations is not None:
        meta["annotations"] = annotations
    return api.put(keys.DS_PLURAL, {"metadata": meta, "spec": {"roles": []}}, manager="kubectl")


def requested(api: MemoryApi) -> str | None:
    stored_set = api.get(keys.DS_PLURAL, build.NS, build.DS)
    assert stored_set is not None
    value: str | None = (stored_set["metadata"].get("annotations") or {}).get(keys.RECONCILE_REQUESTED_ANNOTATION)
    return value


class Retries:
    def __init__(self, api: MemoryApi, *, may_write: bool = True) -> None:
        self.retries = UpstreamRetries(
            api.client(keys.DS_CONTROLLER), may_write=lambda: may_write, now=lambda: ASKED_AT
        )

    def after(self, snapshot: planner.Snapshot) -> None:
        asyncio.run(self.retries.after(snapshot))


@pytest.mark.parametrize("annotations", [None, {"team": "serving"}], ids=["no-annotations", "annotations"])
def test_upstream_is_asked_once_per_term_by_an_annotation_that_keeps_the_others(
    annotations: dict[str, str] | None,
) -> None:
    api = MemoryApi()
    created = put_set(api, annotations)
    retries = Retries(api)
    snapshot = build.snapshot(workload_=build.workload(uid=created["metadata"]["uid"]))
    retries.after(snapshot)
    assert requested(api) == "2026-11-30T12:00:00Z"
    stored_set = api.get(keys.DS_PLURAL, build.NS, build.DS)
    assert stored_set is not None
    assert stored_set["metadata"]["annotations"] == {
        **(annotations or {}),
        keys.RECONCILE_REQUESTED_ANNOTATION: "2026-11-30T12:00:00Z",
    }
    version = stored_set["metadata"]["resourceVersion"]
    retries.after(snapshot)  # our own write comes back as an event: no second request, no loop
    assert api.get(keys.DS_PLURAL, build.NS, build.DS)["metadata"]["resourceVersion"] == version  # type: ignore[index]
    retries.retries.on_lease_change(True)  # a new term
    retries.after(snapshot)
    assert api.get(keys.DS_PLURAL, build.NS, build.DS)["metadata"]["resourceVersion"] != version  # type: ignore[index]


def test_another_incarnation_of_the_name_is_never_annotated() -> None:
    api = MemoryApi()
    put_set(api, None)
    Retries(api).after(build.snapshot(workload_=build.workload(uid="an-earlier-incarnation")))
    assert requested(api) is None


def test_nothing_is_written_once_the_lease_may_have_passed() -> None:
    api = MemoryApi()
    created = put_set(api, None)
    retries = Retries(api, may_write=False)
    retries.after(build.snapshot(workload_=build.workload(uid=created["metadata"]["uid"])))
    assert requested(api) is None


def test_the_sets_a_foreign_domain_held_back_are_known_by_its_name_so_its_deletion_reaches_them() -> None:
    api = MemoryApi()
    created = put_set(api, None)
    retries = Retries(api)
    foreign = build.domain(build.domain_name(2), owner_uid=None, manager=None, workload_name=None)
    held = build.snapshot(
        children=(build.child_facts(0), build.child_facts(1)),
        domains_=(build.domain(slice_index=0), build.domain(slice_index=1), foreign),
        workload_=build.workload(uid=created["metadata"]["uid"], slices=3),
    )
    retries.after(held)
    assert retries.retries.on_domain_deleted(build.NS, foreign.name) == [(build.NS, build.DS)]
    assert retries.retries.on_domain_deleted("elsewhere", foreign.name) == []
    version = api.get(keys.DS_PLURAL, build.NS, build.DS)["metadata"]["resourceVersion"]  # type: ignore[index]
    freed = dataclasses.replace(held, domains={n: d for n, d in held.domains.items() if n != foreign.name})
    retries.after(freed)  # asked this term already, but the slice is free now
    assert api.get(keys.DS_PLURAL, build.NS, build.DS)["metadata"]["resourceVersion"] != version  # type: ignore[index]
    assert retries.retries.on_domain_deleted(build.NS, foreign.name) == []
