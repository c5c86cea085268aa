"""Partial installs (issue 12): only the guardian; lws without ds; topology alone.

Each install is reached through the chart release: a controller taken out of it is stopped and every object the
release rendered for it (RBAC, webhooks, Configuration, ServiceAccount, ...) is deleted. What stays starts under its
ServiceAccount and does its job; a permission or CRD it lacks stops it with its precise start-up message. Every test
ends with lws, ds and guardian installed and running with the gate on, as the session's other tests expect.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.models import configuration
from mnnvl_cli import uninstall as uninstall_check
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, release, testing
from mnnvl_topology import census_writer, effects, topologies, topology_writer

from . import workloads

LWS = keys.LWS_CONTROLLER
DS = keys.DS_CONTROLLER
GUARDIAN = keys.GUARDIAN_CONTROLLER
TOPOLOGY = keys.TOPOLOGY_CONTROLLER
KAI = "kai-v0.16.7"
TIMEOUT = 60.0
#: Every controller's block renders at least these.
EVERY_BLOCK_RENDERS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"}
#: The controllers whose blocks also render webhook configurations whatever the values (the guardian's need Deny).
ADMITTING = (LWS, DS)


@pytest.fixture
def kai(testbed: cluster.Testbed) -> cluster.Testbed:
    """KAI's Topology CRD and Grove's binding CRD, left installed as test_topology leaves them."""
    return testing.topology_crds(testbed, KAI)


def component_of(manifest: dict[str, Any]) -> str | None:
    found: str | None = manifest["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    return found


def exists(api: kube.Kube, manifest: dict[str, Any]) -> bool:
    resource = release.RESOURCES[manifest["kind"]]
    namespace = release.NAMESPACE if resource.namespaced else None
    return api.get(resource.api_version, resource.plural, manifest["metadata"]["name"], namespace=namespace) is not None


def uninstall(testbed: cluster.Testbed, *taken_out: str) -> None:
    """Take `taken_out` out of the release; check that their processes stopped and that every object the release
    had rendered for them, there until now, is gone (looked up by name, not by the label the pruning uses)."""
    api = testbed.api()
    blocks = {release.BLOCKS[controller] for controller in taken_out}
    rendered = [o for o in release.rendered(testbed).objects if o["kind"] != "Deployment" and component_of(o) in blocks]
    for controller in taken_out:
        kinds = {o["kind"] for o in rendered if component_of(o) == release.BLOCKS[controller]}
        webhooks = (
            {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} if controller in ADMITTING else set()
        )
        assert kinds >= EVERY_BLOCK_RENDERS | webhooks, f"{controller} is not installed: {sorted(kinds)}"
    assert all(exists(api, o) for o in rendered)
    # The chart's check refuses to take out a controller that still has work: let what earlier tests left drain.
    testing.wait_for(
        lambda: uninstall_check.read(api, taken_out) == [],
        what=f"nothing left behind for {', '.join(taken_out)}",
        state=lambda: uninstall_check.as_text(uninstall_check.read(api, taken_out), taken_out),
        timeout=TIMEOUT,
    )
    for controller in taken_out:
        controllers.uninstall(testbed, controller)
    assert [name for c in taken_out for name in controllers.replica_names(testbed, c)] == []
    assert [(o["kind"], o["metadata"]["name"]) for o in rendered if exists(api, o)] == []


def all_but(testbed: cluster.Testbed, kept: str) -> list[str]:
    """The controllers installed now, but `kept`."""
    installed = release.installed_blocks(testbed)
    return [controller for controller, block in release.BLOCKS.items() if controller != kept and block in installed]


# --- only the guardian ----------------------------------------------------------------------------------------


def finalizer_managers(domain: kube.Object) -> set[str]:
    """The field managers that set the protection finalizer, as `managedFields` records them."""
    key = f'v:"{keys.PROTECTION_FINALIZER}"'
    return {
        str(entry["manager"])
        for entry in domain["metadata"].get("managedFields") or ()
        if key in ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:finalizers", {})
    }


def test_only_the_guardian_protects_the_domains_lws_creates(restored: cluster.Testbed, api: kube.Kube, ns: str) -> None:
    """Only the guardian installed: it starts, and puts the protection finalizer back on a domain mnnvl-lws
    created when someone removes it, while a look-alike with the same labels created by someone else stays bare."""
    uninstall(restored, *all_but(restored, GUARDIAN))
    controllers.start(restored, GUARDIAN, gate=True)
    assert set(release.installed_blocks(restored)) == {"guardian"}
    lookalike = api.create(workloads.domain_labelled_as(ns, "lookalike", LWS), keys.COMPUTE_DOMAIN_PLURAL)
    as_lws = kube.Kube(kube.load_api_client(restored.kubeconfig), field_manager=LWS)
    as_lws.create(workloads.domain_labelled_as(ns, "by-lws", LWS), keys.COMPUTE_DOMAIN_PLURAL)
    path = kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name="by-lws")

    def protected() -> kube.Object | None:
        found = api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, "by-lws", namespace=ns)
        return found if found and keys.PROTECTION_FINALIZER in found["metadata"].get("finalizers", []) else None

    state = testing.state_of(lambda: workloads.domains(api, ns))
    testing.wait_for(protected, what="by-lws protected", timeout=TIMEOUT, state=state)
    stripped = api.modify(
        path,
        lambda d: [
            {"op": "test", "path": "/metadata/finalizers", "value": d["metadata"]["finalizers"]},
            {
                "op": "replace",
                "path": "/metadata/finalizers",
                "value": [f for f in d["metadata"]["finalizers"] if f != keys.PROTECTION_FINALIZER],
            },
        ],
    )
    assert stripped is not None
    assert keys.PROTECTION_FINALIZER not in stripped["metadata"].get("finalizers", [])
    again = testing.wait_for(protected, what="by-lws protected again", timeout=TIMEOUT, state=state)
    assert finalizer_managers(again) == {GUARDIAN}
    current = api.get(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, "lookalike", namespace=ns)
    assert current is not None
    assert current["metadata"]["uid"] == lookalike["metadata"]["uid"]
    assert keys.PROTECTION_FINALIZER not in current["metadata"].get("finalizers", [])


# --- lws without ds -------------------------------------------------------------------------------------------


def test_lws_without_ds_runs_its_workloads_and_leaves_disaggregated_sets_alone(
    restored: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    """lws without ds: an opted-in LeaderWorkerSet gets its domain and runs; an enrolled DisaggregatedSet is
    admitted (no webhook of mnnvl-ds is left to refuse it) and runs, but no slice domain appears."""
    uninstall(restored, DS)
    controllers.start(restored, LWS, gate=True)
    workloads.create_lws(api, ns, workloads.lws_manifest("solo", replicas=1, size=2))
    [domain] = set(workloads.group_domains(workloads.wait_groups_running(api, ns, "solo", replicas=1, size=2)).values())
    assert domain is not None
    assert domain in workloads.domains(api, ns)
    created = workloads.create_ds(api, ns, workloads.ds_manifest("sliced"))
    assert created["metadata"]["annotations"][keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION] == "enabled"
    [pods] = workloads.wait_slices_running(api, ns, "sliced", pods_per_slice={0: 3}).values()
    assert [workloads.domain_of(p) for p in pods] == [None, None, None]
    assert all("resourceClaims" not in p["spec"] for p in pods)
    assert set(workloads.domains(api, ns)) == {domain}


# --- topology alone -------------------------------------------------------------------------------------------


def census(api: kube.Kube) -> kube.Object | None:
    return api.get("v1", "configmaps", effects.CENSUS_CONFIGMAP, namespace=release.NAMESPACE)


OURS = topologies.Provenance.OURS
#: What topology's default configuration makes: NVCF's Topology and its binding.
DEFAULT_TOPOLOGY_OBJECTS = (
    (topology_writer.TOPOLOGY, configuration.DEFAULT_TOPOLOGY_NAME),
    (topology_writer.BINDING, f"{configuration.DEFAULT_TOPOLOGY_NAME}-binding"),
)


@pytest.fixture
def default_topology_removed(kai: cluster.Testbed) -> Iterator[None]:
    """Afterwards topology is stopped and the objects its default configuration made are deleted, so the session's
    later tests do not find them; a same-named object topology did not make is left alone."""
    yield
    controllers.stop(kai, TOPOLOGY)
    api = kai.api()
    for (api_version, plural), name in DEFAULT_TOPOLOGY_OBJECTS:
        found = api.get(api_version, plural, name)
        if found is not None and topologies.provenance(found, installation=release.INSTALLATION) is OURS:
            api.delete(kube.path_of(api_version, plural, name=name), uid=found["metadata"]["uid"])


@pytest.mark.usefixtures("default_topology_removed")
def test_topology_alone_publishes_the_clique_census(restored: cluster.Testbed, kai: cluster.Testbed) -> None:
    """Topology alone (lws, ds and guardian uninstalled, KAI installed): it starts and publishes its census of
    every clique."""
    api = kai.api()
    uninstall(kai, *all_but(kai, TOPOLOGY))
    api.delete(kube.path_of("v1", "configmaps", namespace=release.NAMESPACE, name=effects.CENSUS_CONFIGMAP))
    controllers.start(kai, TOPOLOGY)
    assert set(release.installed_blocks(kai)) == {"topology"}
    published = testing.wait_for(lambda: census(api), what="the clique census", timeout=TIMEOUT)
    cliques = {n["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for n in api.list_objects("v1", "nodes")}
    counted = json.loads(published["data"][census_writer.CENSUS_KEY])["cliques"]
    assert {c["clique"] for c in counted} == cliques
    assert {entry["manager"] for entry in published["metadata"]["managedFields"]} == {TOPOLOGY}


# --- a missing permission or CRD ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MissingRule:
    """A controller whose ClusterRole loses its rules for `group`, and what it says at start-up then."""

    controller: str
    group: str
    resource: str
    message: str


MISSING_RULES = [
    MissingRule(
        GUARDIAN,
        keys.COMPUTE_DOMAIN_GROUP,
        keys.COMPUTE_DOMAIN_PLURAL,
        "mnnvl-guardian: cannot start: this controller's service account may not get "
        "computedomains.resource.nvidia.com, list computedomains.resource.nvidia.com, watch "
        "computedomains.resource.nvidia.com, patch computedomains.resource.nvidia.com: enable the chart's "
        "ComputeDomain RBAC (featureGates.AutoComputeDomain=true) or include the config/components/computedomain "
        "kustomize component",
    ),
    MissingRule(
        DS,
        keys.DS_GROUP,
        keys.DS_PLURAL,
        "mnnvl-ds: cannot start: this controller's service account may not get "
        "disaggregatedsets.disaggregatedset.x-k8s.io: grant it in the controller's ClusterRole",
    ),
    MissingRule(
        TOPOLOGY,
        keys.KAI_TOPOLOGY_GROUP,
        keys.KAI_TOPOLOGY_PLURAL,
        "mnnvl-topology: cannot start: this controller's service account may not get topologies.kai.scheduler, "
        "list topologies.kai.scheduler, watch topologies.kai.scheduler, create topologies.kai.scheduler, patch "
        "topologies.kai.scheduler, delete topologies.kai.scheduler: grant it in its ClusterRole",
    ),
]


@pytest.mark.parametrize("case", MISSING_RULES, ids=[case.controller for case in MISSING_RULES])
def test_a_rule_missing_from_the_chart_role_stops_the_controller_at_start_up(
    restored: cluster.Testbed, kai: cluster.Testbed, case: MissingRule
) -> None:
    """A controller installed from the chart starts; with the rules for one API group taken out of its
    ClusterRole it exits at start-up, naming what it may not do."""
    api = kai.api()
    controllers.start(kai, case.controller)
    controllers.stop(kai, case.controller)
    installed = release.rendered(kai)
    account = installed.service_account(case.controller)
    [name] = [
        o["metadata"]["name"]
        for o in installed.objects
        if o["kind"] == "ClusterRole" and component_of(o) == release.BLOCKS[case.controller]
    ]
    role = kube.path_of("rbac.authorization.k8s.io/v1", "clusterroles", name=name)
    rules = api.request("GET", role)["rules"]
    api.patch(role, {"rules": [r for r in rules if case.group not in r["apiGroups"]]})
    # The authorizer follows RBAC changes from a watch: wait until it denies, so the controller meets the denial.
    get_resource = {"verb": "get", "group": case.group, "resource": case.resource}
    testing.wait_for(
        lambda: not testing.service_account_allowed(api, release.NAMESPACE, account, get_resource),
        what=f"get {case.resource} denied",
        timeout=TIMEOUT,
    )
    finished = controllers.run_once(kai, case.controller)
    assert finished.returncode == 1, finished.stderr
    assert case.message in finished.stderr


def test_only_the_guardian_without_the_driver_exits_at_start_up(cluster_without_the_driver: cluster.Testbed) -> None:
    """Only the guardian, installed from the chart where the NVIDIA driver is not: it exits at start-up saying
    the ComputeDomain API is not served (test_prerequisites covers mnnvl-lws, test_topology a missing KAI)."""
    release.install(
        cluster_without_the_driver, GUARDIAN, {"featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: True}}
    )
    finished = controllers.run_once(cluster_without_the_driver, GUARDIAN)
    assert finished.returncode == 1, finished.stderr
    assert (
        "mnnvl-guardian: cannot start: the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not "
        "served: install the NVIDIA DRA driver (k8s-dra-driver-gpu) with ComputeDomain support, or set the "
        "AutoComputeDomain feature gate to false"
    ) in finished.stderr
