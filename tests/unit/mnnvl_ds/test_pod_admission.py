"""The slice-scope pod webhook: pods of enrolled roles get the channel claim in their target containers and are
gated until their slice's domain is ready; pods of anything else are left alone."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import jsonpatch
import kopf
import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_ds import rules, slice_admission, state

from ..mnnvl_api import pods
from ..mnnvl_runtime import relist
from ..mnnvl_runtime.memory_api import MemoryApi
from . import build

D0 = build.domain_name(0)
GATE = {"name": keys.SCHEDULING_GATE}


def admitted(pod: dict[str, Any], result: injection.PodAdmission) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), result.patch)
    return patched


# --- the pure decision -----------------------------------------------------------------------------------


def test_a_pod_joining_a_ready_domain_gets_the_claim_in_its_gpu_containers_and_runs_at_once() -> None:
    pod = build.pod(build.child())
    result = rules.admit_pod(pod, domain=D0, domain_ready=True)
    after = admitted(pod, result)
    assert after["spec"]["resourceClaims"] == [
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(D0)}
    ]
    assert [c.get("resources", {}).get("claims") for c in after["spec"]["containers"]] == [
        [{"name": keys.CHANNEL_CLAIM_NAME}],
        None,
    ]
    assert after["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] == D0
    assert "schedulingGates" not in after["spec"]
    assert (result.domain, result.targets, result.gated) == (D0, ("vllm",), False)


def test_a_pod_joining_a_domain_that_is_not_ready_is_gated() -> None:
    pod = build.pod(build.child())
    result = rules.admit_pod(pod, domain=D0, domain_ready=False)
    assert admitted(pod, result)["spec"]["schedulingGates"] == [GATE]
    assert result.gated


def test_named_containers_are_targeted_exactly() -> None:
    pod = build.pod(build.child(), spec=pods.dra_gpu_spec(), annotations=pods.dra_gpu_annotations("vllm"))
    assert rules.admit_pod(pod, domain=D0, domain_ready=True).targets == ("vllm",)


def test_restartable_init_containers_requesting_gpus_are_targeted() -> None:
    pod = build.pod(build.child(), spec=pods.restartable_init_spec())
    assert rules.admit_pod(pod, domain=D0, domain_ready=True).targets == ("vllm", "nixl-agent")


def test_a_cpu_only_pod_records_its_domain_without_a_claim() -> None:
    pod = build.pod(build.child(), spec=pods.cpu_leader_spec())
    after = admitted(pod, rules.admit_pod(pod, domain=D0, domain_ready=True))
    assert after["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] == D0
    assert "resourceClaims" not in after["spec"]


def test_admission_is_idempotent() -> None:
    pod = build.pod(build.child())
    once = admitted(pod, rules.admit_pod(pod, domain=D0, domain_ready=False))
    assert rules.admit_pod(once, domain=D0, domain_ready=False).patch == []


def test_a_recorded_domain_that_is_not_the_slices_is_refused() -> None:
    pod = build.pod(build.child(), annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "llm-serving-1-3f9a0c2e"})
    [error] = rules.admit_pod(pod, domain=D0, domain_ready=True).errors
    assert str(error) == (
        'metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-name]: Invalid value: "llm-serving-1-3f9a0c2e": '
        f"not the ComputeDomain of this pod's slice and revision ({D0}); remove the annotation, it is set automatically"
    )


def test_a_missing_named_container_is_refused_naming_it() -> None:
    pod = build.pod(build.child(), annotations=pods.dra_gpu_annotations("proxy"))
    [error] = rules.admit_pod(pod, domain=D0, domain_ready=True).errors
    assert str(error) == (
        'metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: Invalid value: "proxy": '
        'no container named "proxy" (containers: "vllm", "routing-proxy"); name existing containers only'
    )


# --- with the reads it rests on ----------------------------------------------------------------------------


def api_with(*objects: tuple[str, dict[str, Any]]) -> MemoryApi:
    api = MemoryApi()
    for plural, body in objects:
        api.put(plural, copy.deepcopy(body), manager="kubectl")
    return api


def admit(
    api: MemoryApi, pod: dict[str, Any], stores: state.Stores | None = None, *, gate_enabled: bool = True
) -> injection.PodAdmission:
    client = api.client(keys.DS_CONTROLLER)
    return asyncio.run(slice_admission.admit_pod(client, stores or state.Stores(), pod, gate_enabled=gate_enabled))


def owned_child(api: MemoryApi, **kwargs: Any) -> dict[str, Any]:
    """A child LWS of the DisaggregatedSet stored in `api` (owned by its uid), stored too."""
    stored = api.get(keys.DS_PLURAL, build.NS, build.DS)
    assert stored is not None
    lws = build.child(owner_uid=stored["metadata"]["uid"], **kwargs)
    api.put(keys.LWS_PLURAL, copy.deepcopy(lws), manager="disaggregatedset-controller")
    return lws


def test_a_pod_of_an_enrolled_role_is_gated_until_its_domain_exists_even_before_the_stores_know_anything() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    result = admit(api, build.pod(owned_child(api)))
    assert (result.domain, result.targets, result.gated) == (D0, ("vllm",), True)


def test_a_pod_joins_its_ready_domain_ungated() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = owned_child(api)
    stored = api.get(keys.DS_PLURAL, build.NS, build.DS)
    assert stored is not None
    domain = build.domain_object(owner_uid=stored["metadata"]["uid"])
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain, manager=keys.DS_CONTROLLER)
    stores = state.Stores()
    for template in api.all("resourceclaimtemplates"):
        stores.template_mirror.observe(template, deleted=False)
    result = admit(api, build.pod(lws), stores)
    assert (result.domain, result.gated) == (D0, False)


@pytest.mark.parametrize(
    ("ds", "child_kwargs"),
    [
        pytest.param(build.seed_example(), {"stamped": False}, id="role-not-in-the-slice-scope"),
        pytest.param(build.ds(), {"stamped": False}, id="new-revision-after-opting-out"),
    ],
)
def test_a_pod_of_anything_else_is_left_alone(ds: dict[str, Any], child_kwargs: dict[str, Any]) -> None:
    api = api_with((keys.DS_PLURAL, ds))
    lws = owned_child(api, **child_kwargs)
    pod = build.pod(lws)
    pod["metadata"]["labels"][keys.SCOPE_LABEL] = keys.SCOPE_SLICE
    assert admit(api, pod) == injection.PodAdmission(patch=[], errors=[])


def test_after_the_set_opts_out_a_pod_of_a_stamped_child_still_joins_its_slices_domain() -> None:
    """The rollout has not drained that revision yet: a restarted group of it keeps its claim and gate."""
    api = api_with((keys.DS_PLURAL, build.ds()))
    result = admit(api, build.pod(owned_child(api)))
    assert (result.domain, result.targets, result.gated) == (D0, ("vllm",), True)


# --- with the gate off -------------------------------------------------------------------------------------


def test_with_the_gate_off_a_pod_of_an_enrolled_role_is_refused_for_retry() -> None:
    """No claim is injected with the gate off: it would run without the channel its slice's other pods carry."""
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = owned_child(api)
    with pytest.raises(kopf.AdmissionError) as refused:
        admit(api, build.pod(lws), gate_enabled=False)
    assert refused.value.code == 409
    assert str(refused.value) == (
        'role "prefill" of slice 0 of DisaggregatedSet "llm-serving" is enrolled in slice ComputeDomains and the '
        "AutoComputeDomain feature gate is disabled: this pod would run without the ComputeDomain channel the "
        "slice's others carry; set featureGates.AutoComputeDomain=true (Helm) or AutoComputeDomain: true "
        "(Configuration), or remove disaggregatedset.x-k8s.io/auto-compute-domain from the DisaggregatedSet; the "
        "pod is created again by its controller"
    )


@pytest.mark.parametrize(
    ("ds", "child_kwargs"),
    [
        pytest.param(build.ds(), {}, id="annotation-removed"),
        pytest.param(build.seed_example(), {"stamped": False}, id="role-not-in-the-slice-scope"),
        pytest.param(build.seed_example(), {"owner_uid": "previous-incarnation"}, id="child-of-an-earlier-set"),
    ],
)
def test_with_the_gate_off_any_other_pod_is_admitted_untouched(
    ds: dict[str, Any], child_kwargs: dict[str, Any]
) -> None:
    api = api_with((keys.DS_PLURAL, ds))
    stored = api.get(keys.DS_PLURAL, build.NS, build.DS)
    assert stored is not None
    lws = build.child(**{"owner_uid": stored["metadata"]["uid"], **child_kwargs})
    api.put(keys.LWS_PLURAL, copy.deepcopy(lws), manager="disaggregatedset-controller")
    assert admit(api, build.pod(lws), gate_enabled=False) == injection.PodAdmission(patch=[], errors=[])


def test_a_pod_of_a_stamped_leaderworkerset_of_a_previous_set_of_that_name_is_refused() -> None:
    """The child is an orphan the garbage collector is about to delete: its pod would run without the claim its
    slice's pods carry (found by the slice interleaving model: a set deleted, its children's pods still made)."""
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = build.child(owner_uid="previous-incarnation")
    api.put(keys.LWS_PLURAL, copy.deepcopy(lws), manager="disaggregatedset-controller")
    with pytest.raises(kopf.AdmissionError, match="which no longer exists") as refused:
        admit(api, build.pod(lws))
    assert refused.value.code == 409  # retried by its StatefulSet until the collector deletes it


def test_a_pod_of_a_stamped_leaderworkerset_whose_set_is_gone_is_refused() -> None:
    api = MemoryApi()
    lws = build.child()
    api.put(keys.LWS_PLURAL, copy.deepcopy(lws), manager="disaggregatedset-controller")
    with pytest.raises(kopf.AdmissionError, match="which no longer exists"):
        admit(api, build.pod(lws))


def test_a_pod_is_not_admitted_onto_a_condemned_domain() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = owned_child(api)
    domain = build.domain_object()
    domain["metadata"]["annotations"] = {keys.CONDEMNED_ANNOTATION: keys.DS_CONTROLLER}
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain, manager=keys.DS_CONTROLLER)
    with pytest.raises(kopf.AdmissionError, match=f"ComputeDomain {D0} is about to be deleted"):
        admit(api, build.pod(lws))


def test_a_pod_of_a_leaderworkerset_no_set_controls_is_left_alone() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = build.child(owned=False)
    api.put(keys.LWS_PLURAL, copy.deepcopy(lws), manager="kubectl")
    assert admit(api, build.pod(lws)) == injection.PodAdmission(patch=[], errors=[])


def test_a_pod_of_a_leaderworkerset_not_found_is_deferred() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    with pytest.raises(kopf.AdmissionError, match="is not found; the pod is created again by its controller"):
        admit(api, build.pod(build.child()))


def test_a_slice_scope_pod_outside_any_leaderworkerset_is_refused() -> None:
    pod = build.pod(build.child())
    del pod["metadata"]["labels"][keys.LWS_NAME_LABEL]
    with pytest.raises(kopf.AdmissionError, match="a slice-scope pod must belong to a LeaderWorkerSet"):
        admit(MemoryApi(), pod)


def test_a_pod_of_a_legacy_leaderworkerset_without_a_slice_label_joins_slice_0() -> None:
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    lws = owned_child(api, slice_index=None)
    assert admit(api, build.pod(lws)).domain == D0


# --- a DisaggregatedSet deleted and recreated while a relist hid its old child's deletion ------------------


def stored_uid(api: MemoryApi, plural: str, name: str) -> str:
    stored = api.get(plural, build.NS, name)
    assert stored is not None
    uid: str = stored["metadata"]["uid"]
    return uid


def recreated_set(
    *, old_set: dict[str, Any], stale: frozenset[str], unseen: frozenset[str]
) -> tuple[MemoryApi, state.Stores, dict[str, Any]]:
    """llm-serving (first as `old_set`) and its child are deleted and created again under the same names, opted in.
    The stores saw it all but the DELETED events of the old objects in `stale` (a watch relist lost them, and no
    fresh list has dropped the ghosts yet) and the ADDED events of the new objects in `unseen` ("set", "child").
    Returns the API, the stores and the new child."""
    api = api_with((keys.DS_PLURAL, old_set))
    name = owned_child(api)["metadata"]["name"]
    old = {"set": stored_uid(api, keys.DS_PLURAL, build.DS), "child": stored_uid(api, keys.LWS_PLURAL, name)}
    api.delete(keys.LWS_PLURAL, build.NS, name)
    api.delete(keys.DS_PLURAL, build.NS, build.DS)
    api.put(keys.DS_PLURAL, build.seed_example(), manager="kubectl")
    new_child = owned_child(api)
    new = {"set": stored_uid(api, keys.DS_PLURAL, build.DS), "child": stored_uid(api, keys.LWS_PLURAL, name)}
    lost = {old[kind] for kind in stale} | {new[kind] for kind in unseen}
    stores = state.Stores()
    mirrors = {keys.DS_PLURAL: stores.workload_mirror, keys.LWS_PLURAL: stores.child_mirror}
    relist.replay(
        api, mirrors, lost=lambda event: event[2] in lost and (event[1] == "DELETED" or event[2] in new.values())
    )
    return api, stores, new_child


CHILD, SET = frozenset({"child"}), frozenset({"set"})


@pytest.mark.parametrize(
    ("old_set", "stale", "unseen"),
    [
        pytest.param(build.seed_example(), CHILD, frozenset(), id="stores-hold-both-children-the-stale-one-first"),
        pytest.param(build.seed_example(), CHILD, CHILD, id="stores-hold-only-the-stale-child"),
        pytest.param(build.ds(), CHILD | SET, CHILD | SET, id="stores-hold-only-the-old-set-opted-out-and-its-child"),
    ],
)
def test_a_pod_of_a_recreated_set_gets_its_claim_though_the_stores_hold_the_old_child(
    old_set: dict[str, Any], stale: frozenset[str], unseen: frozenset[str]
) -> None:
    api, stores, child = recreated_set(old_set=old_set, stale=stale, unseen=unseen)
    held = stores.children_by_name.get((build.NS, child["metadata"]["name"]))
    assert len(held) == (1 if "child" in unseen else 2)  # the old child is still there
    result = admit(api, build.pod(child), stores)
    assert (result.domain, result.targets, result.gated) == (D0, ("vllm",), True)


def test_the_stores_answer_only_for_the_child_and_set_a_pod_says_it_belongs_to() -> None:
    pod = build.pod(build.child())
    assert rules.stores_agree(pod, build.child_facts(), build.workload())
    assert not rules.stores_agree(pod, build.child_facts(owner_uid="previous-set"), build.workload())
    assert not rules.stores_agree(pod, build.child_facts(), None)
    assert not rules.stores_agree(pod, build.child_facts(revision_hash=build.NEXT_REVISION), build.workload())
    assert not rules.stores_agree(pod, build.child_facts(slice_scope=False), build.workload())


def test_a_stored_child_whose_position_is_not_the_pods_is_read_afresh() -> None:
    """The stores hold another LeaderWorkerSet of this name (slice 1) than the API (slice 0): the pod's own labels
    disagree with it, so the API decides and the pod joins slice 0's domain, not slice 1's."""
    api = api_with((keys.DS_PLURAL, build.seed_example()))
    child = owned_child(api)
    stale = copy.deepcopy(child)
    stale["metadata"].update(uid="uid-stale", resourceVersion="1")
    stale["metadata"]["labels"][keys.DS_SLICE_LABEL] = "1"
    stores = state.Stores()
    relist.replay(api, {keys.DS_PLURAL: stores.workload_mirror})
    stores.child_mirror.observe(stale, deleted=False)
    assert admit(api, build.pod(child), stores).domain == D0
