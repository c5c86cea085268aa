"""Reserved names and annotation values: rejected at admission with messages that name the field and the fix."""

from __future__ import annotations

import pytest

from mnnvl_api import keys
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
        message = workloads.rejection(lambda manifest=manifest: workloads.create_lws(api, ns, manifest))
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
