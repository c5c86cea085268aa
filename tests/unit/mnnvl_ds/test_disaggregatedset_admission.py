"""DisaggregatedSet admission: each role's scope stamped into its templates (so it is in the revision), every bad
value refused with the field and the fix, and placement advice as warnings."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import opt_in
from mnnvl_ds import rules

from ..mnnvl_api import pods
from . import build

DS_KEY = keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION
LWS_KEY = keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION


def scope_labels(body: dict[str, Any]) -> dict[str, str | None]:
    """The scope label of each role's worker template."""
    return {
        role["name"]: role["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        .get("metadata", {})
        .get("labels", {})
        .get(keys.SCOPE_LABEL)
        for role in body["spec"]["roles"]
    }


def messages(
    body: dict[str, Any], old: dict[str, Any] | None = None, env: opt_in.Environment = build.ENV_ON
) -> list[str]:
    return [str(error) for error in rules.ds_errors(body, old, env)]


# --- stamping and revisions ------------------------------------------------------------------------------


def test_the_seed_example_stamps_prefill_and_decode_with_the_slice_scope_and_leaves_the_encoder_alone() -> None:
    assert scope_labels(build.mutated(build.seed_example())) == {
        "prefill": keys.SCOPE_SLICE,
        "decode": keys.SCOPE_SLICE,
        "encoder": None,
    }


def test_a_role_asking_for_per_replica_domains_is_stamped_with_the_replica_scope() -> None:
    body = build.ds(roles=[build.role("prefill", annotations={LWS_KEY: "enabled"}), build.role("decode")])
    assert scope_labels(build.mutated(body)) == {"prefill": keys.SCOPE_REPLICA, "decode": None}


def test_every_template_of_an_enrolled_role_is_stamped_and_user_metadata_is_kept() -> None:
    meta = {"labels": {"app": "vllm"}, "annotations": {"prometheus.io/scrape": "true"}}
    body = build.enabled(roles=[build.role("prefill", worker_meta=meta, leader_spec=pods.cpu_leader_spec())])
    template = build.mutated(body)["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]
    assert template["leaderTemplate"]["metadata"] == {"labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}}
    assert template["workerTemplate"]["metadata"] == {
        "labels": {"app": "vllm", keys.SCOPE_LABEL: keys.SCOPE_SLICE},
        "annotations": {"prometheus.io/scrape": "true"},
    }


def test_stamping_is_idempotent() -> None:
    once = build.mutated(build.seed_example())
    assert rules.ds_patch(once, build.ENV_ON) == []


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="unset"),
        pytest.param({DS_KEY: "disabled"}, id="disabled"),
    ],
)
def test_unset_and_disabled_give_the_same_revision(annotations: dict[str, str]) -> None:
    plain = build.ds()
    assert build.revision(build.mutated(build.ds(annotations=annotations))) == build.revision(plain)


def test_a_role_opted_out_gives_the_same_revision_as_a_role_never_enrolled() -> None:
    opted_out = build.ds(roles=[build.role("prefill", annotations={DS_KEY: "disabled"}), build.role("decode")])
    assert build.revision(build.mutated(opted_out)) == build.revision(build.ds())


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(build.ds(), build.enabled(), id="set-enabled"),
        pytest.param(build.enabled(), build.ds(), id="remove-enabled"),
        pytest.param(
            build.enabled(),
            build.enabled(roles=[build.role("prefill"), build.role("decode", annotations={DS_KEY: "disabled"})]),
            id="opt-a-role-out",
        ),
        pytest.param(
            build.ds(),
            build.ds(roles=[build.role("prefill", annotations={DS_KEY: "enabled"}), build.role("decode")]),
            id="a-role-enrolls-itself",
        ),
        pytest.param(
            build.ds(),
            build.ds(roles=[build.role("prefill", annotations={LWS_KEY: "enabled"}), build.role("decode")]),
            id="a-role-asks-for-replica-domains",
        ),
        pytest.param(
            build.enabled(roles=[build.role("prefill"), build.role("decode", annotations={DS_KEY: "disabled"})]),
            build.enabled(
                roles=[
                    build.role("prefill"),
                    build.role("decode", annotations={DS_KEY: "disabled", LWS_KEY: "enabled"}),
                ]
            ),
            id="an-opted-out-role-asks-for-replica-domains",
        ),
    ],
)
def test_setting_or_removing_either_annotation_changes_the_revision(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    assert build.revision(build.mutated(before)) != build.revision(build.mutated(after))


def test_toggling_the_gate_changes_no_template_either_way() -> None:
    assert rules.ds_patch(build.seed_example(), build.ENV_OFF) == []
    stamped = build.mutated(build.seed_example())
    stamped["metadata"]["annotations"] = {}
    assert rules.ds_patch(stamped, build.ENV_OFF) == []


def test_opting_out_removes_the_stamps_and_keeps_user_labels() -> None:
    stamped = build.mutated(build.enabled(roles=[build.role("prefill", worker_meta={"labels": {"app": "vllm"}})]))
    stamped["metadata"]["annotations"][DS_KEY] = "disabled"
    template = build.mutated(stamped)["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert template["metadata"] == {"labels": {"app": "vllm"}}


def test_a_scope_label_a_user_wrote_is_not_overwritten_but_left_for_validation() -> None:
    body = build.enabled(roles=[build.role("prefill", worker_meta={"labels": {keys.SCOPE_LABEL: "mine"}})])
    assert rules.ds_patch(body, build.ENV_ON) == []


def test_a_shape_the_api_server_would_reject_gets_no_patch() -> None:
    body = build.enabled()
    body["spec"]["roles"] = "prefill"
    assert rules.ds_patch(body, build.ENV_ON) == []
    assert rules.ds_errors(body, None, build.ENV_ON) == []


# --- validation ------------------------------------------------------------------------------------------


def test_the_seed_example_is_valid() -> None:
    assert messages(build.mutated(build.seed_example())) == []


@pytest.mark.parametrize("value", ["true", "Enabled", " enabled", ""])
def test_a_bad_value_on_the_set_is_refused_with_the_supported_values(value: str) -> None:
    assert messages(build.mutated(build.ds(annotations={DS_KEY: value}))) == [
        f"metadata.annotations[disaggregatedset.x-k8s.io/auto-compute-domain]: Unsupported value: {json.dumps(value)}: "
        'supported values: "enabled", "disabled"; or remove the annotation'
    ]


@pytest.mark.parametrize("key", [DS_KEY, LWS_KEY])
def test_a_bad_value_on_a_role_is_refused_at_the_role(key: str) -> None:
    body = build.ds(roles=[build.role("prefill"), build.role("decode", annotations={key: "yes"})])
    assert messages(build.mutated(body)) == [
        f'spec.roles[1].metadata.annotations[{key}]: Unsupported value: "yes": supported values: "enabled", '
        '"disabled"; or remove the annotation'
    ]


def test_a_role_enrolled_in_the_slice_domain_that_asks_for_replica_domains_is_refused_naming_the_role_and_the_fix() -> (
    None
):
    body = build.enabled(roles=[build.role("prefill"), build.role("decode", annotations={LWS_KEY: "enabled"})])
    assert messages(build.mutated(body)) == [
        "spec.roles[1].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Invalid value: "
        '"enabled": role "decode" is already enrolled in the slice ComputeDomain by the DisaggregatedSet\'s '
        "disaggregatedset.x-k8s.io/auto-compute-domain, and a pod can join only one ComputeDomain; set "
        'disaggregatedset.x-k8s.io/auto-compute-domain: "disabled" on this role to give it per-replica '
        "ComputeDomains, or remove this annotation to keep it in the slice ComputeDomain"
    ]


GATE_OFF = (
    "Forbidden: the AutoComputeDomain feature gate is disabled; set featureGates.AutoComputeDomain=true (Helm) or "
    "AutoComputeDomain: true (Configuration), or remove the annotation"
)
NO_API = (
    "Forbidden: the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served; install the NVIDIA "
    "DRA driver with ComputeDomain support, or remove the annotation"
)


@pytest.mark.parametrize(
    ("env", "detail"), [(build.ENV_OFF, GATE_OFF), (build.ENV_NO_API, NO_API)], ids=["gate-off", "api-missing"]
)
def test_opting_in_is_refused_while_the_gate_is_off_or_the_api_is_not_served(
    env: opt_in.Environment, detail: str
) -> None:
    body = build.ds(
        annotations={DS_KEY: "enabled"},
        roles=[build.role("prefill"), build.role("decode", annotations={DS_KEY: "disabled", LWS_KEY: "enabled"})],
    )
    assert messages(build.mutated(body, env), None, env) == [
        f"metadata.annotations[disaggregatedset.x-k8s.io/auto-compute-domain]: {detail}",
        f"spec.roles[1].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: {detail}",
    ]


@pytest.mark.parametrize("env", [build.ENV_OFF, build.ENV_NO_API], ids=["gate-off", "api-missing"])
def test_objects_that_opted_in_earlier_remain_updatable(env: opt_in.Environment) -> None:
    stored = build.mutated(build.seed_example())
    updated = copy.deepcopy(stored)
    updated["spec"]["slices"] = 3
    updated["metadata"]["labels"] = {"team": "inference"}
    assert messages(build.mutated(updated, env), stored, env) == []


def test_with_the_gate_off_the_roles_may_be_reordered_without_opting_anything_in() -> None:
    stored = build.mutated(build.seed_example())
    updated = copy.deepcopy(stored)
    updated["spec"]["roles"].reverse()
    assert messages(updated, stored, build.ENV_OFF) == []


def test_with_the_gate_off_stamps_may_stay_but_not_be_added() -> None:
    stored = build.mutated(build.seed_example())
    forged = copy.deepcopy(stored)
    forged["spec"]["roles"][2]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}
    }
    assert messages(forged, stored, build.ENV_OFF) == [
        "spec.roles[2].spec.leaderWorkerTemplate.workerTemplate.metadata.labels[leaderworkerset.sigs.k8s.io/compute-domain-scope]: "
        'Invalid value: "slice": this label is managed by the AutoComputeDomain feature; remove it from the template'
    ]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(keys.SCOPE_SLICE, id="slice-on-an-opted-out-role"),
        pytest.param(keys.SCOPE_REPLICA, id="replica-without-asking"),
        pytest.param("mine", id="a-value-of-its-own"),
    ],
)
def test_a_scope_label_that_is_not_the_roles_stamp_is_refused(value: str) -> None:
    body = build.seed_example()
    body["spec"]["roles"][2]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {keys.SCOPE_LABEL: value}
    }
    # the mutating webhook removes a stamp of ours from a role without a scope; a value of its own it leaves
    assert messages(body if value == "mine" else build.mutated(body)) == (
        [
            "spec.roles[2].spec.leaderWorkerTemplate.workerTemplate.metadata.labels[leaderworkerset.sigs.k8s.io/compute-domain-scope]: "
            'Invalid value: "mine": this label is managed by the AutoComputeDomain feature; remove it from the template'
        ]
        if value == "mine"
        else []
    )


@pytest.mark.parametrize("key", [keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION, keys.COMPUTE_DOMAIN_NAME_ANNOTATION])
def test_reserved_template_annotations_are_refused_in_role_templates(key: str) -> None:
    body = build.enabled(roles=[build.role("prefill", worker_meta={"annotations": {key: "llm-serving-0-3f9a0c2e"}})])
    assert messages(build.mutated(body)) == [
        f"spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[{key}]: Invalid value: "
        '"llm-serving-0-3f9a0c2e": this annotation is managed by the AutoComputeDomain feature; remove it from the '
        "template"
    ]


def test_the_reserved_claim_name_is_refused_in_role_templates() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "mine"}]
    body = build.ds(roles=[build.role("prefill", worker_spec=spec)])
    assert messages(build.mutated(body)) == [
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].name: Invalid value: "
        '"lws-compute-domain-channel": this claim name is reserved for the automatically managed ComputeDomain '
        "channel; rename your claim"
    ]


def test_a_channel_claim_template_is_refused_in_an_enrolled_roles_template() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": "llm-serving-0-3f9a0c2e-channel"}]
    body = build.enabled(roles=[build.role("prefill", worker_spec=spec)])
    assert messages(build.mutated(body)) == [
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].resourceClaimTemplateName: "
        'Invalid value: "llm-serving-0-3f9a0c2e-channel": this is a ComputeDomain channel claim template, reserved '
        "for the channel claim the AutoComputeDomain feature injects automatically; remove the claim"
    ]


def test_compute_domain_containers_must_name_existing_containers() -> None:
    meta = {"annotations": {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "vllm,proxy"}}
    body = build.enabled(roles=[build.role("prefill", worker_meta=meta)])
    assert messages(build.mutated(body)) == [
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        'Invalid value: "vllm,proxy": no container named "proxy" (containers: "vllm", "routing-proxy"); name '
        "existing containers only"
    ]


def test_every_error_is_reported_at_once() -> None:
    body = build.ds(
        annotations={DS_KEY: "on"},
        roles=[build.role("prefill", annotations={LWS_KEY: "yes"}, worker_meta={"labels": {keys.SCOPE_LABEL: "x"}})],
    )
    assert [error.path for error in rules.ds_errors(build.mutated(body), None, build.ENV_ON)] == [
        "metadata.annotations[disaggregatedset.x-k8s.io/auto-compute-domain]",
        "spec.roles[0].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]",
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.metadata.labels[leaderworkerset.sigs.k8s.io/compute-domain-scope]",
    ]


# --- placement advice --------------------------------------------------------------------------------------

CLIQUE = {"type": "ExclusiveSlice", "topology": keys.GPU_CLIQUE_LABEL}
SLICE_ADVICE = (
    "spec.placementPolicy: slice ComputeDomains are enabled, but no placement policy keeps each slice within one "
    "nvidia.com/gpu.clique: an IMEX channel only connects GPUs within one NVLink clique, so a slice spread over "
    "several cliques cannot use its ComputeDomain; set spec.placementPolicy to type ExclusiveSlice (or "
    "ExclusiveTopology) with topology nvidia.com/gpu.clique"
)


def replica_advice(index: int) -> str:
    return (
        f"spec.roles[{index}].metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]: per-replica "
        "ComputeDomains are enabled, but nothing keeps each replica within one nvidia.com/gpu.clique: an IMEX channel "
        "only connects GPUs within one NVLink clique, so a replica spread over several cliques cannot use its "
        "ComputeDomain; set leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique"
    )


def test_the_seed_example_gets_no_advice() -> None:
    assert rules.ds_warnings(build.seed_example()) == []


@pytest.mark.parametrize(
    "placement",
    [
        pytest.param(None, id="no-policy"),
        pytest.param({"type": "None"}, id="policy-none"),
        pytest.param({"type": "ExclusiveSlice", "topology": "topology.kubernetes.io/rack"}, id="another-topology"),
    ],
)
def test_slice_scope_without_a_placement_policy_on_the_clique_label_gets_a_warning(
    placement: dict[str, str] | None,
) -> None:
    assert rules.ds_warnings(build.enabled(placement=placement)) == [SLICE_ADVICE]


def test_exclusive_topology_on_the_clique_label_is_placement_enough() -> None:
    placement = {"type": "ExclusiveTopology", "topology": keys.GPU_CLIQUE_LABEL}
    assert rules.ds_warnings(build.enabled(placement=placement)) == []


def test_a_per_replica_role_without_exclusive_topology_gets_a_warning() -> None:
    roles = [build.role("prefill", annotations={LWS_KEY: "enabled"}), build.role("decode")]
    assert rules.ds_warnings(build.ds(roles=roles)) == [replica_advice(0)]


def test_under_a_placement_policy_on_another_topology_the_advice_is_the_policys_topology() -> None:
    """Upstream refuses exclusive-topology on roles while the set has a placement policy."""
    rack = {"type": "ExclusiveSlice", "topology": "topology.kubernetes.io/rack"}
    roles = [build.role("prefill", annotations={LWS_KEY: "enabled"}), build.role("decode")]
    [advice] = rules.ds_warnings(build.ds(roles=roles, placement=rack))
    assert advice == replica_advice(0).replace(
        "set leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique",
        "set spec.placementPolicy.topology to nvidia.com/gpu.clique",
    )


def test_a_per_replica_role_placed_by_exclusive_topology_or_the_sets_placement_gets_no_warning() -> None:
    placed_role = build.role(
        "prefill", annotations={LWS_KEY: "enabled", keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION: keys.GPU_CLIQUE_LABEL}
    )
    assert rules.ds_warnings(build.ds(roles=[placed_role, build.role("decode")])) == []
    asking = build.role("prefill", annotations={LWS_KEY: "enabled"})
    assert rules.ds_warnings(build.ds(roles=[asking, build.role("decode")], placement=CLIQUE)) == []


def test_advice_is_a_warning_and_never_an_error() -> None:
    body = build.mutated(build.enabled())
    assert rules.ds_warnings(body) == [SLICE_ADVICE]
    assert messages(body) == []


def test_named_containers_that_leave_gpu_containers_out_get_a_warning_on_enrolled_roles_only() -> None:
    meta = {"annotations": {keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "routing-proxy"}}
    body = build.enabled(
        roles=[
            build.role("prefill", worker_meta=meta),
            build.role("decode", annotations={DS_KEY: "disabled"}, worker_meta=meta),
        ],
        placement=CLIQUE,
    )
    assert rules.ds_warnings(body) == [
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        '"routing-proxy" names no container that requests nvidia.com/gpu, so GPU container "vllm" gets no '
        "ComputeDomain channel; name the GPU containers too, or remove the annotation to target them automatically"
    ]
