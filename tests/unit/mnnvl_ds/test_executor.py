"""How a slice plan reaches the API (an in-memory one): domains created as the user contract says, deleted only
by the fenced deletion, and never a domain that is not ours."""

from __future__ import annotations

import asyncio
from typing import Any

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains as facts
from mnnvl_api.decisions import plans
from mnnvl_ds import executor, planner
from mnnvl_runtime import domains

from ..safety.memory_api import MemoryApi
from . import build

D0 = build.domain_name(0)


def run(api: MemoryApi, snapshot: planner.Snapshot, plan: plans.Plan) -> float | None:
    writer = domains.DomainWriter(
        api.client(keys.DS_CONTROLLER), component=keys.DS_CONTROLLER, scope=keys.SCOPE_SLICE, fence_seconds=0
    )
    return asyncio.run(executor.Executor(writer).apply(snapshot, plan))


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
