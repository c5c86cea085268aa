"""Reserved names and annotation values: rejected at admission with messages that name the field and the fix."""

from __future__ import annotations

import functools

import pytest

from mnnvl_api import keys, names
from mnnvl_runtime import kube

from . import workloads


@pytest.mark.parametrize("value", ["true", "Enabled", " enabled"])
def test_an_invalid_opt_in_value_is_rejected_naming_the_allowed_values(api: kube.Kube, ns: str, value: str) -> None:
    """Anything but "enabled" or "disabled" is rejected, naming the key, the bad value and the allowed values."""
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, workloads.lws_manifest("bad", opt_in=value)))
    assert (
        f'metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Unsupported value: "{value}": '
        'supported values: "enabled", "disabled"; or remove the annotation'
    ) in message


def test_the_reserved_template_annotations_are_rejected_in_user_templates(api: kube.Kube, ns: str) -> None:
    """The leaderworkerset.sigs.k8s.io/compute-domain-prefix and leaderworkerset.sigs.k8s.io/compute-domain-name template annotations are managed by LWS. The admission webhook rejects them in user templates."""
    for key in (keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION, keys.COMPUTE_DOMAIN_NAME_ANNOTATION):
        manifest = workloads.lws_manifest("forged", worker_annotations={key: "mine"})
        message = workloads.rejection(functools.partial(workloads.create_lws, api, ns, manifest))
        assert (
            f'spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[{key}]: Invalid value: "mine": '
            "this annotation is managed by the AutoComputeDomain feature; remove it from the template"
        ) in message


def test_the_reserved_claim_name_is_rejected_in_user_templates(api: kube.Kube, ns: str) -> None:
    """The lws-compute-domain-channel claim name is managed by LWS. The admission webhook rejects it in user templates."""
    manifest = workloads.lws_manifest("claimed")
    spec = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "my-channel"}]
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, manifest))
    assert (
        'spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].name: Invalid value: "lws-compute-domain-channel": '
        "this claim name is reserved for the automatically managed ComputeDomain channel; rename your claim"
    ) in message


def test_a_rejected_update_changes_nothing(api: kube.Kube, ns: str) -> None:
    """Bad input changes nothing: the stored object stays as it was."""
    created = workloads.create_lws(api, ns, workloads.lws_manifest("stable", replicas=1, size=1))
    workloads.rejection(
        lambda: workloads.patch_lws(
            api, ns, "stable", {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "yes"}}}
        )
    )
    stored = api.request("GET", workloads.lws_path(ns, "stable"))
    assert stored["metadata"]["annotations"] == created["metadata"]["annotations"]
    assert stored["spec"] == created["spec"]


def test_leaderworkersets_created_with_generate_name_are_admitted_and_stay_updatable(api: kube.Kube, ns: str) -> None:
    """An LWS created with generateName is admitted, opted in or not; the opted-in one is stamped with its
    generateName, keeps that stamp when updated, and its pods run."""
    opted = workloads.create_lws(
        api, ns, workloads.generate_named(workloads.lws_manifest("", replicas=1, size=2), "opted-")
    )
    plain = workloads.create_lws(
        api, ns, workloads.generate_named(workloads.lws_manifest("", replicas=1, size=1, opt_in=None), "plain-")
    )
    opted_name, plain_name = opted["metadata"]["name"], plain["metadata"]["name"]
    assert opted_name.startswith("opted-")
    assert plain_name.startswith("plain-")
    worker = opted["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert worker["metadata"]["annotations"][keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION] == "opted-"
    assert keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION not in (
        plain["spec"]["leaderWorkerTemplate"]["workerTemplate"].get("metadata", {}).get("annotations") or {}
    )
    workloads.wait_groups_running(api, ns, opted_name, replicas=1, size=2)

    for name in (opted_name, plain_name):
        workloads.patch_lws(api, ns, name, {"spec": {"replicas": 2}})
    scaled = api.request("GET", workloads.lws_path(ns, opted_name))
    assert scaled["spec"]["leaderWorkerTemplate"] == opted["spec"]["leaderWorkerTemplate"]  # no new revision
    assert api.request("GET", workloads.lws_path(ns, plain_name))["spec"]["replicas"] == 2
    pods = workloads.wait_groups_running(api, ns, opted_name, replicas=2, size=2)
    assert len(set(workloads.group_domains(pods).values())) == 2


def test_a_claim_on_a_channel_claim_template_is_rejected_under_any_claim_name(api: kube.Kube, ns: str) -> None:
    """A template claim on one of the ComputeDomain channel claim templates is rejected on an opted-in LWS,
    naming the field: the channel claim is injected automatically."""
    manifest = workloads.lws_manifest("imex")
    spec = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    claim_template = names.claim_template_name(names.replica_domain_name("imex", 0, "x7k2b"))
    spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": claim_template}]
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, manifest))
    assert (
        "spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].resourceClaimTemplateName: "
        f'Invalid value: "{claim_template}": this is a ComputeDomain channel claim template, reserved for the '
        "channel claim the AutoComputeDomain feature injects automatically; remove the claim"
    ) in message


def test_naming_only_containers_without_gpus_is_admitted_with_a_warning_naming_the_gpu_containers(
    api: kube.Kube, ns: str
) -> None:
    """An LWS whose compute-domain-containers names only containers without GPUs, beside GPU containers, is
    admitted, and the API server returns a warning naming the template and the GPU containers left out; and one
    advising placement within one NVLink clique, as nothing here asks for it (seed note on IMEX channels)."""
    manifest = workloads.lws_manifest(
        "proxied", replicas=1, size=1, worker_annotations={keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION: "routing-proxy"}
    )
    created, warnings = workloads.create_lws_with_warnings(api, ns, manifest)
    assert created["metadata"]["name"] == "proxied"
    assert warnings == [
        "metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]: per-replica ComputeDomains are "
        "enabled, but nothing keeps each replica within one nvidia.com/gpu.clique: an IMEX channel only connects "
        "GPUs within one NVLink clique, so a replica spread over several cliques cannot use its ComputeDomain; set "
        "leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique",
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[leaderworkerset.sigs.k8s.io/compute-domain-containers]: "
        '"routing-proxy" names no container that requests nvidia.com/gpu, so GPU container "vllm" gets no '
        "ComputeDomain channel; name the GPU containers too, or remove the annotation to target them automatically",
    ]
    [pod] = workloads.wait_groups_running(api, ns, "proxied", replicas=1, size=1)
    assert workloads.claimed_containers(pod) == ["routing-proxy"]


def test_a_forged_disaggregatedset_owner_does_not_exempt_the_reserved_domain_name(api: kube.Kube, ns: str) -> None:
    """Only a controller owner of the DisaggregatedSet API that the LWS's DisaggregatedSet label names may
    leave the compute-domain-name annotation in a template."""
    manifest = workloads.lws_manifest("forged", worker_annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "llm-0-1"})
    manifest["metadata"]["labels"] = {keys.DS_NAME_LABEL: "llm"}
    owner = {"kind": "DisaggregatedSet", "name": "llm", "uid": "6f1c1e0a-0000-4000-8000-00000000d5d5"}
    manifest["metadata"]["ownerReferences"] = [{**owner, "apiVersion": "example.com/v1", "controller": True}]
    message = workloads.rejection(lambda: workloads.create_lws(api, ns, manifest))
    assert (
        f"spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[{keys.COMPUTE_DOMAIN_NAME_ANNOTATION}]: "
        'Invalid value: "llm-0-1": this annotation is managed by the AutoComputeDomain feature; remove it from the '
        "template"
    ) in message
