from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import injection
from mnnvl_lws import decisions

from ..mnnvl_api import pods
from . import build

WORKER_META = "/spec/leaderWorkerTemplate/workerTemplate/metadata"


def stamped(lws: dict[str, Any], env: decisions.Environment = build.ENV_ON) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(lws), decisions.template_patch(lws, env))
    return result


def worker_meta(lws: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"].get("metadata", {})
    return meta


# --- template stamping ---------------------------------------------------------------------------------


def test_opting_in_stamps_every_template_with_the_prefix_and_the_replica_scope() -> None:
    result = stamped(build.opted_in(leader_spec=pods.cpu_leader_spec()))
    for field in ("leaderTemplate", "workerTemplate"):
        meta = result["spec"]["leaderWorkerTemplate"][field]["metadata"]
        assert meta["annotations"] == {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "deepseek-r1"}
        assert meta["labels"] == {keys.SCOPE_LABEL: keys.SCOPE_REPLICA}


def test_stamping_keeps_user_metadata() -> None:
    meta = {"labels": {"app": "vllm"}, "annotations": {"prometheus.io/scrape": "true"}}
    result = worker_meta(stamped(build.opted_in(worker_meta=meta)))
    assert result["labels"] == {"app": "vllm", keys.SCOPE_LABEL: keys.SCOPE_REPLICA}
    assert result["annotations"] == {
        "prometheus.io/scrape": "true",
        keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "deepseek-r1",
    }


def test_stamping_is_idempotent() -> None:
    once = stamped(build.opted_in())
    assert decisions.template_patch(once, build.ENV_ON) == []


@pytest.mark.parametrize("value", [None, "disabled"], ids=["unset", "disabled"])
def test_unset_and_disabled_give_the_same_templates(value: str | None) -> None:
    lws = build.lws(annotations={} if value is None else {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: value})
    assert stamped(lws)["spec"] == build.lws()["spec"]


def test_opting_out_removes_the_stamps_and_restores_the_template() -> None:
    opted = stamped(build.opted_in(worker_meta={"labels": {"app": "vllm"}}))
    opted["metadata"]["annotations"][keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "disabled"
    assert worker_meta(stamped(opted)) == {"labels": {"app": "vllm"}, "annotations": {}}


def test_the_gate_off_changes_no_template_either_way() -> None:
    assert decisions.template_patch(build.opted_in(), build.ENV_OFF) == []
    opted = stamped(build.opted_in())
    opted["metadata"]["annotations"] = {}
    assert decisions.template_patch(opted, build.ENV_OFF) == []


def test_a_slice_scope_stamped_by_mnnvl_ds_is_never_removed() -> None:
    child = build.lws(worker_meta={"labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}})
    assert decisions.template_patch(child, build.ENV_ON) == []


def test_opting_in_without_the_api_stamps_nothing_but_keeps_earlier_stamps() -> None:
    assert decisions.template_patch(build.opted_in(), build.ENV_NO_API) == []
    assert decisions.template_patch(stamped(build.opted_in()), build.ENV_NO_API) == []


# --- validation ------------------------------------------------------------------------------------------


def test_a_valid_opted_in_lws_has_no_errors() -> None:
    assert decisions.lws_errors(stamped(build.opted_in()), None, build.ENV_ON) == []


def test_an_invalid_opt_in_value_is_rejected_naming_the_allowed_values() -> None:
    found = decisions.lws_errors(
        build.lws(annotations={keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "true"}), None, build.ENV_ON
    )
    assert [str(e) for e in found] == [
        'metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Unsupported value: "true": '
        'supported values: "enabled", "disabled"; or remove the annotation'
    ]


def test_opting_in_is_rejected_while_the_gate_is_disabled() -> None:
    assert [str(e) for e in decisions.lws_errors(build.opted_in(), None, build.ENV_OFF)] == [
        "metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Forbidden: the AutoComputeDomain "
        "feature gate is disabled; set featureGates.AutoComputeDomain=true (Helm) or AutoComputeDomain: true "
        "(Configuration), or remove the annotation"
    ]


def test_opting_in_is_rejected_while_the_api_is_not_served() -> None:
    [error] = decisions.lws_errors(build.opted_in(), None, build.ENV_NO_API)
    assert "the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served" in str(error)


@pytest.mark.parametrize("env", [build.ENV_OFF, build.ENV_NO_API], ids=["gate-off", "api-missing"])
def test_objects_that_opted_in_earlier_remain_updatable(env: decisions.Environment) -> None:
    old = stamped(build.opted_in())
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 3
    assert decisions.lws_errors(new, old, env) == []


def test_a_user_supplied_prefix_is_rejected_unless_it_equals_the_stamp() -> None:
    forged = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "other"}})
    assert [str(e) for e in decisions.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-prefix]: "
        'Invalid value: "other": this annotation is managed by the AutoComputeDomain feature; remove it from the template'
    ]


def test_a_user_supplied_domain_name_is_rejected_outside_disaggregatedsets() -> None:
    forged = build.lws(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "mine"}})
    assert [e.path for e in decisions.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-name]"
    ]
    forged["metadata"]["ownerReferences"] = [{"kind": "DisaggregatedSet", "name": "llm", "controller": True}]
    assert decisions.lws_errors(forged, None, build.ENV_ON) == []


def test_a_template_claim_with_the_reserved_name_is_rejected() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [
        {"name": "gpus", "resourceClaimTemplateName": "g"},
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "x"},
    ]
    assert [str(e) for e in decisions.lws_errors(build.lws(worker_spec=spec), None, build.ENV_ON)] == [
        'spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[1].name: Invalid value: "lws-compute-domain-channel": '
        "this claim name is reserved for the automatically managed ComputeDomain channel; rename your claim"
    ]


def test_compute_domain_containers_must_name_existing_containers() -> None:
    lws = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "vllm,proxy"}})
    assert [str(e) for e in decisions.lws_errors(lws, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        'Invalid value: "vllm,proxy": no container named "proxy" (containers: "vllm", "routing-proxy"); name existing '
        "containers only"
    ]


# --- pods ------------------------------------------------------------------------------------------------


def admitted(pod: dict[str, Any], admission: decisions.PodAdmission) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), admission.patch)
    return result


def test_a_leader_gets_a_fresh_domain_the_claim_and_the_gate() -> None:
    pod = build.pod("deepseek-r1-1")
    admission = decisions.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=True)
    result = admitted(pod, admission)
    assert admission.domain == "deepseek-r1-1-x7k2b"
    assert result["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] == "deepseek-r1-1-x7k2b"
    assert result["spec"]["resourceClaims"] == [
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "deepseek-r1-1-x7k2b-channel"}
    ]
    assert admission.targets == ("vllm",)
    assert injection.is_gated(result["spec"])


def test_a_worker_joins_its_leaders_domain_and_is_gated_only_while_it_is_not_ready() -> None:
    pod = build.pod("deepseek-r1-1-3", leader="deepseek-r1-1")
    not_ready = decisions.admit_pod(pod, domain="deepseek-r1-1-x7k2b", new_token="zzzzz", domain_ready=False)
    assert not_ready.domain == "deepseek-r1-1-x7k2b"
    assert injection.is_gated(admitted(pod, not_ready)["spec"])
    ready = decisions.admit_pod(pod, domain="deepseek-r1-1-x7k2b", new_token="zzzzz", domain_ready=True)
    assert not injection.is_gated(admitted(pod, ready)["spec"])


def test_a_worker_whose_leader_has_no_domain_gets_nothing() -> None:
    pod = build.pod("deepseek-r1-1-3", leader="deepseek-r1-1")
    assert decisions.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False) == decisions.PodAdmission(
        patch=[], errors=[]
    )


def test_a_cpu_only_leader_gets_a_domain_but_no_claim() -> None:
    pod = build.pod("deepseek-r1-0", spec=pods.cpu_leader_spec())
    result = admitted(pod, decisions.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False))
    assert "resourceClaims" not in result["spec"]
    assert result["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] == "deepseek-r1-0-x7k2b"


def test_pod_admission_is_idempotent_on_reinvocation() -> None:
    pod = build.pod("deepseek-r1-0")
    once = admitted(pod, decisions.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False))
    again = decisions.admit_pod(once, domain=None, new_token="other", domain_ready=False)
    assert again.patch == []
    assert again.domain == "deepseek-r1-0-x7k2b"


def test_the_group_comes_from_names_not_from_upstream_labels() -> None:
    pod = build.pod("web-12-3", lws_name="web", leader="web-12")
    position = decisions.pod_position(pod)
    assert isinstance(position, decisions.PodPosition)
    assert (position.group, position.is_leader) == (12, False)


def test_unknown_named_containers_reject_the_pod() -> None:
    pod = build.pod("deepseek-r1-0", annotations={keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "nope"})
    admission = decisions.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False)
    assert admission.patch == []
    assert 'no container named "nope"' in str(admission.errors[0])


def test_a_forged_prefix_is_left_in_place_for_validation_to_reject() -> None:
    forged = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "other"}})
    assert worker_meta(stamped(forged))["annotations"][keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION] == "other"
    assert decisions.lws_errors(stamped(forged), None, build.ENV_ON) != []


def test_a_foreign_scope_label_is_rejected() -> None:
    forged = build.lws(worker_meta={"labels": {keys.SCOPE_LABEL: "cluster"}})
    assert [e.path for e in decisions.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.labels[leaderworkerset.sigs.k8s.io/compute-domain-scope]"
    ]
