"""The watch stores: events of two incarnations of one pod name may be handled in any order."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_lws import planner, state

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
        stores.domain_mirror.observe(build.domain_object(name, group=2), deleted=False)
    for pod, deleted in events:
        stores.pod_mirror.observe(pod, deleted=deleted)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert snapshot.pods == ()
    assert planner.plan(snapshot).delete == tuple(sorted((D_OLD, D_NEW)))


def test_a_late_deletion_of_the_old_leader_does_not_hide_the_new_one() -> None:
    stores = state.Stores()
    stores.workload_mirror.observe(build.opted_in(), deleted=False)
    stores.domain_mirror.observe(build.domain_object(D_OLD, group=2), deleted=False)
    stores.pod_mirror.observe(leader("new", D_NEW), deleted=False)
    stores.pod_mirror.observe(leader("old", D_OLD), deleted=True)
    snapshot = stores.snapshot("serving", "deepseek-r1", gate_enabled=True)
    assert [p.domain for p in snapshot.pods] == [D_NEW]
    plan = planner.plan(snapshot)
    assert [c.name for c in plan.create] == [D_NEW]
    assert plan.delete == (D_OLD,)
