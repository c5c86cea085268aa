"""Availability isolation: unrelated workloads never depend on mnnvl-lws; opted-in ones still fail closed.

The LeaderWorkerSet webhooks carry a CEL match condition, so the API server calls them only for LWS that
concern AutoComputeDomain. These tests stop the mnnvl-lws process and leave its webhook configurations
registered, as in an outage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers

from . import workloads


@pytest.fixture
def mnnvl_lws_down(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> Iterator[None]:
    """mnnvl-lws stopped, its webhooks still registered; running again afterwards, however the test ended."""
    controllers.stop(testbed, keys.LWS_CONTROLLER)
    try:
        yield
    finally:
        controllers.start_lws(testbed, gate=True)


def assert_names_the_unreachable_webhook(what: str, message: str) -> None:
    assert "failed calling webhook" in message, (what, message)
    assert f".{keys.LWS_CONTROLLER}.mnnvl.dev" in message, (what, message)


def test_while_mnnvl_lws_is_down_leaderworkersets_that_do_not_concern_it_are_created_and_updated(
    api: kube.Kube, ns: str, mnnvl_lws_down: None
) -> None:
    """While mnnvl-lws is down, an LWS without the opt-in annotation or mnnvl's marks is created, updated and
    runs: no webhook of mnnvl-lws is called for it."""
    workloads.create_lws(api, ns, workloads.lws_manifest("plain", replicas=1, size=1, opt_in=None))
    nulls = workloads.lws_manifest("nulls", replicas=1, size=1, opt_in=None)  # as templating tools render empties
    nulls["metadata"]["annotations"] = None
    worker = nulls["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    worker["metadata"] = {"annotations": None, "labels": None}
    worker["spec"]["resourceClaims"] = None
    nulls["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = None
    workloads.create_lws(api, ns, nulls)
    workloads.patch_lws(api, ns, "plain", {"spec": {"replicas": 2}, "metadata": {"labels": {"team": "serving"}}})
    stored = api.request("GET", workloads.lws_path(ns, "plain"))
    assert stored["spec"]["replicas"] == 2
    assert stored["metadata"]["labels"] == {"team": "serving"}
    pods = workloads.wait_groups_running(api, ns, "plain", replicas=2, size=1)
    assert all(workloads.domain_of(pod) is None for pod in pods)


def test_while_mnnvl_lws_is_down_leaderworkersets_that_concern_it_are_refused_until_it_is_back(
    api: kube.Kube, ns: str, testbed: cluster.Testbed, lws_controller: list[controllers.Replica]
) -> None:
    """While mnnvl-lws is down, opting in, changing an opted-in LWS and opting out fail closed with an error
    naming the mnnvl-lws webhook; once mnnvl-lws is back, the same requests are admitted."""
    workloads.create_lws(api, ns, workloads.lws_manifest("earlier", replicas=1, size=1))
    workloads.create_lws(api, ns, workloads.lws_manifest("plain", replicas=1, size=1, opt_in=None))
    opt_in = {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}}}
    opt_out = {"metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: None}}}
    once = workloads.without_retries(api)
    refused: list[tuple[str, Callable[[kube.Kube], object]]] = [
        ("create opted in", lambda client: workloads.create_lws(client, ns, workloads.lws_manifest("new", size=1))),
        ("opt in", lambda client: workloads.patch_lws(client, ns, "plain", opt_in)),
        ("scale opted in", lambda client: workloads.patch_lws(client, ns, "earlier", {"spec": {"replicas": 2}})),
        ("opt out", lambda client: workloads.patch_lws(client, ns, "earlier", opt_out)),
    ]
    controllers.stop(testbed, keys.LWS_CONTROLLER)
    try:
        for what, request in refused:
            assert_names_the_unreachable_webhook(what, workloads.webhook_failure(functools.partial(request, once)))
        assert api.get(workloads.LWS_API, "leaderworkersets", "new", namespace=ns) is None
    finally:
        controllers.start_lws(testbed, gate=True)
    for _, request in refused:
        request(api)
    opted_out = api.request("GET", workloads.lws_path(ns, "earlier"))
    assert keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION not in (opted_out["metadata"].get("annotations") or {})
    workloads.wait_groups_running(api, ns, "new", replicas=2, size=1)


def lws_with(
    name: str, *, opt_in: str | None = None, template: str = "workerTemplate", **template_parts: Any
) -> dict[str, Any]:
    """A manifest whose `template` gets `template_parts` (`annotations`, `labels` or `resourceClaims`)."""
    manifest = workloads.lws_manifest(name, replicas=1, size=1, opt_in=opt_in)
    leader_worker = manifest["spec"]["leaderWorkerTemplate"]
    target = leader_worker.setdefault(template, {"spec": {"containers": [dict(workloads.VLLM)]}})
    for part, value in template_parts.items():
        if part == "resourceClaims":
            target["spec"][part] = value
        else:
            target.setdefault("metadata", {})[part] = value
    return manifest


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(
            lws_with("bad-value", opt_in="true"),
            'metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Unsupported value: "true"',
            id="invalid-opt-in-value",
        ),
        pytest.param(
            lws_with("prefix", template="leaderTemplate", annotations={keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION: "x"}),
            f"spec.leaderWorkerTemplate.leaderTemplate.metadata.annotations[{keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION}]: "
            'Invalid value: "x"',
            id="reserved-leader-annotation",
        ),
        pytest.param(
            lws_with("name", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "x"}),
            f"spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[{keys.COMPUTE_DOMAIN_NAME_ANNOTATION}]: "
            'Invalid value: "x"',
            id="reserved-worker-annotation",
        ),
        pytest.param(
            lws_with("scope", template="leaderTemplate", labels={keys.SCOPE_LABEL: "cluster"}),
            f'spec.leaderWorkerTemplate.leaderTemplate.metadata.labels[{keys.SCOPE_LABEL}]: Invalid value: "cluster"',
            id="foreign-scope-label",
        ),
        pytest.param(
            lws_with("channel", resourceClaims=[{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "x"}]),
            'spec.leaderWorkerTemplate.workerTemplate.spec.resourceClaims[0].name: Invalid value: "lws-compute-domain-channel"',
            id="reserved-claim-name",
        ),
    ],
)
def test_leaderworkersets_with_invalid_opt_in_values_or_reserved_template_keys_are_still_refused(
    api: kube.Kube, ns: str, manifest: dict[str, Any], expected: str
) -> None:
    """The match condition sends every LWS with a reserved key to mnnvl-lws, which refuses it, on create and
    on update."""
    assert expected in workloads.rejection(lambda: workloads.create_lws(api, ns, manifest))
    name = manifest["metadata"]["name"]
    workloads.create_lws(api, ns, lws_with(name))
    changed = {"metadata": manifest["metadata"], "spec": manifest["spec"]}
    assert expected in workloads.rejection(lambda: workloads.patch_lws(api, ns, name, changed))


@pytest.fixture
def mnnvl_ds_down(testbed: cluster.Testbed, lws_controller: list[controllers.Replica]) -> Iterator[None]:
    """mnnvl-ds stopped, its webhooks still registered; running again afterwards, however the test ended."""
    controllers.stop(testbed, keys.DS_CONTROLLER)
    try:
        yield
    finally:
        controllers.start(testbed, keys.DS_CONTROLLER, gate=True)


def test_while_mnnvl_ds_is_down_a_plain_disaggregatedset_is_created_and_an_opted_in_one_is_refused(
    api: kube.Kube, ns: str, mnnvl_ds_down: None
) -> None:
    """While mnnvl-ds is down, a DisaggregatedSet without the opt-in annotations or mnnvl's marks is created and
    runs (no webhook of mnnvl-ds is called for it, nor for its LeaderWorkerSets and pods); one that opts in fails
    closed with an error naming the mnnvl-ds webhook."""
    roles = [workloads.role_manifest("prefill", gpus="1"), workloads.role_manifest("decode", gpus="1")]
    workloads.create_ds(api, ns, workloads.ds_manifest("plain", roles=roles, opt_in=None, placement=False))
    [pods] = workloads.wait_slices_running(api, ns, "plain", pods_per_slice={0: 2}).values()
    assert all(workloads.domain_of(pod) is None and workloads.claimed_containers(pod) == [] for pod in pods)
    once = workloads.without_retries(api)
    message = workloads.webhook_failure(lambda: workloads.create_ds(once, ns, workloads.ds_manifest("enrolled")))
    assert "failed calling webhook" in message, message
    assert f".{keys.DS_CONTROLLER}.mnnvl.dev" in message, message
    assert api.get(workloads.DS_API, keys.DS_PLURAL, "enrolled", namespace=ns) is None
