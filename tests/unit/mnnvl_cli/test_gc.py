"""`kubectl mnnvl gc`: which domains are orphans (pure), and how `--apply` collects them (against the in-memory API
server the controllers' own deletion is tested on)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import references
from mnnvl_api.models import configuration as configuration_file
from mnnvl_cli import gc, release
from mnnvl_runtime import kube

from ..mnnvl_api.domain_builders import UID
from ..mnnvl_runtime.memory_api import MemoryApi
from . import objects

GONE = "6f1c1e0a-0000-4000-8000-00000000dead"
ORPHAN = "deepseek-r1-0-bcdfg"
FENCE = 0.05


def test_a_domain_whose_workload_is_gone_is_an_orphan_and_its_users_are_named() -> None:
    snapshot = objects.cluster(
        leaderworkersets=[objects.lws()],
        pods=[objects.pod("old-0", domain="old-1-bcdfg")],
        domains=[
            objects.domain(ORPHAN, owner_uid=GONE),
            objects.domain("old-1-bcdfg", owner_uid=GONE),
            objects.domain("deepseek-r1-0-hjklm"),  # its workload exists
        ],
    )
    found = {o.name: o for o in gc.orphans(snapshot)}
    assert set(found) == {ORPHAN, "old-1-bcdfg"}
    assert (found[ORPHAN].action, found[ORPHAN].users) == (gc.Action.DELETE, [])
    assert (found["old-1-bcdfg"].action, found["old-1-bcdfg"].users) == (gc.Action.KEEP, ["old-0"])


def test_domains_mnnvl_did_not_make_are_never_orphans() -> None:
    snapshot = objects.cluster(
        domains=[
            objects.foreign_domain("by-hand"),
            objects.domain("look-alike", owner_uid=GONE, created_by="kubectl"),  # our labels, written by a user
            objects.domain("other-manager", owner_uid=GONE, manager="someone-else"),
        ]
    )
    assert gc.orphans(snapshot) == []


def test_a_deleting_orphan_no_pod_uses_is_released_and_one_nothing_holds_is_left_to_the_driver() -> None:
    held = objects.domain(ORPHAN, owner_uid=GONE, deleting=True)
    unheld = objects.domain("unheld-0-bcdfg", owner_uid=GONE, deleting=True)
    unheld["metadata"]["finalizers"] = []
    [found] = gc.orphans(objects.cluster(domains=[held, unheld]))
    assert (found.name, found.action) == (ORPHAN, gc.Action.RELEASE)


def test_without_the_disaggregated_set_api_a_slice_domain_is_an_orphan_unless_a_child_names_its_set() -> None:
    domain = objects.domain("llm-serving-0-251a724d", owner_uid=objects.DS_UID, manager=keys.DS_CONTROLLER)
    [found] = gc.orphans(objects.cluster(disaggregatedsets=None, domains=[domain]))
    assert found.manager == keys.DS_CONTROLLER
    # A child LeaderWorkerSet whose controller is the set: the set lives, whatever discovery says.
    alive = objects.cluster(disaggregatedsets=None, leaderworkersets=[objects.child_lws("prefill")], domains=[domain])
    assert gc.orphans(alive) == []


@st.composite
def clusters(draw: st.DrawFn) -> Any:
    """Domains of live and gone workloads, ours or not, and pods using some of them in any phase."""
    domains = []
    for index in range(draw(st.integers(0, 5))):
        name = f"d{index}-0-bcdfg"
        owner = draw(st.sampled_from([UID, GONE]))
        kind = draw(st.sampled_from(["ours", "look-alike", "foreign"]))
        body = (
            objects.foreign_domain(name)
            if kind == "foreign"
            else objects.domain(name, owner_uid=owner, created_by=None if kind == "ours" else "kubectl")
        )
        if draw(st.booleans()):
            body["metadata"]["deletionTimestamp"] = "2026-12-04T10:05:00Z"
        domains.append(body)
    pods = [
        objects.pod(f"p{i}", domain=draw(st.sampled_from([d["metadata"]["name"] for d in domains])), phase=phase)
        for i, phase in enumerate(draw(st.lists(st.sampled_from(["Running", "Pending", "Succeeded"]), max_size=4)))
        if domains
    ]
    return objects.cluster(leaderworkersets=[objects.lws()], pods=pods, domains=domains)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_gc_plans_writes_only_to_our_domains_of_gone_workloads_that_no_live_pod_uses(snapshot: Any) -> None:
    for orphan in gc.orphans(snapshot):
        [body] = [d for d in snapshot.domains if d["metadata"]["name"] == orphan.name]
        labels = body["metadata"].get("labels") or {}
        assert labels.get(keys.OWNER_UID_LABEL) == GONE
        assert body["metadata"]["managedFields"][0]["manager"] == keys.LWS_CONTROLLER
        users = [
            p["metadata"]["name"]
            for p in snapshot.pods
            if references.is_non_terminal(p) and references.recorded_domain(p) == orphan.name
        ]
        assert orphan.users == users
        assert (orphan.action is gc.Action.KEEP) == bool(users)


# --- --apply, against the in-memory API server ---------------------------------------------------------


def api_with_orphan() -> MemoryApi:
    api = MemoryApi()
    body = objects.domain(ORPHAN, owner_uid=GONE)
    for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp"):
        body["metadata"].pop(key)
    api.put(keys.COMPUTE_DOMAIN_PLURAL, body, manager=keys.LWS_CONTROLLER)
    return api


def plan(api: MemoryApi) -> list[gc.Orphan]:
    return gc.orphans(objects.cluster(domains=api.view(keys.COMPUTE_DOMAIN_PLURAL)))


def user_pod(name: str = "late") -> dict[str, Any]:
    pod = objects.pod(name, domain=ORPHAN)
    pod["metadata"].pop("labels")
    return pod


def test_apply_deletes_an_unused_orphan_and_releases_it() -> None:
    api = api_with_orphan()
    outcome = asyncio.run(gc.collect(api.client(keys.CLI), plan(api), fence=FENCE))
    assert outcome == {f"{objects.NS}/{ORPHAN}": "deleted and released"}
    assert api.get(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN) is None


def test_a_pod_that_appears_during_the_fence_keeps_the_domain() -> None:
    api = api_with_orphan()
    found = plan(api)

    async def scenario() -> dict[str, str]:
        collecting = asyncio.create_task(gc.collect(api.client(keys.CLI), found, fence=FENCE))
        while (
            not (api.peek(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN) or {})
            .get("metadata", {})
            .get("annotations", {})
            .get(keys.CONDEMNED_ANNOTATION)
        ):
            await asyncio.sleep(0.001)  # until the mark is set: the pod comes in while the fence runs
        api.put("pods", user_pod(), manager="kube-controller-manager")
        return await collecting

    outcome = asyncio.run(scenario())
    assert outcome == {f"{objects.NS}/{ORPHAN}": "kept: used by late"}
    kept = api.get(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN)
    assert kept is not None
    assert not kept["metadata"].get("deletionTimestamp")
    assert keys.CONDEMNED_ANNOTATION not in kept["metadata"].get("annotations", {})  # pods are admitted onto it again


def test_a_same_named_successor_is_left_alone() -> None:
    api = api_with_orphan()
    found = plan(api)
    api.delete(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN)
    api.update(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN, lambda b: b["metadata"].update(finalizers=[]))
    # The same name and owner, made again (by a controller whose cache had not yet seen the workload go): not the
    # domain the user was shown, so not this run's to delete.
    successor = objects.domain(ORPHAN, owner_uid=GONE)
    for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp"):
        successor["metadata"].pop(key)
    api.put(keys.COMPUTE_DOMAIN_PLURAL, successor, manager=keys.LWS_CONTROLLER)
    outcome = asyncio.run(gc.collect(api.client(keys.CLI), found, fence=FENCE))
    assert outcome == {f"{objects.NS}/{ORPHAN}": "left: it changed or went meanwhile"}
    assert api.get(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN) is not None


def test_an_orphan_whose_workload_is_found_afresh_is_kept() -> None:
    api = api_with_orphan()
    found = plan(api)
    workload = copy.deepcopy(objects.lws(uid=GONE))
    workload["metadata"].pop("uid")
    created = api.put(keys.LWS_PLURAL, workload, manager="kubectl")
    found = [o.model_copy(update={"owner_uid": created["metadata"]["uid"]}) for o in found]
    outcome = asyncio.run(gc.collect(api.client(keys.CLI), found, fence=FENCE))
    assert outcome == {f"{objects.NS}/{ORPHAN}": "kept: its workload exists after all"}


@pytest.mark.parametrize("configured", [[], [3.0, 61.0]])
def test_the_fence_is_the_longest_a_scope_controller_uses(configured: list[float]) -> None:
    controllers = [
        release.InstalledController(
            controller=keys.LWS_CONTROLLER if i == 0 else keys.DS_CONTROLLER,
            namespace="mnnvl-system",
            component_name="mnnvl-x",
            config_map="mnnvl-x-configuration",
            configuration=configuration_file.Configuration.model_validate(
                {"computeDomain": {"deletionFenceSeconds": fence, "apiServerRequestTimeoutSeconds": 1}}
            ),
        )
        for i, fence in enumerate(configured)
    ]
    fence = gc.fence_of(controllers)
    assert fence.seconds == (max(configured) if configured else gc.DEFAULT_FENCE_SECONDS)
    assert ("default" in fence.source) == (not configured)


def test_without_the_configurations_the_fence_is_the_default_and_says_why() -> None:
    fence = gc.fence_of(None)
    assert (fence.seconds, fence.source) == (
        gc.DEFAULT_FENCE_SECONDS,
        "the controllers' default (you may not read them)",
    )


def test_a_refused_write_is_that_orphans_outcome_and_the_others_are_still_collected() -> None:
    api = api_with_orphan()
    second = objects.domain("other-0-bcdfg", owner_uid=GONE)
    for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp"):
        second["metadata"].pop(key)
    api.put(keys.COMPUTE_DOMAIN_PLURAL, second, manager=keys.LWS_CONTROLLER)
    found = plan(api)
    client = api.client(keys.CLI)
    deleting = client.adelete

    async def refuse_one(path: str, *, uid: str | None = None, resource_version: str | None = None) -> bool:
        if path.endswith(f"/{ORPHAN}"):
            raise kube.ApiError(status=403, reason="Forbidden", body='{"message": "you may not delete it"}')
        return await deleting(path, uid=uid, resource_version=resource_version)

    client.adelete = refuse_one  # type: ignore[method-assign]
    outcome = asyncio.run(gc.collect(client, found, fence=FENCE))
    assert outcome[f"{objects.NS}/{ORPHAN}"].startswith("failed: writing ComputeDomain")
    assert "forbidden" in outcome[f"{objects.NS}/{ORPHAN}"]
    assert outcome[f"{objects.NS}/other-0-bcdfg"] == "deleted and released"
    assert gc.failed(outcome) == [f"{objects.NS}/{ORPHAN}"]


def test_an_interrupted_apply_lifts_its_own_marks_only() -> None:
    api = api_with_orphan()
    found = plan(api)

    async def interrupted() -> None:
        collecting = asyncio.create_task(gc.collect(api.client(keys.CLI), found, fence=60))
        while keys.CONDEMNED_ANNOTATION not in (
            (api.peek(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN) or {}).get("metadata", {}).get("annotations")
            or {}
        ):
            await asyncio.sleep(0.001)
        collecting.cancel()

    asyncio.run(interrupted())
    assert asyncio.run(gc.lift_own_marks(api.client(keys.CLI), found)) == [f"{objects.NS}/{ORPHAN}"]
    kept = api.get(keys.COMPUTE_DOMAIN_PLURAL, objects.NS, ORPHAN)
    assert kept is not None
    assert keys.CONDEMNED_ANNOTATION not in (kept["metadata"].get("annotations") or {})
    # A controller's mark is not this tool's to lift.
    api.update(
        keys.COMPUTE_DOMAIN_PLURAL,
        objects.NS,
        ORPHAN,
        lambda b: b["metadata"].setdefault("annotations", {}).update({keys.CONDEMNED_ANNOTATION: "mnnvl-lws/abc"}),
    )
    assert asyncio.run(gc.lift_own_marks(api.client(keys.CLI), found)) == []
