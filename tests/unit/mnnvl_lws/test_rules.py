from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection, opt_in, ownership
from mnnvl_lws import rules

from ..mnnvl_api import domain_builders, pods
from . import build

WORKER_META = "/spec/leaderWorkerTemplate/workerTemplate/metadata"


def stamped(lws: dict[str, Any], env: opt_in.Environment = build.ENV_ON) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(lws), rules.template_patch(lws, env))
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
    assert rules.template_patch(once, build.ENV_ON) == []


@pytest.mark.parametrize("value", [None, "disabled"], ids=["unset", "disabled"])
def test_unset_and_disabled_give_the_same_templates(value: str | None) -> None:
    lws = build.lws(annotations={} if value is None else {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: value})
    assert stamped(lws)["spec"] == build.lws()["spec"]


def test_opting_out_removes_the_stamps_and_restores_the_template() -> None:
    opted = stamped(build.opted_in(worker_meta={"labels": {"app": "vllm"}}))
    opted["metadata"]["annotations"][keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "disabled"
    assert worker_meta(stamped(opted)) == {"labels": {"app": "vllm"}, "annotations": {}}


def test_the_gate_off_changes_no_template_either_way() -> None:
    assert rules.template_patch(build.opted_in(), build.ENV_OFF) == []
    opted = stamped(build.opted_in())
    opted["metadata"]["annotations"] = {}
    assert rules.template_patch(opted, build.ENV_OFF) == []


def test_a_slice_scope_stamped_by_mnnvl_ds_is_never_removed() -> None:
    child = build.lws(worker_meta={"labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}})
    assert rules.template_patch(child, build.ENV_ON) == []


def test_opting_in_without_the_api_stamps_nothing_but_keeps_earlier_stamps() -> None:
    assert rules.template_patch(build.opted_in(), build.ENV_NO_API) == []
    assert rules.template_patch(stamped(build.opted_in()), build.ENV_NO_API) == []


# --- validation ------------------------------------------------------------------------------------------


def test_a_valid_opted_in_lws_has_no_errors() -> None:
    assert rules.lws_errors(stamped(build.opted_in()), None, build.ENV_ON) == []


def test_an_invalid_opt_in_value_is_rejected_naming_the_allowed_values() -> None:
    found = rules.lws_errors(
        build.lws(annotations={keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "true"}), None, build.ENV_ON
    )
    assert [str(e) for e in found] == [
        'metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Unsupported value: "true": '
        'supported values: "enabled", "disabled"; or remove the annotation'
    ]


def test_opting_in_is_rejected_while_the_gate_is_disabled() -> None:
    assert [str(e) for e in rules.lws_errors(build.opted_in(), None, build.ENV_OFF)] == [
        "metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Forbidden: the AutoComputeDomain "
        "feature gate is disabled; set featureGates.AutoComputeDomain=true (Helm) or AutoComputeDomain: true "
        "(Configuration), or remove the annotation"
    ]


def test_opting_in_is_rejected_while_the_api_is_not_served() -> None:
    [error] = rules.lws_errors(build.opted_in(), None, build.ENV_NO_API)
    assert "the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served" in str(error)


@pytest.mark.parametrize("env", [build.ENV_OFF, build.ENV_NO_API], ids=["gate-off", "api-missing"])
def test_objects_that_opted_in_earlier_remain_updatable(env: opt_in.Environment) -> None:
    old = stamped(build.opted_in())
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 3
    assert rules.lws_errors(new, old, env) == []


def test_a_user_supplied_prefix_is_rejected_unless_it_equals_the_stamp() -> None:
    forged = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "other"}})
    assert [str(e) for e in rules.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-prefix]: "
        'Invalid value: "other": this annotation is managed by the AutoComputeDomain feature; remove it from the template'
    ]


def test_a_user_supplied_domain_name_is_rejected_outside_disaggregatedsets() -> None:
    forged = build.lws(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "mine"}})
    assert [e.path for e in rules.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-name]"
    ]
    forged["metadata"]["labels"] = {keys.DS_NAME_LABEL: "llm"}
    forged["metadata"]["ownerReferences"] = [DS_OWNER]
    assert rules.lws_errors(forged, None, build.ENV_ON) == []


DS_OWNER = {
    "apiVersion": keys.DS_API_VERSION,
    "kind": "DisaggregatedSet",
    "name": "llm",
    "uid": "ds-uid",
    "controller": True,
}


@pytest.mark.parametrize(
    ("owner", "ds_label"),
    [
        pytest.param({**DS_OWNER, "apiVersion": "example.com/v1"}, "llm", id="wrong-group"),
        pytest.param({**DS_OWNER, "controller": False}, "llm", id="not-controller"),
        pytest.param({k: v for k, v in DS_OWNER.items() if k != "controller"}, "llm", id="controller-unset"),
        pytest.param({**DS_OWNER, "name": "other"}, "llm", id="name-mismatch"),
        pytest.param({**DS_OWNER, "kind": "LeaderWorkerSet"}, "llm", id="wrong-kind"),
        pytest.param(DS_OWNER, None, id="no-ds-name-label"),
    ],
)
def test_a_forged_disaggregatedset_owner_does_not_exempt_the_reserved_domain_name(
    owner: dict[str, Any], ds_label: str | None
) -> None:
    forged = build.lws(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "mine"}})
    forged["metadata"]["ownerReferences"] = [owner]
    if ds_label is not None:
        forged["metadata"]["labels"] = {keys.DS_NAME_LABEL: ds_label}
    assert [str(e) for e in rules.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-name]: "
        'Invalid value: "mine": this annotation is managed by the AutoComputeDomain feature; remove it from the template'
    ]


def test_the_disaggregatedset_controller_owner_exempts_the_domain_name_among_other_owners() -> None:
    child = build.lws(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "llm-0-abc"}})
    child["metadata"]["labels"] = {keys.DS_NAME_LABEL: "llm"}
    child["metadata"]["ownerReferences"] = [{**DS_OWNER, "name": "other", "controller": False}, DS_OWNER]
    assert rules.lws_errors(child, None, build.ENV_ON) == []


def test_a_template_claim_with_the_reserved_name_is_rejected() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [
        {"name": "gpus", "resourceClaimTemplateName": "g"},
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "x"},
    ]
    assert [str(e) for e in rules.lws_errors(build.lws(worker_spec=spec), None, build.ENV_ON)] == [
        'spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[1].name: Invalid value: "lws-compute-domain-channel": '
        "this claim name is reserved for the automatically managed ComputeDomain channel; rename your claim"
    ]


@pytest.mark.parametrize(
    "claim_template",
    [
        pytest.param(names.claim_template_name("deepseek-r1-0-x7k2b"), id="plain"),
        pytest.param(names.claim_template_name("deepseek-r1-" + "long" * 12 + "-0-x7k2b"), id="hashed"),
    ],
)
def test_a_template_claim_on_a_channel_claim_template_is_rejected_on_an_opted_in_lws(claim_template: str) -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": claim_template}]
    assert [str(e) for e in rules.lws_errors(build.opted_in(worker_spec=spec), None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].resourceClaimTemplateName: "
        f'Invalid value: "{claim_template}": this is a ComputeDomain channel claim template, reserved for the '
        "channel claim the AutoComputeDomain feature injects automatically; remove the claim"
    ]


def test_other_claim_templates_and_lws_that_did_not_opt_in_keep_their_claims() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [
        {"name": "gpus", "resourceClaimTemplateName": "four-gpus"},
        {"name": "nic", "resourceClaimTemplateName": "channel-nic"},
    ]
    assert rules.lws_errors(build.opted_in(worker_spec=spec), None, build.ENV_ON) == []
    spec["resourceClaims"].append({"name": "imex", "resourceClaimTemplateName": "my-imex-channel"})
    assert rules.lws_errors(build.lws(worker_spec=spec), None, build.ENV_ON) == []


def test_compute_domain_containers_must_name_existing_containers() -> None:
    lws = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "vllm,proxy"}})
    assert [str(e) for e in rules.lws_errors(lws, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        'Invalid value: "vllm,proxy": no container named "proxy" (containers: "vllm", "routing-proxy"); name existing '
        "containers only"
    ]


# --- generateName ----------------------------------------------------------------------------------------


def generated(name: str | None, **kwargs: Any) -> dict[str, Any]:
    """An LWS created with `generateName: deepseek-r1-`: no name yet at CREATE, `name` once generated."""
    lws = build.lws(**kwargs)
    del lws["metadata"]["name"]
    lws["metadata"]["generateName"] = "deepseek-r1-"
    if name is not None:
        lws["metadata"]["name"] = name
    return lws


def test_an_opted_in_lws_created_with_generate_name_is_stamped_with_the_generate_name() -> None:
    created = stamped(generated(None, annotations={keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}))
    assert worker_meta(created)["annotations"] == {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "deepseek-r1-"}
    assert rules.lws_errors(created, None, build.ENV_ON) == []


def test_the_stamp_of_a_generated_name_lws_stays_the_same_once_its_name_is_generated() -> None:
    created = stamped(generated(None, annotations={keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}))
    stored = copy.deepcopy(created)
    stored["metadata"]["name"] = "deepseek-r1-x7k2b"
    assert rules.lws_errors(stored, None, build.ENV_ON) == []  # validation at CREATE sees the name
    updated = copy.deepcopy(stored)
    updated["spec"]["replicas"] = 3
    assert rules.template_patch(updated, build.ENV_ON) == []
    assert rules.lws_errors(updated, stored, build.ENV_ON) == []


def test_an_lws_created_with_generate_name_that_did_not_opt_in_is_left_as_is() -> None:
    for name in (None, "deepseek-r1-x7k2b"):
        plain = generated(name)
        assert rules.template_patch(plain, build.ENV_ON) == []
        assert rules.lws_errors(plain, None, build.ENV_ON) == []


def test_a_prefix_other_than_the_generate_name_is_rejected() -> None:
    forged = generated(
        "deepseek-r1-x7k2b", worker_meta={"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "deepseek-r1-x7k2b"}}
    )
    assert [e.path for e in rules.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-prefix]"
    ]


# --- warnings --------------------------------------------------------------------------------------------


def test_an_opted_in_lws_whose_groups_nothing_keeps_within_one_clique_is_admitted_with_a_warning() -> None:
    """Seed note: an IMEX channel only connects GPUs within the same NVLink clique; pair auto-compute-domain with
    placement constraints such as exclusive-topology."""
    lws = build.opted_in(placed=False)
    assert rules.lws_errors(lws, None, build.ENV_ON) == []
    assert rules.lws_warnings(lws) == [
        "metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]: per-replica ComputeDomains are "
        "enabled, but nothing keeps each replica within one nvidia.com/gpu.clique: an IMEX channel only connects "
        "GPUs within one NVLink clique, so a replica spread over several cliques cannot use its ComputeDomain; set "
        "leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique"
    ]


def test_no_placement_warning_for_a_placed_a_plain_or_a_disaggregatedset_owned_lws() -> None:
    assert rules.lws_warnings(build.opted_in()) == []
    assert rules.lws_warnings(build.lws()) == []
    owned = build.opted_in(placed=False)
    owned["metadata"]["labels"] = {keys.DS_NAME_LABEL: "llm"}
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": keys.DS_API_VERSION,
            "kind": keys.DS_KIND,
            "name": "llm",
            "uid": "u1",
            "controller": True,
        }
    ]
    assert ownership.controlled_by_disaggregated_set(owned["metadata"])
    assert rules.lws_warnings(owned) == []  # its set is advised, on the set's own fields


def test_no_placement_warning_for_an_lws_kai_places_within_one_clique() -> None:
    """The topology seed's KAI annotations on the LeaderWorkerSet object: KAI places each replica (a gang) within
    one clique, so nothing is missing; naming only a Topology, or requiring another level, still warns."""
    placed_by_kai = {
        keys.KAI_TOPOLOGY_ANNOTATION: "nvcf-mnnvl-topology",
        keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: keys.GPU_CLIQUE_LABEL,
    }
    lws = build.opted_in(placed=False)
    lws["metadata"]["annotations"].update(placed_by_kai)
    assert rules.lws_warnings(lws) == []
    for missing_or_other in (
        {keys.KAI_TOPOLOGY_ANNOTATION: "nvcf-mnnvl-topology"},
        {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: keys.GPU_CLIQUE_LABEL},
        {**placed_by_kai, keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: "example.com/rack"},
    ):
        partly = build.opted_in(placed=False)
        partly["metadata"]["annotations"].update(missing_or_other)
        assert len(rules.lws_warnings(partly)) == 1, missing_or_other


def test_naming_only_containers_without_gpus_warns_about_the_gpu_containers_left_without_the_channel() -> None:
    lws = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "routing-proxy"}})
    assert rules.lws_errors(lws, None, build.ENV_ON) == []
    assert rules.lws_warnings(lws) == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        '"routing-proxy" names no container that requests nvidia.com/gpu, so GPU container "vllm" gets no '
        "ComputeDomain channel; name the GPU containers too, or remove the annotation to target them automatically"
    ]


def test_the_warning_names_every_gpu_container_left_out_and_reads_the_same_on_a_pod() -> None:
    spec = pods.restartable_init_spec()
    spec["containers"].append({"name": "proxy", "image": "envoy"})
    annotations = {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "proxy"}
    assert injection.unclaimed_gpu_containers_warning(spec, annotations) == (
        'metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "proxy" names no container that '
        'requests nvidia.com/gpu, so GPU containers "vllm", "nixl-agent" get no ComputeDomain channel; name the GPU '
        "containers too, or remove the annotation to target them automatically"
    )


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        pytest.param(pods.deepseek_worker_spec(), None, id="annotation-absent"),
        pytest.param(pods.deepseek_worker_spec(), "vllm", id="names-the-gpu-container"),
        pytest.param(pods.deepseek_worker_spec(), "vllm,routing-proxy", id="names-a-gpu-container-too"),
        pytest.param(pods.dra_gpu_spec(), "vllm", id="no-container-requests-gpus"),
        pytest.param(pods.deepseek_worker_spec(), "nope", id="invalid-left-to-validation"),
    ],
)
def test_no_warning_unless_named_containers_leave_gpu_containers_out(spec: dict[str, Any], named: str | None) -> None:
    annotations = {} if named is None else {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: named}
    assert rules.lws_warnings(build.opted_in(worker_spec=spec, worker_meta={"annotations": annotations})) == []


# --- pods ------------------------------------------------------------------------------------------------


def admitted(pod: dict[str, Any], admission: injection.PodAdmission) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), admission.patch)
    return result


def test_a_leader_gets_a_fresh_domain_the_claim_and_the_gate() -> None:
    pod = build.pod("deepseek-r1-1")
    admission = rules.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=True)
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
    not_ready = rules.admit_pod(pod, domain="deepseek-r1-1-x7k2b", new_token="zzzzz", domain_ready=False)
    assert not_ready.domain == "deepseek-r1-1-x7k2b"
    assert injection.is_gated(admitted(pod, not_ready)["spec"])
    ready = rules.admit_pod(pod, domain="deepseek-r1-1-x7k2b", new_token="zzzzz", domain_ready=True)
    assert not injection.is_gated(admitted(pod, ready)["spec"])


def test_a_worker_whose_leader_has_no_domain_gets_nothing() -> None:
    pod = build.pod("deepseek-r1-1-3", leader="deepseek-r1-1")
    assert rules.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False) == injection.PodAdmission(
        patch=[], errors=[]
    )


def test_a_cpu_only_leader_gets_a_domain_but_no_claim() -> None:
    pod = build.pod("deepseek-r1-0", spec=pods.cpu_leader_spec())
    result = admitted(pod, rules.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False))
    assert "resourceClaims" not in result["spec"]
    assert result["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] == "deepseek-r1-0-x7k2b"


def test_pod_admission_is_idempotent_on_reinvocation() -> None:
    pod = build.pod("deepseek-r1-0")
    once = admitted(pod, rules.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False))
    again = rules.admit_pod(once, domain=None, new_token="other", domain_ready=False)
    assert again.patch == []
    assert again.domain == "deepseek-r1-0-x7k2b"


def test_the_group_comes_from_names_not_from_upstream_labels() -> None:
    pod = build.pod("web-12-3", lws_name="web", leader="web-12")
    position = rules.pod_position(pod)
    assert isinstance(position, rules.PodPosition)
    assert (position.group, position.is_leader) == (12, False)


def test_unknown_named_containers_reject_the_pod() -> None:
    pod = build.pod("deepseek-r1-0", annotations={keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "nope"})
    admission = rules.admit_pod(pod, domain=None, new_token="x7k2b", domain_ready=False)
    assert admission.patch == []
    assert 'no container named "nope"' in str(admission.errors[0])


def test_a_forged_prefix_is_left_in_place_for_validation_to_reject() -> None:
    forged = build.opted_in(worker_meta={"annotations": {keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "other"}})
    assert worker_meta(stamped(forged))["annotations"][keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION] == "other"
    assert rules.lws_errors(stamped(forged), None, build.ENV_ON) != []


def test_a_foreign_scope_label_is_rejected() -> None:
    forged = build.lws(worker_meta={"labels": {keys.SCOPE_LABEL: "cluster"}})
    assert [e.path for e in rules.lws_errors(forged, None, build.ENV_ON)] == [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.labels[leaderworkerset.sigs.k8s.io/compute-domain-scope]"
    ]


# --- template revisions ----------------------------------------------------------------------------------


def test_upstreams_record_of_a_stamped_revision_says_it_was_opted_in() -> None:
    found = rules.template_revision(build.controller_revision(stamped(build.opted_in()), "old"))
    assert found == rules.TemplateRevision(lws="deepseek-r1", lws_uid=domain_builders.UID, hash="old", stamped=True)
    assert rules.revision_opted_in([found], lws_uid=domain_builders.UID, revision_hash="old")


@pytest.mark.parametrize(
    ("revision", "lws_uid", "revision_hash"),
    [
        pytest.param(build.controller_revision(build.lws(), "new"), domain_builders.UID, "new", id="not-stamped"),
        pytest.param(
            build.controller_revision(stamped(build.opted_in()), "old"),
            "a-later-lws-of-that-name",
            "old",
            id="an-earlier-lws-of-the-same-name",
        ),
        pytest.param(
            build.controller_revision(stamped(build.opted_in()), "old"), domain_builders.UID, "new", id="other-hash"
        ),
    ],
)
def test_a_revision_counts_as_opted_in_only_when_stamped_and_of_this_lws_and_hash(
    revision: dict[str, Any], lws_uid: str, revision_hash: str
) -> None:
    found = rules.template_revision(revision)
    assert not rules.revision_opted_in([found], lws_uid=lws_uid, revision_hash=revision_hash)


def test_a_statefulsets_controllerrevision_is_not_a_template_revision() -> None:
    """The leader StatefulSet's own ControllerRevisions carry the same hash label (its template's labels)."""
    revision = build.controller_revision(stamped(build.opted_in()), "old", owner_kind="StatefulSet")
    assert rules.template_revision(revision) is None
