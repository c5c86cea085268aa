"""The pod webhook's decision with its fresh reads, on an in-memory API: whose pods it manages."""

from __future__ import annotations

import asyncio
from typing import Any

import jsonpatch
import kopf
import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_lws import pod_admission, rules, state

from ..mnnvl_api import domain_builders
from ..mnnvl_runtime import relist
from ..mnnvl_runtime.memory_api import MemoryApi
from . import build


def admit(api: MemoryApi, stores: state.Stores, pod: dict[str, Any]) -> injection.PodAdmission:
    return asyncio.run(pod_admission.admit_pod(api.client(keys.LWS_CONTROLLER), stores, pod, token="bcdfg"))


def api_with(lws: dict[str, Any]) -> MemoryApi:
    api = MemoryApi()
    api.put(keys.LWS_PLURAL, {"metadata": {**lws["metadata"]}}, manager="kubectl")
    return api


def test_a_leader_of_a_workload_that_did_not_opt_in_is_left_alone() -> None:
    """Its pods may carry the scope label (a stale revision, or a hand-made pod), but nothing would ungate it."""
    admitted = admit(api_with(build.lws()), state.Stores(), build.pod("deepseek-r1-0"))
    assert (admitted.patch, admitted.errors, admitted.gated) == ([], [], False)


def test_a_leader_of_an_opted_in_workload_gets_a_fresh_domain_and_the_gate_even_before_the_stores_know_it() -> None:
    admitted = admit(api_with(build.opted_in()), state.Stores(), build.pod("deepseek-r1-0"))
    assert admitted.domain == names.replica_domain_name("deepseek-r1", 0, "bcdfg")
    assert admitted.gated
    assert admitted.targets == ("vllm",)


def test_a_leader_of_a_leaderworkerset_that_is_gone_is_refused_until_its_statefulset_is_collected() -> None:
    """Its StatefulSet outlives the LeaderWorkerSet until the garbage collector deletes it; a pod it makes from a
    stamped template would otherwise run without its claim."""
    with pytest.raises(kopf.AdmissionError, match='LeaderWorkerSet "deepseek-r1" of this pod no longer exists'):
        admit(MemoryApi(), state.Stores(), build.pod("deepseek-r1-0"))


# --- a worker's leader and domain, read afresh ----------------------------------------------------------

DOMAIN = names.replica_domain_name("deepseek-r1", 0, "x7k2b")


def stored_uid(api: MemoryApi, plural: str, name: str) -> str:
    stored = api.get(plural, "serving", name)
    assert stored is not None
    uid: str = stored["metadata"]["uid"]
    return uid


def running_group(api: MemoryApi, *, recorded: str | None = DOMAIN) -> dict[str, Any]:
    """Group 0 of the LeaderWorkerSet in `api`: its leader admitted onto DOMAIN (claim and record) and running,
    its worker StatefulSet, and DOMAIN made by mnnvl-lws for that LeaderWorkerSet. The leader's record is then
    `recorded` (someone may edit or remove it). Returns the worker pod to admit."""
    record = {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: recorded} if recorded is not None else {}
    leader = build.pod("deepseek-r1-0", annotations=record)
    leader["spec"]["resourceClaims"] = [
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(DOMAIN)}
    ]
    leader["status"] = {"phase": "Running"}
    api.put("pods", leader, manager="kubelet")
    owner = {
        "kind": "Pod",
        "name": "deepseek-r1-0",
        "uid": stored_uid(api, "pods", "deepseek-r1-0"),
        "controller": True,
    }
    api.put(
        "statefulsets",
        {"metadata": {"name": "deepseek-r1-0", "namespace": "serving", "ownerReferences": [owner]}},
        manager="lws",
    )
    domain = domain_builders.domain_object(DOMAIN)
    domain["metadata"]["labels"][keys.OWNER_UID_LABEL] = stored_uid(api, keys.LWS_PLURAL, "deepseek-r1")
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain, manager=keys.LWS_CONTROLLER)
    worker = build.pod("deepseek-r1-0-1", leader="deepseek-r1-0")
    sts = {
        "kind": "StatefulSet",
        "name": "deepseek-r1-0",
        "uid": stored_uid(api, "statefulsets", "deepseek-r1-0"),
        "controller": True,
    }
    worker["metadata"]["ownerReferences"] = [sts]
    return worker


def test_a_worker_joins_its_leaders_ready_domain_and_runs_at_once() -> None:
    api = api_with(build.opted_in())
    worker = running_group(api)
    stores = state.Stores()
    relist.replay(api, {keys.LWS_PLURAL: stores.workload_mirror, "resourceclaimtemplates": stores.template_mirror})
    admitted = admit(api, stores, worker)
    assert (admitted.domain, admitted.gated) == (DOMAIN, False)


@pytest.mark.parametrize(
    "new_seen",
    [
        pytest.param(True, id="stores-hold-both-incarnations-the-stale-one-first"),
        pytest.param(False, id="stores-hold-only-the-stale-incarnation"),
    ],
)
def test_a_worker_of_a_recreated_leaderworkerset_joins_its_ready_domain_though_the_stores_hold_the_old_one(
    new_seen: bool,
) -> None:
    """The LeaderWorkerSet was deleted and created again under its name; a relist lost the old one's DELETED
    event (and, unless `new_seen`, the new one's ADDED event). The domain is the new one's, and ready."""
    api = api_with(build.opted_in())
    stale = stored_uid(api, keys.LWS_PLURAL, "deepseek-r1")
    api.delete(keys.LWS_PLURAL, "serving", "deepseek-r1")
    api.put(keys.LWS_PLURAL, {"metadata": {**build.opted_in()["metadata"]}}, manager="kubectl")
    fresh = stored_uid(api, keys.LWS_PLURAL, "deepseek-r1")
    worker = running_group(api)
    stores = state.Stores()
    relist.replay(
        api,
        {keys.LWS_PLURAL: stores.workload_mirror, "resourceclaimtemplates": stores.template_mirror},
        lost=lambda event: event == (keys.LWS_PLURAL, "DELETED", stale) or (not new_seen and event[2] == fresh),
    )
    assert len(stores.workloads.get(("serving", "deepseek-r1"))) == (2 if new_seen else 1)  # the old one is there
    admitted = admit(api, stores, worker)
    assert (admitted.domain, admitted.gated) == (DOMAIN, False)


@pytest.mark.parametrize(
    "recorded",
    [
        pytest.param(names.replica_domain_name("deepseek-r1", 1, "x7k2b"), id="another-groups-domain"),
        pytest.param(names.replica_domain_name("deepseek-r1", 0, "bcdfg"), id="another-domain-of-its-group"),
        pytest.param("someone-elses-domain", id="a-name-mnnvl-never-derives"),
        pytest.param(None, id="record-removed"),
    ],
)
def test_a_leader_whose_record_was_edited_after_admission_cannot_steer_its_worker(recorded: str | None) -> None:
    api = api_with(build.opted_in())
    worker = running_group(api, recorded=recorded)
    with pytest.raises(kopf.AdmissionError, match="it was changed after admission") as refused:
        admit(api, state.Stores(), worker)
    assert f'leader pod "deepseek-r1-0" ({recorded or "missing"})' in str(refused.value)


def group_of_a_leader_without_domain(api: MemoryApi) -> dict[str, Any]:
    """Group 0 whose leader records no domain and holds no claim (admitted while the gate was off, or while its
    LeaderWorkerSet was not opted in); the worker to admit, of revision "old"."""
    worker = running_group(api, recorded=None)
    api.update("pods", "serving", "deepseek-r1-0", lambda leader: leader["spec"].pop("resourceClaims"))
    worker["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL] = "old"
    return worker


def test_a_worker_of_a_leader_without_domain_runs_alone_only_while_its_workload_has_not_opted_in() -> None:
    api = api_with(build.lws())
    admitted = admit(api, state.Stores(), group_of_a_leader_without_domain(api))
    assert (admitted.patch, admitted.errors, admitted.gated) == ([], [], False)


@pytest.mark.parametrize("how", ["the-leaderworkerset-opted-in", "upstream-recorded-its-revision-stamped"])
def test_a_worker_of_a_leader_without_domain_waits_when_its_workload_opted_in(how: str) -> None:
    """It would run without the claim it was stamped for (a group begun while the gate was off, or a leader upstream
    made from a template that had not opted in while its workers came from one that had)."""
    if how == "the-leaderworkerset-opted-in":
        api = api_with(build.opted_in())
    else:
        api, uid = opted_out()
        api.put("controllerrevisions", stamped_revision("old", uid=uid), manager="lws-manager")
    with pytest.raises(kopf.AdmissionError) as refused:
        admit(api, state.Stores(), group_of_a_leader_without_domain(api))
    assert str(refused.value).startswith(
        'leader pod "deepseek-r1-0" has no ComputeDomain while LeaderWorkerSet "deepseek-r1" is opted in; it is '
        "created once the leader is replaced"
    )


def opted_out() -> tuple[MemoryApi, str]:
    """An LWS that opted out (a new, unstamped revision "new" rolls), and its uid; upstream recorded "new"."""
    api = api_with(build.lws())
    uid = str(api.objects[(keys.LWS_PLURAL, "serving", "deepseek-r1")]["metadata"]["uid"])
    api.put("controllerrevisions", build.controller_revision(build.lws(), "new", uid=uid), manager="lws-manager")
    return api, uid


def stamped_revision(revision_hash: str, *, uid: str) -> dict[str, Any]:
    """Upstream's record of a revision made while the LWS was opted in: its templates carry our stamps."""
    lws = build.opted_in()
    patched: dict[str, Any] = jsonpatch.apply_patch(lws, rules.template_patch(lws, build.ENV_ON))
    return build.controller_revision(patched, revision_hash, uid=uid)


def test_after_opting_out_a_restarted_leader_of_an_opted_in_revision_keeps_its_claim_and_gate() -> None:
    """Upstream recreates a group the rollout has not reached from its old, stamped template."""
    api, uid = opted_out()
    api.put("controllerrevisions", stamped_revision("old", uid=uid), manager="lws-manager")
    admitted = admit(api, state.Stores(), build.pod("deepseek-r1-0", revision="old"))
    assert admitted.domain == names.replica_domain_name("deepseek-r1", 0, "bcdfg")
    assert admitted.gated
    assert admitted.targets == ("vllm",)


@pytest.mark.parametrize(
    ("revision_label", "recorded_for"),
    [
        pytest.param("new", "this-lws", id="of-the-new-unstamped-revision"),
        pytest.param(None, "this-lws", id="without-a-revision-label"),
        pytest.param("old", "uid-of-an-earlier-lws-of-the-same-name", id="stamped-for-an-earlier-lws"),
    ],
)
def test_after_opting_out_a_leader_is_left_alone_unless_upstream_recorded_its_revision_stamped(
    revision_label: str | None, recorded_for: str
) -> None:
    api, uid = opted_out()
    owner = uid if recorded_for == "this-lws" else recorded_for
    api.put("controllerrevisions", stamped_revision("old", uid=owner), manager="lws-manager")
    admitted = admit(api, state.Stores(), build.pod("deepseek-r1-0", revision=revision_label))
    assert (admitted.patch, admitted.errors, admitted.gated) == ([], [], False)


# --- the domain a leader's admission names, created at once ------------------------------------------------


def start_for(api: MemoryApi, stores: state.Stores, pod: dict[str, Any]) -> tuple[rules.DomainStart | None, bool]:
    """The webhook's admission of `pod`, then its background create: what it would start, and whether it did."""
    admitted = admit(api, stores, pod)
    start = rules.domain_to_start(pod, admitted)
    if start is None:
        return None, False
    client = api.client(keys.LWS_CONTROLLER)
    return start, asyncio.run(pod_admission.create_for_leader(client, stores, start, component="mnnvl-lws-test"))


def test_a_new_leaders_domain_is_created_at_admission_for_the_leaderworkerset_as_it_is_now() -> None:
    """The stores still hold an earlier LeaderWorkerSet of that name: the domain is made for the one read afresh, or
    it would belong to another workload and the leader would wait for ever."""
    api = api_with(build.opted_in())
    stale = state.Stores()
    stale.apply_workload("uid-earlier", {**build.opted_in(), "metadata": {**build.opted_in()["metadata"], "uid": "x"}})
    start, created = start_for(api, stale, build.pod("deepseek-r1-1"))
    assert start == rules.DomainStart(
        namespace="serving", lws="deepseek-r1", group=1, domain=names.replica_domain_name("deepseek-r1", 1, "bcdfg")
    )
    assert created
    domain = api.get(keys.COMPUTE_DOMAIN_PLURAL, "serving", start.domain)
    assert domain is not None
    labels = domain["metadata"]["labels"]
    assert labels[keys.OWNER_UID_LABEL] == stored_uid(api, keys.LWS_PLURAL, "deepseek-r1")
    assert labels[keys.GROUP_INDEX_LABEL] == "1"
    assert domain["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]


def test_nothing_is_started_for_a_worker_a_reinvocation_or_a_leader_left_alone() -> None:
    api = api_with(build.opted_in())
    worker = running_group(api)
    assert admit(api, state.Stores(), worker).domain == DOMAIN
    assert start_for(api, state.Stores(), worker) == (None, False)
    reinvoked = build.pod("deepseek-r1-1", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "deepseek-r1-1-bbbbb"})
    assert start_for(api, state.Stores(), reinvoked) == (None, False)
    assert start_for(api_with(build.lws()), state.Stores(), build.pod("deepseek-r1-1")) == (None, False)


def test_a_domain_the_planner_created_first_is_left_as_it_is() -> None:
    api = api_with(build.opted_in())
    name = names.replica_domain_name("deepseek-r1", 1, "bcdfg")
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_builders.domain_object(name, group=1), manager=keys.LWS_CONTROLLER)
    before = api.get(keys.COMPUTE_DOMAIN_PLURAL, "serving", name)
    assert start_for(api, state.Stores(), build.pod("deepseek-r1-1"))[1] is False
    assert api.get(keys.COMPUTE_DOMAIN_PLURAL, "serving", name) == before
