from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import keys
from mnnvl_api.decisions import injection

from . import pods
from .gpu_rule import GPU_RULE

TEMPLATE = "deepseek-r1-0-x7k2b-channel"
CLAIM = {"name": keys.CHANNEL_CLAIM_NAME}


def inject(
    spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> tuple[dict[str, Any], injection.Injection]:
    result = injection.inject_channel_claim(spec, annotations or {}, TEMPLATE)
    patched = jsonpatch.apply_patch({"spec": spec}, result.patch)
    return patched["spec"], result


def claim_names(container: dict[str, Any]) -> list[str]:
    return [claim["name"] for claim in (container.get("resources") or {}).get("claims", [])]


def test_the_gpu_container_gets_the_claim_and_the_cpu_sidecar_does_not() -> None:
    spec, result = inject(pods.deepseek_worker_spec())
    assert [target.name for target in result.targets] == ["vllm"]
    assert spec["resourceClaims"] == [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE}]
    assert claim_names(spec["containers"][0]) == [keys.CHANNEL_CLAIM_NAME]
    assert spec["containers"][1] == pods.ROUTING_PROXY
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}


def test_a_cpu_only_leader_gets_no_claim_at_all() -> None:
    spec, result = inject(pods.cpu_leader_spec())
    assert result.patch == []
    assert result.errors == []
    assert spec == pods.cpu_leader_spec()


def test_named_containers_get_the_claim_when_gpus_come_from_dra() -> None:
    spec, result = inject(pods.dra_gpu_spec(), pods.dra_gpu_annotations("vllm"))
    assert [target.name for target in result.targets] == ["vllm"]
    assert claim_names(spec["containers"][0]) == ["gpus", keys.CHANNEL_CLAIM_NAME]
    assert spec["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "four-gpus"},
        {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE},
    ]
    assert "resources" not in spec["containers"][1]


def test_naming_containers_overrides_gpu_detection() -> None:
    spec, result = inject(pods.deepseek_worker_spec(), pods.dra_gpu_annotations("routing-proxy"))
    assert [target.name for target in result.targets] == ["routing-proxy"]
    assert claim_names(spec["containers"][0]) == []


def test_names_are_trimmed_and_empty_entries_ignored() -> None:
    _, result = inject(pods.deepseek_worker_spec(), pods.dra_gpu_annotations(" vllm , routing-proxy ,"))
    assert [target.name for target in result.targets] == ["vllm", "routing-proxy"]


def test_unknown_container_names_are_an_error_listing_them_and_nothing_is_patched() -> None:
    _, result = inject(pods.dra_gpu_spec(), pods.dra_gpu_annotations("vllm,proxy,decoder"))
    assert result.patch == []
    assert [str(error) for error in result.errors] == [
        "metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: Invalid value: "
        '"vllm,proxy,decoder": no containers named "proxy", "decoder" (containers: "vllm", "routing-proxy"); '
        "name existing containers only"
    ]


def test_an_annotation_naming_nothing_is_an_error() -> None:
    _, result = inject(pods.deepseek_worker_spec(), pods.dra_gpu_annotations(" , "))
    assert [error.detail for error in result.errors] == ["names no container; list container names separated by commas"]


def test_errors_on_a_template_name_the_template_path() -> None:
    targets, found = injection.target_containers(
        pods.deepseek_worker_spec(), pods.dra_gpu_annotations("proxy"), path="spec.leaderWorkerTemplate.workerTemplate"
    )
    assert targets == []
    assert found[0].path == (
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]"
    )


def test_a_restartable_init_container_requesting_a_gpu_is_a_target_and_a_plain_init_container_is_not() -> None:
    spec, result = inject(pods.restartable_init_spec())
    assert [(target.field, target.name) for target in result.targets] == [
        ("containers", "vllm"),
        ("initContainers", "nixl-agent"),
    ]
    assert claim_names(spec["initContainers"][1]) == [keys.CHANNEL_CLAIM_NAME]
    assert claim_names(spec["initContainers"][0]) == []


def test_an_existing_user_claim_with_the_reserved_name_is_an_error() -> None:
    spec = pods.deepseek_worker_spec()
    spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "my-own"}]
    _, result = inject(spec)
    assert result.patch == []
    assert [str(error) for error in result.errors] == [
        'spec.resourceClaims[0].name: Invalid value: "lws-compute-domain-channel": this claim name is reserved for '
        "the automatically managed ComputeDomain channel; rename your claim"
    ]


@pytest.mark.parametrize(
    "quantity",
    [pytest.param("0", id="zero-string"), pytest.param(0, id="zero-int"), pytest.param("0.0", id="zero-decimal")],
)
def test_zero_gpus_is_not_a_gpu_request(quantity: object) -> None:
    assert not injection.requests_gpu({"resources": {"limits": {"nvidia.com/gpu": quantity}}})


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param({"limits": {"nvidia.com/gpu": "1"}}, id="limits"),
        pytest.param({"requests": {"nvidia.com/gpu": 2}}, id="requests-int"),
        pytest.param({"requests": {"nvidia.com/gpu": "8"}, "limits": {"cpu": "1"}}, id="requests-with-other-limits"),
    ],
)
def test_a_positive_gpu_quantity_in_limits_or_requests_is_a_gpu_request(resources: dict[str, Any]) -> None:
    assert injection.requests_gpu({"resources": resources})


@pytest.mark.parametrize(("spec", "expected"), [pytest.param(s, e, id=i) for i, s, e in GPU_RULE])
def test_the_gpu_rule(spec: dict[str, Any], expected: bool) -> None:
    assert injection.pod_requests_gpu(spec) is expected
    targets, errors = injection.target_containers(spec, {})
    assert errors == []
    assert bool(targets) is expected  # the claim goes exactly where the rule sees a GPU


def test_the_scheduling_gate_is_added_once() -> None:
    spec = pods.deepseek_worker_spec()
    patch = injection.scheduling_gate_patch(spec)
    gated = jsonpatch.apply_patch({"spec": spec}, patch)["spec"]
    assert gated["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    assert injection.is_gated(gated)
    assert injection.scheduling_gate_patch(gated) == []


def test_the_scheduling_gate_is_appended_after_other_gates_and_removed_alone() -> None:
    spec = {**pods.deepseek_worker_spec(), "schedulingGates": [{"name": "example.com/quota"}]}
    gated = jsonpatch.apply_patch({"spec": spec}, injection.scheduling_gate_patch(spec))["spec"]
    assert gated["schedulingGates"] == [{"name": "example.com/quota"}, {"name": keys.SCHEDULING_GATE}]
    ungated = jsonpatch.apply_patch({"spec": gated}, injection.scheduling_gate_removal(gated))["spec"]
    assert ungated["schedulingGates"] == [{"name": "example.com/quota"}]
    assert injection.scheduling_gate_removal(ungated) == []


# --- properties ------------------------------------------------------------------------------------------

container_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
gpu_amounts = st.sampled_from([None, "0", "1", "4", 2, 0])


@st.composite
def containers(draw: st.DrawFn, *, init: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(container_names), "image": "example"}
    amount = draw(gpu_amounts)
    shape = draw(st.sampled_from(["none", "empty", "limits", "requests", "with-claims"]))
    if shape == "empty":
        container["resources"] = {}
    elif shape != "none":
        resources: dict[str, Any] = {}
        if amount is not None:
            resources["limits" if shape == "limits" else "requests"] = {"nvidia.com/gpu": amount}
        if shape == "with-claims":
            resources["claims"] = [{"name": "gpus"}]
        container["resources"] = resources
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": draw(st.lists(containers(), min_size=1, max_size=4, unique_by=lambda c: c["name"]))
    }
    taken = {c["name"] for c in spec["containers"]}
    inits = draw(st.lists(containers(init=True), max_size=3, unique_by=lambda c: c["name"]))
    spec["initContainers"] = [c for c in inits if c["name"] not in taken] or None
    if spec["initContainers"] is None:
        del spec["initContainers"]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
    if draw(st.booleans()):
        spec["schedulingGates"] = [{"name": "example.com/other"}]
    return spec


@given(spec=pod_specs())
def test_injection_is_idempotent(spec: dict[str, Any]) -> None:
    once, first = inject(copy.deepcopy(spec))
    assert first.errors == []
    twice, second = inject(copy.deepcopy(once))
    assert second.patch == []
    assert twice == once


@given(spec=pod_specs())
def test_only_targets_change_and_order_is_preserved(spec: dict[str, Any]) -> None:
    patched, result = inject(copy.deepcopy(spec))
    targeted = {(target.field, target.index) for target in result.targets}
    for field in ("containers", "initContainers"):
        before, after = spec.get(field) or [], patched.get(field) or []
        assert [c["name"] for c in after] == [c["name"] for c in before]
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if (field, index) in targeted:
                assert claim_names(new) == [*claim_names(old), keys.CHANNEL_CLAIM_NAME]
                assert {k: v for k, v in new.items() if k != "resources"} == {
                    k: v for k, v in old.items() if k != "resources"
                }
            else:
                assert new == old
    old_claims = spec.get("resourceClaims") or []
    new_claims = patched.get("resourceClaims") or []
    assert new_claims[: len(old_claims)] == old_claims
    assert spec.get("schedulingGates") == patched.get("schedulingGates")


@given(spec=pod_specs())
def test_the_pod_gets_the_claim_exactly_when_some_container_is_targeted(spec: dict[str, Any]) -> None:
    patched, result = inject(copy.deepcopy(spec))
    channel_claims = [c for c in patched.get("resourceClaims") or [] if c["name"] == keys.CHANNEL_CLAIM_NAME]
    assert len(channel_claims) == (1 if result.targets else 0)


@given(spec=pod_specs())
def test_the_gate_patch_is_idempotent_and_keeps_other_gates(spec: dict[str, Any]) -> None:
    gated = jsonpatch.apply_patch({"spec": copy.deepcopy(spec)}, injection.scheduling_gate_patch(spec))["spec"]
    assert injection.scheduling_gate_patch(gated) == []
    assert gated["schedulingGates"][: len(spec.get("schedulingGates") or [])] == (spec.get("schedulingGates") or [])
