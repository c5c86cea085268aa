"""The chart's admission policies, with the controllers' own ServiceAccount tokens: each controller's writes pass as
its code makes them, and the rest of what its RBAC grants on the same resources is refused, by the policy the refusal
names (docs/install.md, "What the admission policies enforce")."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import injection, patches
from mnnvl_api.models import configuration
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, release, testing
from mnnvl_topology import census_writer, effects, topologies

from . import workloads

FOREIGN_GATE = "example.com/not-mnnvl"
TOPOLOGY = (keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL)
BINDING = (keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL)


def as_controller(testbed: cluster.Testbed, controller: str) -> kube.Kube:
    """A client authenticated as `controller`'s ServiceAccount, writing as its field manager, as the process does."""
    kubeconfig = release.service_account_kubeconfig(testbed, release.rendered(testbed), controller)
    return kube.Kube(kube.load_api_client(kubeconfig), field_manager=controller)


def refused_by(testbed: cluster.Testbed, controller: str, resource: str, call: Callable[[], object]) -> str:
    """The message of the refusal `call` meets, which must come from `controller`'s policy on `resource`."""
    policy = f"{release.rendered(testbed).service_account(controller)}-{resource}"
    with pytest.raises(kube.ApiError) as rejected:
        call()
    message: str = json.loads(rejected.value.body or "{}").get("message", "")
    assert f"ValidatingAdmissionPolicy '{policy}'" in message, message
    # 403: the controllers report it as a refusal, where a 422 would pass for a failed JSON-patch test.
    assert rejected.value.status == 403, message
    return message


def domain_path(ns: str, name: str) -> str:
    return kube.path_of(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)


@contextlib.contextmanager
def gated_pod(api: kube.Kube, scope: str) -> Iterator[kube.Object]:
    """A pod of `scope` held by mnnvl's gate and a foreign one. It lives in the release namespace, which no mnnvl
    webhook is called for, and records no domain, so no controller ungates it on its own."""
    pod: kube.Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"policy-probe-{uuid.uuid4().hex[:6]}",
            "namespace": release.NAMESPACE,
            "labels": {keys.SCOPE_LABEL: scope},
        },
        "spec": {
            "schedulingGates": [{"name": keys.SCHEDULING_GATE}, {"name": FOREIGN_GATE}],
            "containers": [{"name": "main", "image": "registry.example/main:1"}],
        },
    }
    created = api.create(pod, "pods")
    try:
        yield created
    finally:
        path = kube.path_of("v1", "pods", namespace=release.NAMESPACE, name=pod["metadata"]["name"])
        api.request("DELETE", path, body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def test_a_scope_controller_may_only_remove_its_own_gate_from_its_own_pods(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    lws, ds = as_controller(testbed, keys.LWS_CONTROLLER), as_controller(testbed, keys.DS_CONTROLLER)
    with gated_pod(api, keys.SCOPE_REPLICA) as pod:
        path = kube.path_of("v1", "pods", namespace=release.NAMESPACE, name=pod["metadata"]["name"])
        uid_test = {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]}
        ungate = [uid_test, *injection.gate_removal_at(0)]  # the patch DomainWriter.ungate sends

        def patched(*operations: dict[str, Any], client: kube.Kube = lws) -> Callable[[], object]:
            return lambda: client.patch(path, list(operations), content_type=kube.JSON_PATCH)

        new_image = {"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example/other:1"}
        assert "may change nothing of a pod's spec" in refused_by(
            testbed, keys.LWS_CONTROLLER, "pods", patched(*ungate, new_image)
        )
        foreign_gate = {"op": "remove", "path": "/spec/schedulingGates/1"}
        assert "may only remove its scheduling gate" in refused_by(
            testbed, keys.LWS_CONTROLLER, "pods", patched(uid_test, foreign_gate)
        )
        # Both scope controllers hold pods with the same gate: each may lift it from its own scope's pods only.
        assert "compute-domain-scope=slice" in refused_by(
            testbed, keys.DS_CONTROLLER, "pods", patched(*ungate, client=ds)
        )

        ungated = lws.patch(path, ungate, content_type=kube.JSON_PATCH)
        assert ungated["spec"]["schedulingGates"] == [{"name": FOREIGN_GATE}]
        assert ungated["spec"]["containers"][0]["image"] == "registry.example/main:1"


def test_a_scope_controller_writes_only_the_domains_it_created(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    lws = as_controller(testbed, keys.LWS_CONTROLLER)
    ours = lws.create(workloads.domain_labelled_as(ns, "ours", keys.LWS_CONTROLLER), keys.COMPUTE_DOMAIN_PLURAL)
    # Only as the controller makes them: no other shape, and no deletion before the fence's condemned mark.
    wider = workloads.domain_labelled_as(ns, "wider", keys.LWS_CONTROLLER)
    wider["spec"]["numNodes"] = 18
    assert "may only create ComputeDomains as it makes them" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.create(wider, keys.COMPUTE_DOMAIN_PLURAL)
    )
    assert "condemned first" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.delete(domain_path(ns, "ours"))
    )
    # A condemned mark, as the fenced deletion sets it.
    mark = patches.set_annotation(ours["metadata"], keys.CONDEMNED_ANNOTATION, f"{keys.LWS_CONTROLLER}/probe")
    marked = lws.patch(domain_path(ns, "ours"), mark, content_type=kube.JSON_PATCH)
    assert marked["metadata"]["annotations"][keys.CONDEMNED_ANNOTATION] == f"{keys.LWS_CONTROLLER}/probe"
    relabel = {"metadata": {"labels": {keys.OWNER_UID_LABEL: str(uuid.uuid4())}}}
    assert "may only set or lift the annotation" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.patch(domain_path(ns, "ours"), relabel)
    )

    unlabelled = workloads.domain_labelled_as(ns, "unlabelled", keys.LWS_CONTROLLER)
    del unlabelled["metadata"]["labels"]
    assert "may only write ComputeDomains labelled" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.create(unlabelled, keys.COMPUTE_DOMAIN_PLURAL)
    )
    as_someone_else = kube.Kube(lws.api, field_manager="someone-else")
    labelled = workloads.domain_labelled_as(ns, "other-manager", keys.LWS_CONTROLLER)
    assert "as field manager mnnvl-lws" in refused_by(
        testbed,
        keys.LWS_CONTROLLER,
        "computedomains",
        lambda: as_someone_else.create(labelled, keys.COMPUTE_DOMAIN_PLURAL),
    )

    # A foreign domain, and one labelled as mnnvl-lws's by someone else: neither may mnnvl-lws delete.
    workloads.create_foreign_domain(api, ns, "foreign", {})
    kube.Kube(api.api, field_manager="e2e").create(
        workloads.domain_labelled_as(ns, "look-alike", keys.LWS_CONTROLLER), keys.COMPUTE_DOMAIN_PLURAL
    )
    assert "may only write ComputeDomains labelled" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.delete(domain_path(ns, "foreign"))
    )
    assert "ComputeDomains it created" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", lambda: lws.delete(domain_path(ns, "look-alike"))
    )
    # Nor may mnnvl-ds delete mnnvl-lws's; the guardian may put only its own finalizer, and only on mnnvl's domains.
    ds = as_controller(testbed, keys.DS_CONTROLLER)
    refused_by(testbed, keys.DS_CONTROLLER, "computedomains", lambda: ds.delete(domain_path(ns, "ours")))
    guardian = as_controller(testbed, keys.GUARDIAN_CONTROLLER)

    def finalized(name: str, finalizer: str, *, by: kube.Kube = guardian) -> Callable[[], object]:
        current = api.get(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns)
        assert current is not None
        added: kube.JsonPatch
        if current["metadata"].get("finalizers"):
            added = [{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]
        else:
            added = [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
        return lambda: by.patch(domain_path(ns, name), added, content_type=kube.JSON_PATCH)

    assert "may only add the finalizer" in refused_by(
        testbed, keys.GUARDIAN_CONTROLLER, "computedomains", finalized("ours", workloads.HOLD_FINALIZER)
    )
    assert "that mnnvl-lws or mnnvl-ds created" in refused_by(
        testbed, keys.GUARDIAN_CONTROLLER, "computedomains", finalized("look-alike", keys.PROTECTION_FINALIZER)
    )

    # Its protection finalizer (the guardian's, put here if the guardian has not yet) comes off only once the domain
    # is being deleted.
    def release_protection() -> kube.Object:
        current = api.get(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, "ours", namespace=ns)
        assert current is not None
        at = current["metadata"]["finalizers"].index(keys.PROTECTION_FINALIZER)
        removal: kube.JsonPatch = [
            {"op": "test", "path": f"/metadata/finalizers/{at}", "value": keys.PROTECTION_FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{at}"},
        ]
        return lws.patch(domain_path(ns, "ours"), removal, content_type=kube.JSON_PATCH)

    current = api.get(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, "ours", namespace=ns)
    assert current is not None
    if keys.PROTECTION_FINALIZER not in current["metadata"].get("finalizers", []):
        finalized("ours", keys.PROTECTION_FINALIZER, by=api)()
    assert "once they are being deleted" in refused_by(
        testbed, keys.LWS_CONTROLLER, "computedomains", release_protection
    )
    assert lws.delete(domain_path(ns, "ours"), uid=ours["metadata"]["uid"])
    assert keys.PROTECTION_FINALIZER not in release_protection()["metadata"].get("finalizers", [])


def test_mnnvl_ds_sets_only_its_own_annotation_on_a_disaggregatedset(
    testbed: cluster.Testbed, api: kube.Kube, ns: str
) -> None:
    role = {
        "replicas": 0,
        "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    manifest = {
        "apiVersion": keys.DS_API_VERSION,
        "kind": keys.DS_KIND,
        "metadata": {"name": "set", "namespace": ns},
        "spec": {"roles": [{"name": "prefill", "spec": role}, {"name": "decode", "spec": role}]},
    }
    created = workloads.create_ds(api, ns, manifest)
    ds = as_controller(testbed, keys.DS_CONTROLLER)
    path = workloads.ds_path(ns, "set")
    # As mnnvl-ds asks upstream to reconcile a set again (retries.UpstreamRetries).
    ask = patches.set_annotation(created["metadata"], keys.RECONCILE_REQUESTED_ANNOTATION, "2026-01-01T00:00:00Z")
    asked = ds.patch(path, ask, content_type=kube.JSON_PATCH)
    assert asked["metadata"]["annotations"][keys.RECONCILE_REQUESTED_ANNOTATION] == "2026-01-01T00:00:00Z"

    foreign = patches.set_annotation(asked["metadata"], "example.com/note", "set by mnnvl-ds")
    assert "may only set the annotation" in refused_by(
        testbed,
        keys.DS_CONTROLLER,
        "disaggregatedsets",
        lambda: ds.patch(path, foreign, content_type=kube.JSON_PATCH),
    )


@pytest.fixture
def topology_release(restored: cluster.Testbed) -> cluster.Testbed:
    """mnnvl-topology's block installed with KAI's and Grove's CRDs, no process started: the test writes as it does
    (`restored` uninstalls it afterwards)."""
    with_kai = testing.topology_crds(restored, "kai-v0.16.7")
    release.install(with_kai, keys.TOPOLOGY_CONTROLLER, {"kaiScheduler": {"installed": True}})
    return with_kai


def test_mnnvl_topology_writes_only_this_installations_topology_objects_and_its_census(
    topology_release: cluster.Testbed, api: kube.Kube
) -> None:
    testbed, stem = topology_release, f"policy-probe-{uuid.uuid4().hex[:6]}"
    topology = as_controller(testbed, keys.TOPOLOGY_CONTROLLER)
    entry = configuration.TopologySettings.model_validate(
        {"name": stem, "levels": [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}]}
    )
    desired = topologies.desired_topology(entry, aliases=False, installation=release.INSTALLATION)
    binding = topologies.desired_binding(entry, installation=release.INSTALLATION)
    assert binding is not None
    # Stand-ins made by others under names mnnvl-topology could be configured with: a foreign Topology, another
    # installation's binding, and a Topology an earlier version made (no installation recorded), which it adopts.
    foreign = {**desired, "metadata": {"name": f"{stem}-foreign"}}
    other = {**binding, "metadata": {**binding["metadata"], "name": f"{stem}-other"}}
    other["metadata"]["annotations"] = {keys.INSTALLATION_ANNOTATION: "elsewhere/mnnvl"}
    legacy = {**desired, "metadata": {"name": f"{stem}-legacy", "labels": dict(topologies.OURS)}}
    made = [(TOPOLOGY, foreign), (TOPOLOGY, legacy), (BINDING, other)]
    try:
        for (_, plural), manifest in made:
            as_made_by = "e2e" if manifest is foreign else keys.TOPOLOGY_CONTROLLER
            kube.Kube(api.api, field_manager=as_made_by).create(manifest, plural)
        # Its writes, as TopologyWriter makes them: create, apply as read (adopt, patch), delete as read.
        created = topology.create(desired, keys.KAI_TOPOLOGY_PLURAL)
        topology.apply(topologies.conditional(desired, created), keys.KAI_TOPOLOGY_PLURAL)
        found_legacy = api.get(*TOPOLOGY, legacy["metadata"]["name"])
        assert found_legacy is not None
        adopted = {**desired, "metadata": {**desired["metadata"], "name": legacy["metadata"]["name"]}}
        adopted = topology.apply(topologies.conditional(adopted, found_legacy), keys.KAI_TOPOLOGY_PLURAL)
        assert adopted["metadata"]["annotations"][keys.INSTALLATION_ANNOTATION] == release.INSTALLATION
        written = topology.create(binding, keys.GROVE_BINDING_PLURAL)
        for resource, ours in ((BINDING, written), (TOPOLOGY, api.get(*TOPOLOGY, stem))):
            assert ours is not None
            meta = ours["metadata"]
            path = kube.path_of(*resource, name=meta["name"])
            assert topology.delete(path, uid=meta["uid"], resource_version=meta["resourceVersion"])

        # Nothing of anyone else's: neither taken over, nor deleted, nor created unmarked.
        foreign_path = kube.path_of(*TOPOLOGY, name=foreign["metadata"]["name"])
        taken = {**desired, "metadata": {**desired["metadata"], "name": foreign["metadata"]["name"]}}
        assert "KAI Topologies this installation made" in refused_by(
            testbed, keys.TOPOLOGY_CONTROLLER, "topologies", lambda: topology.apply(taken, keys.KAI_TOPOLOGY_PLURAL)
        )
        assert "KAI Topologies this installation made" in refused_by(
            testbed, keys.TOPOLOGY_CONTROLLER, "topologies", lambda: topology.delete(foreign_path)
        )
        other_path = kube.path_of(*BINDING, name=other["metadata"]["name"])
        assert "Grove ClusterTopologyBindings this installation made" in refused_by(
            testbed, keys.TOPOLOGY_CONTROLLER, "clustertopologybindings", lambda: topology.delete(other_path)
        )
        unmarked = {**desired, "metadata": {"name": f"{stem}-unmarked", "labels": dict(topologies.OURS)}}
        assert f"annotated {keys.INSTALLATION_ANNOTATION}={release.INSTALLATION}" in refused_by(
            testbed,
            keys.TOPOLOGY_CONTROLLER,
            "topologies",
            lambda: topology.create(unmarked, keys.KAI_TOPOLOGY_PLURAL),
        )

        # Its census ConfigMap, as CensusWriter applies it, and no other ConfigMap or data.
        census: kube.Object = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": effects.CENSUS_CONFIGMAP,
                "namespace": release.NAMESPACE,
                "labels": dict(topologies.OURS),
            },
            "data": {census_writer.CENSUS_KEY: "{}"},
        }
        assert topology.apply(census, "configmaps")["data"] == {census_writer.CENSUS_KEY: "{}"}
        more = {**census, "data": {census_writer.CENSUS_KEY: "{}", "note": "x"}}
        assert "may only write the data key" in refused_by(
            testbed, keys.TOPOLOGY_CONTROLLER, "configmaps", lambda: topology.apply(more, "configmaps")
        )
        # RBAC lets it create any ConfigMap in its namespace (a create cannot be narrowed to a name); the policy not.
        renamed = {**census, "metadata": {**census["metadata"], "name": f"{stem}-census"}}
        assert "its census ConfigMap" in refused_by(
            testbed, keys.TOPOLOGY_CONTROLLER, "configmaps", lambda: topology.create(renamed, "configmaps")
        )
    finally:
        for resource, manifest in [*made, (TOPOLOGY, desired), (BINDING, binding)]:
            with contextlib.suppress(kube.ApiError):
                api.delete(kube.path_of(*resource, name=manifest["metadata"]["name"]))
        with contextlib.suppress(kube.ApiError):
            api.delete(kube.path_of("v1", "configmaps", namespace=release.NAMESPACE, name=effects.CENSUS_CONFIGMAP))
