"""mnnvl-topology on the testbed, against KAI's and Grove's upstream CRDs (issue 13, the topology seed).

Each test runs the controller with its own topology names and stops it afterwards; CRDs removed by a test are
installed again before it ends, so the session's other tests find the testbed as they expect.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from mnnvl_api import events, keys
from mnnvl_runtime import kube, preflight
from mnnvl_testbed import cluster, controllers, crds, processes, release, testing, thirdparty, versions
from mnnvl_topology import effects, topologies

from . import workloads

TOPOLOGY = (keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL)
BINDING = (keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL)
CLIQUE_AND_HOST = [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}]
TIMEOUT = 60.0
FOREIGN_OBJECTS = "mnnvl_topology_foreign_objects"


@pytest.fixture(scope="module")
def kai(testbed: cluster.Testbed) -> cluster.Testbed:
    """The testbed with KAI v0.16.7's Topology CRD and Grove's binding CRD (NVCF's pins)."""
    return testing.topology_crds(testbed, "kai-v0.16.7")


@pytest.fixture
def name(kai: cluster.Testbed) -> Iterator[str]:
    """A topology name of this test's own; the controller is stopped and whatever it or the test made is deleted."""
    found = f"nvl72-{uuid.uuid4().hex[:6]}"
    yield found
    controllers.stop(kai, keys.TOPOLOGY_CONTROLLER)
    api = kai.api()
    for resource, suffix in ((TOPOLOGY, ""), (BINDING, ""), (BINDING, "-binding"), (TOPOLOGY, "-b")):
        with contextlib.suppress(kube.ApiError):
            api.delete(kube.path_of(*resource, name=found + suffix))


def run(testbed: cluster.Testbed, *topologies: dict[str, Any]) -> controllers.Replica:
    [replica] = controllers.start(testbed, keys.TOPOLOGY_CONTROLLER, extra_config={"topologies": list(topologies)})
    return replica


def get(api: kube.Kube, resource: tuple[str, str], name: str) -> kube.Object | None:
    return api.get(*resource, name)


def wait_object(api: kube.Kube, resource: tuple[str, str], name: str, check: Any = None) -> kube.Object:
    def ready() -> kube.Object | None:
        found = get(api, resource, name)
        return found if found is not None and (check is None or check(found)) else None

    return testing.wait_for(
        ready, what=f"{resource[1]} {name}", timeout=TIMEOUT, state=testing.state_of(lambda: get(api, resource, name))
    )


def reasons_about(api: kube.Kube, name: str, namespace: str = "default") -> list[tuple[str, str, str]]:
    found = api.list_objects("v1", "events", namespace=namespace, fieldSelector=f"involvedObject.name={name}")
    return [
        (e["type"], e["reason"], e["message"])
        for e in found
        if e["source"].get("component") == keys.TOPOLOGY_CONTROLLER
    ]


def wait_event(api: kube.Kube, name: str, reason: str, namespace: str = "default") -> tuple[str, str, str]:
    def posted() -> tuple[str, str, str] | None:
        return next((e for e in reasons_about(api, name, namespace) if e[1] == reason), None)

    return testing.wait_for(
        posted,
        what=f"a {reason} event on {name}",
        timeout=TIMEOUT,
        state=lambda: str(reasons_about(api, name, namespace)),
    )


def wait_metric(replica: controllers.Replica, name: str, labels: dict[str, str], value: float) -> None:
    """Until `replica` serves one sample `name` with `labels`, and its value is `value`."""

    def values() -> list[float]:
        return workloads.metric_values(workloads.replica_metrics(replica), name, labels)

    testing.wait_for(
        lambda: values() == [value], what=f"{name}{labels} == {value}", timeout=TIMEOUT, state=lambda: str(values())
    )


def touched() -> dict[str, Any]:
    """A merge patch that changes nothing the controller reads, so its only effect is an event, hence a pass."""
    return {"metadata": {"annotations": {"e2e.mnnvl.dev/touched": uuid.uuid4().hex}}}


def another_pass(replica: controllers.Replica, work: str, trigger: Callable[[], object]) -> None:
    """Run `trigger` and wait until the controller has completed one more pass of `work`."""
    name, labels = "mnnvl_topology_passes_total", {"work": work}
    before = workloads.metric(replica, name, labels)
    trigger()
    testing.wait_for(
        lambda: workloads.metric(replica, name, labels) > before,
        what=f"another {work} pass",
        timeout=TIMEOUT,
        state=lambda: str(workloads.metric(replica, name, labels)),
    )


def levels_of(topology: kube.Object) -> list[dict[str, str]]:
    levels: list[dict[str, str]] = topology["spec"]["levels"]
    return levels


def discovered(api: kube.Kube, crd: str) -> bool:
    """Whether discovery lists the resource of `crd` (`<plural>.<group>`) in any version of its group. Not the group
    alone: other CRDs may stay in it (the Grove workload stand-ins share `grove.io`)."""
    plural, _, group = crd.partition(".")
    group_versions: list[dict[str, str]] = next(
        (g["versions"] for g in api.request("GET", "/apis")["groups"] if g["name"] == group), []
    )
    return any(preflight.is_served(api, version["groupVersion"], plural) for version in group_versions)


@contextlib.contextmanager
def without_crd(testbed: cluster.Testbed, crd: str, shipped: versions.ThirdPartyFile) -> Iterator[None]:
    """The testbed without one upstream CRD for the duration (its objects go with it), installed again after."""
    api = testbed.api()
    api.delete(kube.path_of(crds.CRD_API, "customresourcedefinitions", name=crd))
    testing.wait_for(
        lambda: api.get(crds.CRD_API, "customresourcedefinitions", crd) is None and not discovered(api, crd),
        what=f"{crd} to be gone",
        timeout=TIMEOUT,
    )
    try:
        yield
    finally:
        crds.install(api, thirdparty.documents(shipped))


@pytest.mark.image_run
def test_the_compute_plane_creates_the_kai_topology_and_a_binding_for_it(kai: cluster.Testbed, name: str) -> None:
    """The compute plane automatically creates this KAI resource on installation."""
    api = kai.api()
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    topology = wait_object(api, TOPOLOGY, name)
    assert levels_of(topology) == CLIQUE_AND_HOST
    assert topology["metadata"]["labels"] == {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER}
    binding = wait_object(api, BINDING, f"{name}-binding")
    assert binding["spec"] == {
        "levels": [
            {"domain": "gpuclique", "key": keys.GPU_CLIQUE_LABEL},
            {"domain": "hostname", "key": keys.HOSTNAME_LABEL},
        ],
        "schedulerTopologyBindings": [{"schedulerName": "kai-scheduler", "topologyReference": name}],
    }
    assert wait_event(api, name, events.TOPOLOGY_CREATED_REASON)[0] == "Normal"


def test_the_binding_is_kept_in_sync_with_the_configuration(kai: cluster.Testbed, name: str) -> None:
    """The topologyAwareScheduling toggle enables topology handling in Grove and automatically creates a binding for each configured KAI topology on installation."""
    api = kai.api()
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    binding = wait_object(api, BINDING, f"{name}-binding")
    path = kube.path_of(*BINDING, name=f"{name}-binding")
    api.request(
        "PATCH",
        path,
        body={"spec": {"schedulerTopologyBindings": None, "levels": [binding["spec"]["levels"][0]]}},
        content_type=kube.MERGE_PATCH,
    )
    restored = wait_object(
        api,
        BINDING,
        f"{name}-binding",
        lambda found: found["spec"].get("schedulerTopologyBindings") and len(found["spec"]["levels"]) == 2,
    )
    assert restored["spec"] == binding["spec"]
    wait_event(api, f"{name}-binding", events.BINDING_UPDATED_REASON)


def test_new_levels_recreate_the_topology_on_kai_v0_16_7(kai: cluster.Testbed, name: str) -> None:
    """Topology levels are ordered from the widest domain to the narrowest domain."""
    api = kai.api()
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    before = wait_object(api, TOPOLOGY, name)
    rack = [{"nodeLabel": "example.com/rack"}, *CLIQUE_AND_HOST]
    run(kai, {"name": name, "levels": rack})
    after = wait_object(api, TOPOLOGY, name, lambda found: levels_of(found) == rack)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    wait_event(api, name, events.TOPOLOGY_RECREATED_REASON)


ALIASED = [{"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "clique"}, {"nodeLabel": keys.HOSTNAME_LABEL}]


@contextlib.contextmanager
def aliased_on_kai_v0_17_0(kai: cluster.Testbed, name: str) -> Iterator[tuple[cluster.Testbed, kube.Object]]:
    """KAI v0.17.0's Topology CRD, and the controller's Topology `name` with aliased levels (`ALIASED`), as
    created; afterwards the controller is stopped and v0.16.7's CRD installed again."""
    upgraded = testing.topology_crds(kai, "kai-v0.17.0")
    try:
        run(upgraded, {"name": name, "levels": ALIASED})
        created = wait_object(upgraded.api(), TOPOLOGY, name)
        assert levels_of(created) == ALIASED
        yield upgraded, created
    finally:
        controllers.stop(upgraded, keys.TOPOLOGY_CONTROLLER)
        testing.topology_crds(upgraded, "kai-v0.16.7")


def test_a_new_alias_is_patched_in_place_on_kai_v0_17_0(kai: cluster.Testbed, name: str) -> None:
    """Topology levels are ordered from the widest domain to the narrowest domain."""
    with aliased_on_kai_v0_17_0(kai, name) as (upgraded, before):
        api = upgraded.api()
        renamed = [
            {"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "nvlink"},
            {"nodeLabel": keys.HOSTNAME_LABEL, "alias": "host"},
        ]
        run(upgraded, {"name": name, "levels": renamed})
        after = wait_object(api, TOPOLOGY, name, lambda found: levels_of(found) == renamed)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        wait_event(api, name, events.TOPOLOGY_ALIASES_UPDATED_REASON)


def foreign_topology(name: str, owner: kube.Object | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": keys.GROVE_API_VERSION,
                "kind": keys.GROVE_BINDING_KIND,
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": keys.KAI_TOPOLOGY_API_VERSION,
        "kind": "Topology",
        "metadata": meta,
        "spec": {"levels": [{"nodeLabel": keys.HOSTNAME_LABEL}]},
    }


@pytest.mark.parametrize("grove_owned", [False, True], ids=["user", "grove"])
def test_a_same_named_topology_we_did_not_create_is_left_alone_with_a_warning(
    kai: cluster.Testbed, name: str, grove_owned: bool
) -> None:
    """Confirm that the KAI topology exists."""
    api = kai.api()
    owner = None
    if grove_owned:  # what Grove makes for a binding without a kai-scheduler entry: a Topology of its name
        owner = api.create(
            {"apiVersion": keys.GROVE_API_VERSION, "kind": keys.GROVE_BINDING_KIND, "metadata": {"name": name},
             "spec": {"levels": [{"domain": "hostname", "key": keys.HOSTNAME_LABEL}]}},
            keys.GROVE_BINDING_PLURAL,
        )  # fmt: skip
    created = api.create(foreign_topology(name, owner), keys.KAI_TOPOLOGY_PLURAL)
    replica = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    kind, _, message = wait_event(api, name, events.UNEXPECTED_TOPOLOGY_OWNER_REASON)
    assert kind == "Warning"
    assert (
        "owned by ClusterTopologyBinding" if grove_owned else "not labelled app.kubernetes.io/managed-by"
    ) in message
    wait_metric(replica, FOREIGN_OBJECTS, {"kind": "Topology"}, 1.0)
    untouched = api.get(*TOPOLOGY, name)
    assert untouched is not None
    assert untouched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert api.get(*BINDING, f"{name}-binding") is None


def test_without_grove_the_topology_works_with_kai_only(kai: cluster.Testbed, name: str) -> None:
    """Use KAI Scheduler only."""
    grove = versions.TOPOLOGY_CRDS[kai.topology_crds or "kai-v0.16.7"].grove_binding
    with without_crd(kai, "clustertopologybindings.grove.io", grove):
        api = kai.api()
        replica = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
        wait_object(api, TOPOLOGY, name)
        assert wait_event(api, name, events.KAI_ONLY_REASON)[0] == "Normal"
        wait_metric(replica, "mnnvl_topologies_kai_only", {}, 1.0)
        # Said once: a Topology event forces another pass, which must not say it again.
        another_pass(replica, "topologies", lambda: api.patch(kube.path_of(*TOPOLOGY, name=name), touched()))
        assert [e[1] for e in reasons_about(api, name)].count(events.KAI_ONLY_REASON) == 1
        controllers.stop(kai, keys.TOPOLOGY_CONTROLLER)


def test_without_kai_the_controller_exits_at_start_up(kai: cluster.Testbed, tmp_path: Any) -> None:
    """Enabling addons.topologyAwareScheduling without addons.kaiScheduler.enabled stops Helmfile rendering with an error."""
    kai_crd = versions.TOPOLOGY_CRDS[kai.topology_crds or "kai-v0.16.7"].kai_topology
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.lws.x-k8s.io/v1",
                "kind": "Configuration",
                "metricsBindAddress": "",
                "healthBindAddress": "",
            }
        )
    )
    with without_crd(kai, keys.KAI_TOPOLOGY_CRD, kai_crd):
        finished = subprocess.run(
            [sys.executable, "-m", "mnnvl_topology"],
            env={**os.environ, "KUBECONFIG": str(kai.kubeconfig), "MNNVL_CONFIG_FILE": str(config), "MNNVL_NAMESPACE": controllers.NAMESPACE},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert finished.returncode == 1
    assert "mnnvl-topology: cannot start: topology-aware scheduling needs KAI Scheduler" in finished.stderr


def test_a_topology_removed_from_the_configuration_is_deleted(kai: cluster.Testbed, name: str) -> None:
    """Creating a Topology does not change workloads that do not opt in."""
    api = kai.api()
    run(
        kai,
        {"name": name, "levels": CLIQUE_AND_HOST},
        {"name": f"{name}-b", "levels": CLIQUE_AND_HOST, "groveBinding": {"name": name}},
    )
    wait_object(api, BINDING, name)
    kept = wait_object(api, TOPOLOGY, f"{name}-b")
    run(kai, {"name": f"{name}-b", "levels": CLIQUE_AND_HOST, "groveBinding": {"name": name}})
    testing.wait_for(
        lambda: api.get(*TOPOLOGY, name) is None and api.get(*BINDING, f"{name}-binding") is None,
        what="removal",
        timeout=TIMEOUT,
    )
    still = api.get(*TOPOLOGY, f"{name}-b")
    assert still is not None
    assert still["metadata"]["uid"] == kept["metadata"]["uid"]
    assert api.get(*BINDING, name) is not None


def test_aliases_are_left_out_with_a_warning_on_kai_v0_16_7(kai: cluster.Testbed, name: str) -> None:
    """Topology levels are ordered from the widest domain to the narrowest domain."""
    api = kai.api()
    replica = run(kai, {"name": name, "levels": ALIASED})
    kind, _, message = wait_event(api, name, events.TOPOLOGY_ALIASES_IGNORED_REASON)
    assert kind == "Warning"
    assert message.startswith(f"Topology {name} is written without its aliases clique: ")
    assert "KAI Scheduler v0.17+ is needed for them" in message
    topology = get(api, TOPOLOGY, name)
    assert topology is not None
    assert levels_of(topology) == CLIQUE_AND_HOST
    # Said once: a Topology event forces another pass, which must not say it again.
    another_pass(replica, "topologies", lambda: api.patch(kube.path_of(*TOPOLOGY, name=name), touched()))
    assert [e[1] for e in reasons_about(api, name)].count(events.TOPOLOGY_ALIASES_IGNORED_REASON) == 1


def test_new_node_labels_recreate_the_topology_on_kai_v0_17_0(kai: cluster.Testbed, name: str) -> None:
    """Topology levels are ordered from the widest domain to the narrowest domain."""
    with aliased_on_kai_v0_17_0(kai, name) as (upgraded, before):
        api = upgraded.api()
        rack = [{"nodeLabel": "example.com/rack", "alias": "rack"}, *ALIASED]
        run(upgraded, {"name": name, "levels": rack})
        after = wait_object(api, TOPOLOGY, name, lambda found: levels_of(found) == rack)
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        wait_event(api, name, events.TOPOLOGY_RECREATED_REASON)


def test_a_removed_topology_leaves_a_same_named_one_we_did_not_create(kai: cluster.Testbed, name: str) -> None:
    """Confirm that the KAI topology exists."""
    api = kai.api()
    created = api.create(foreign_topology(name), keys.KAI_TOPOLOGY_PLURAL)
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST}, {"name": f"{name}-b", "levels": CLIQUE_AND_HOST})
    wait_event(api, name, events.UNEXPECTED_TOPOLOGY_OWNER_REASON)
    wait_object(api, TOPOLOGY, f"{name}-b")
    replica = run(kai, {"name": f"{name}-b", "levels": CLIQUE_AND_HOST})
    # A pass after the topology left the configuration: the one that would have deleted it.
    another_pass(replica, "topologies", lambda: api.patch(kube.path_of(*TOPOLOGY, name=f"{name}-b"), touched()))
    untouched = get(api, TOPOLOGY, name)
    assert untouched is not None
    assert (untouched["metadata"]["uid"], untouched["metadata"]["resourceVersion"]) == (
        created["metadata"]["uid"],
        created["metadata"]["resourceVersion"],
    )
    assert events.TOPOLOGY_DELETED_REASON not in [e[1] for e in reasons_about(api, name)]


def restart_warnings(api: kube.Kube, served: str) -> list[str]:
    """The messages of the Warnings that `served` (an API's name) is served since start-up."""
    return [
        message
        for _, reason, message in reasons_about(api, effects.CENSUS_CONFIGMAP, controllers.NAMESPACE)
        if reason == events.WATCH_NEEDS_RESTART_REASON and message.startswith(f"{served} is served now")
    ]


def test_grove_installed_after_start_up_gets_bindings_and_a_warning_to_restart(kai: cluster.Testbed, name: str) -> None:
    """The topologyAwareScheduling toggle enables topology handling in Grove and automatically creates a binding for each configured KAI topology on installation."""
    api = kai.api()
    grove = versions.TOPOLOGY_CRDS[kai.topology_crds or "kai-v0.16.7"].grove_binding
    before = len(restart_warnings(api, topologies.GROVE_BINDINGS.name))  # events outlive a test session
    with without_crd(kai, topologies.GROVE_BINDINGS.name, grove):
        replica = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
        wait_event(api, name, events.KAI_ONLY_REASON)
    # Installed again on leaving; once discovery lists it, a Topology event brings the next pass forward.
    testing.wait_for(
        lambda: discovered(api, topologies.GROVE_BINDINGS.name),
        what="Grove's binding API in discovery",
        timeout=TIMEOUT,
    )
    topology = kube.path_of(*TOPOLOGY, name=name)
    another_pass(replica, "topologies", lambda: api.patch(topology, touched()))
    wait_object(api, BINDING, f"{name}-binding")
    [message] = restart_warnings(api, topologies.GROVE_BINDINGS.name)[before:]
    assert message.endswith(
        f"restart mnnvl-topology to watch it, e.g. kubectl -n {controllers.NAMESPACE} rollout restart "
        "deployment/mnnvl-topology"
    )
    # Said once: another pass must not say it again.
    another_pass(replica, "topologies", lambda: api.patch(topology, touched()))
    assert len(restart_warnings(api, topologies.GROVE_BINDINGS.name)) == before + 1


def census(api: kube.Kube) -> dict[str, Any]:
    found = api.get("v1", "configmaps", "mnnvl-clique-census", namespace=controllers.NAMESPACE)
    return {} if found is None else dict(json.loads(found["data"]["census.json"]))


def clique_count(api: kube.Kube, clique: str) -> dict[str, Any] | None:
    return next((c for c in census(api).get("cliques", []) if c["clique"] == clique), None)


def test_the_census_follows_pods_holding_channels(kai: cluster.Testbed, name: str) -> None:
    """If Pods remain Pending, verify that one clique has enough free nodes for the entire gang."""
    api = kai.api()
    replica = run(kai)
    nodes = api.list_objects("v1", "nodes")
    clique = sorted(n["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] for n in nodes)[-1]
    members = sum(1 for n in nodes if n["metadata"]["labels"][keys.GPU_CLIQUE_LABEL] == clique)
    with testing.namespace(api, "census") as ns:
        template = workloads.domain_by_hand(api, ns, "by-hand")
        for index in range(2):
            api.create(
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "namespace": ns},
                 "spec": {"nodeSelector": {keys.GPU_CLIQUE_LABEL: clique},
                          "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
                          "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "channel"}]}}]}},
                "pods",
            )  # fmt: skip
        busy = {"clique": clique, "nodes": members, "gpus": 4 * members, "channelNodes": 2, "freeNodes": members - 2}
        testing.wait_for(
            lambda: clique_count(api, clique) == busy,
            what="the census to count 2 channels",
            timeout=TIMEOUT,
            state=lambda: str(clique_count(api, clique)),
        )
        wait_metric(replica, "mnnvl_clique_free_nodes", {"clique": clique}, members - 2)
        for index in range(2):
            api.delete(kube.path_of("v1", "pods", namespace=ns, name=f"p{index}"))
        idle = {**busy, "channelNodes": 0, "freeNodes": members}
        testing.wait_for(
            lambda: clique_count(api, clique) == idle,
            what="the census to free the nodes",
            timeout=TIMEOUT,
            state=lambda: str(clique_count(api, clique)),
        )
        wait_metric(replica, "mnnvl_clique_channel_nodes", {"clique": clique}, 0)


def test_a_gpu_pod_that_finishes_leaves_the_watch_and_frees_its_node(kai: cluster.Testbed, name: str) -> None:
    """The pod watch carries non-terminal pods only (`state.POD_FIELD_SELECTOR`): a GPU pod that finishes leaves the
    selection, which the API server reports as a deletion, and its node is free again while the pod still exists."""
    api = kai.api()
    run(kai)
    home, nodes = wholly_free_clique(api)
    with testing.namespace(api, "finished") as ns:
        api.create(gpu_pod(ns, "trainer", nodeName=nodes[0], restartPolicy="Never"), "pods")
        path = kube.path_of("v1", "pods", namespace=ns, name="trainer")
        testing.wait_for(
            lambda: (clique_count(api, home) or {}).get("freeNodes") == len(nodes) - 1,
            what=f"clique {home} to have one node taken",
            timeout=TIMEOUT,
            state=lambda: str(clique_count(api, home)),
        )
        # Finished as its kubelet would report it, once kwok has made it run (a terminal pod cannot go back).
        testing.wait_for(
            lambda: (api.get("v1", "pods", "trainer", namespace=ns) or {}).get("status", {}).get("phase") == "Running",
            what="the pod to run",
            timeout=TIMEOUT,
        )
        api.patch(f"{path}/status", {"status": {"phase": "Succeeded"}})
        testing.wait_for(
            lambda: (clique_count(api, home) or {}).get("freeNodes") == len(nodes),
            what=f"clique {home} to be free again",
            timeout=TIMEOUT,
            state=lambda: str(clique_count(api, home)),
        )
        finished = api.get("v1", "pods", "trainer", namespace=ns)
        assert finished is not None
        assert finished["status"]["phase"] == "Succeeded"


def test_a_group_larger_than_any_cliques_free_nodes_gets_a_warning(kai: cluster.Testbed, name: str, ns: str) -> None:
    """If Pods remain Pending, verify that one clique has enough free nodes for the entire gang."""
    api = kai.api()
    replica = run(kai)
    manifest = workloads.lws_manifest("too-big", replicas=1, size=5, containers=[workloads.VLLM])
    manifest["metadata"]["annotations"][keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION] = keys.GPU_CLIQUE_LABEL
    workloads.create_lws(api, ns, manifest)
    kind, _, message = wait_event(api, "too-big", events.CLIQUE_TOO_SMALL_REASON, namespace=ns)
    assert kind == "Warning"
    # exclusive-topology placed the leader and three workers in one clique of four nodes: the fifth pod cannot join.
    assert message.startswith("needs 5 nodes in one clique; clique "), message
    assert ", where its pods run, has room for 4; pod too-big-0-" in message, message
    assert len([e for e in reasons_about(api, "too-big", ns) if e[1] == events.CLIQUE_TOO_SMALL_REASON]) == 1
    # Once per change of the message: a pod event forces another fit check of the same group, which must not post.
    pending = next(pod for pod in api.list_objects("v1", "pods", namespace=ns) if not pod["spec"].get("nodeName"))
    path = kube.path_of("v1", "pods", namespace=ns, name=pending["metadata"]["name"])
    another_pass(replica, "fit", lambda: api.patch(path, touched()))
    assert len([e for e in reasons_about(api, "too-big", ns) if e[1] == events.CLIQUE_TOO_SMALL_REASON]) == 1


def cliques_of_nodes(api: kube.Kube) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for node in api.list_objects("v1", "nodes"):
        found.setdefault(node["metadata"]["labels"][keys.GPU_CLIQUE_LABEL], []).append(node["metadata"]["name"])
    return {clique: sorted(names) for clique, names in sorted(found.items())}


def wholly_free_clique(api: kube.Kube) -> tuple[str, list[str]]:
    """A clique whose every node the census counts free (earlier tests' pods may still be going away)."""
    nodes = cliques_of_nodes(api)

    def free() -> str | None:
        return next(
            (c["clique"] for c in census(api).get("cliques", []) if c["freeNodes"] == len(nodes[c["clique"]])), None
        )

    clique = testing.wait_for(free, what="a wholly free clique", timeout=TIMEOUT, state=lambda: str(census(api)))
    return clique, nodes[clique]


def gpu_pod(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": spec.pop("labels", {})},
        "spec": {"containers": [workloads.VLLM], **spec},
    }


def bind(api: kube.Kube, ns: str, pod: str, node: str) -> None:
    """Bind a pod as its scheduler would: KAI Scheduler does not run on the testbed, so the test plays its part."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"kind": "Node", "name": node},
    }
    api.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", body=binding)


def mark_unschedulable(api: kube.Kube, ns: str, pod: str) -> None:
    """The condition KAI Scheduler writes on a pod it cannot place (PodScheduled=False, reason Unschedulable)."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "by the test"}
    api.patch(f"/api/v1/namespaces/{ns}/pods/{pod}/status", {"status": {"conditions": [condition]}})


def wait_pods(api: kube.Kube, ns: str, count: int) -> list[str]:
    def created() -> list[str] | None:
        names = sorted(pod["metadata"]["name"] for pod in api.list_objects("v1", "pods", namespace=ns))
        return names if len(names) >= count else None

    return testing.wait_for(created, what=f"{count} pods", timeout=TIMEOUT)


def fit_warnings(api: kube.Kube, workload: str, ns: str) -> list[str]:
    return [
        message for _, reason, message in reasons_about(api, workload, ns) if reason == events.CLIQUE_TOO_SMALL_REASON
    ]


def test_a_kai_placement_stranded_in_a_clique_is_warned_about_naming_the_clique(
    kai: cluster.Testbed, name: str, ns: str
) -> None:
    """The seed's StatefulSet example: "KAI waits until all replicas fit in one value of nvidia.com/gpu.clique".
    KAI in fact gives a StatefulSet a PodGroup of minMember 1 (kai-scheduler/KAI-Scheduler#2098): its first pod
    lands alone and the others are pinned to that clique. No KAI Scheduler runs here, so the test does what it
    would: binds the first pod into a clique with one node taken, and marks the next one Unschedulable."""
    api = kai.api()
    replica = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    home, nodes = wholly_free_clique(api)
    api.create(gpu_pod(ns, "busy", nodeName=nodes[0]), "pods")
    testing.wait_for(
        lambda: (clique_count(api, home) or {}).get("freeNodes") == len(nodes) - 1,
        what=f"clique {home} to have one node taken",
        timeout=TIMEOUT,
    )
    template = {
        "metadata": {"labels": {"app": "db", "kai.scheduler/queue": "default"}},
        "spec": {"schedulerName": keys.KAI_SCHEDULER_NAME, "containers": [workloads.VLLM]},
    }
    api.create(
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": "db", "namespace": ns,
                      "annotations": {"kai.scheduler/topology": name,
                                      keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: keys.GPU_CLIQUE_LABEL}},
         "spec": {"replicas": len(nodes), "podManagementPolicy": "Parallel", "serviceName": "db",
                  "selector": {"matchLabels": {"app": "db"}}, "template": template}},
        "statefulsets",
    )  # fmt: skip
    wait_pods(api, ns, len(nodes) + 1)
    bind(api, ns, "db-0", nodes[1])
    mark_unschedulable(api, ns, "db-1")

    kind, _, message = wait_event(api, "db", events.CLIQUE_TOO_SMALL_REASON, namespace=ns)
    assert kind == "Warning"
    room = len(nodes) - 1  # its own node and the free ones: one is taken by another pod
    stranded = f"needs {len(nodes)} nodes in one clique; clique {home}, where its pods run, has room for {room}; "
    assert message.startswith(stranded), message
    assert "free nodes for the whole group; pod db-1 is unschedulable" in message, message

    # Freeing the taken node makes room: the group fits, nothing more is posted.
    api.delete(kube.path_of("v1", "pods", namespace=ns, name="busy"))
    testing.wait_for(
        lambda: (clique_count(api, home) or {}).get("freeNodes") == len(nodes) - 1,
        what=f"clique {home} to have only db-0's node taken",
        timeout=TIMEOUT,
    )
    another_pass(replica, "fit", lambda: api.patch(kube.path_of("v1", "pods", namespace=ns, name="db-1"), touched()))
    assert len(fit_warnings(api, "db", ns)) == 1


def owner_reference(found: kube.Object) -> dict[str, Any]:
    meta = found["metadata"]
    return {"apiVersion": found["apiVersion"], "kind": found["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}  # fmt: skip


@pytest.mark.parametrize("made_by_dynamo", [False, True], ids=["podcliqueset", "dynamographdeployment"])
def test_a_grove_gang_no_clique_can_hold_is_warned_about_on_the_workload_that_made_it(
    kai: cluster.Testbed, name: str, ns: str, made_by_dynamo: bool
) -> None:
    """The seed's PodCliqueSet and DynamoGraphDeployment examples with more workers than a clique has nodes.
    Grove's and Dynamo's operators do not run here (their workload CRDs are not available: stand-ins with their
    group, version and kind serve them), so the test writes what they would: the DynamoGraphDeployment, the
    PodCliqueSet, the PodGang Grove hands KAI (`pack.required: gpuclique` translated to the node label) and the
    gang's pods labelled with it; then marks one pod as KAI would. The Warning is on what the user wrote."""
    api = kai.api()
    crds.install_grove_workload_standins(api)
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    _, nodes = wholly_free_clique(api)
    workers = len(nodes) + 1
    binding = f"{name}-binding"
    made_by: list[dict[str, Any]] = []
    if made_by_dynamo:
        dgd = api.create(
            {"apiVersion": keys.DYNAMO_API_VERSION, "kind": keys.DYNAMO_DEPLOYMENT_KIND,
             "metadata": {"name": "my-llm", "namespace": ns},
             "spec": {"topologyConstraint": {"topologyProfile": binding, "packDomain": "gpuclique"},
                      "services": {"VllmWorker": {"componentType": "worker", "replicas": workers}}}},
            keys.DYNAMO_DEPLOYMENT_PLURAL,
        )  # fmt: skip
        made_by = [owner_reference(dgd)]
    pcs = api.create(
        {"apiVersion": keys.GROVE_API_VERSION, "kind": keys.GROVE_PODCLIQUESET_KIND,
         "metadata": {"name": "distributed-inference", "namespace": ns, "ownerReferences": made_by},
         "spec": {"replicas": 1, "template": {
             "topologyConstraint": {"topologyName": binding, "pack": {"required": "gpuclique"}},
             "cliques": [{"name": "worker", "spec": {"roleName": "worker", "replicas": workers,
                                                     "minAvailable": workers}}]}}},
        keys.GROVE_PODCLIQUESET_PLURAL,
    )  # fmt: skip
    pods = [f"distributed-inference-0-worker-{index}" for index in range(workers)]
    api.create(
        {"apiVersion": keys.GROVE_SCHEDULER_API_VERSION, "kind": "PodGang",
         "metadata": {"name": "distributed-inference-0", "namespace": ns, "ownerReferences": [owner_reference(pcs)]},
         "spec": {"podgroups": [{"name": "distributed-inference-0-worker", "minReplicas": workers,
                                 "podReferences": [{"namespace": ns, "name": pod} for pod in pods]}],
                  "topologyConstraint": {"packConstraint": {"required": keys.GPU_CLIQUE_LABEL}}}},
        keys.GROVE_PODGANG_PLURAL,
    )  # fmt: skip
    for pod in pods:
        labels = {keys.GROVE_PODGANG_LABEL: "distributed-inference-0"}
        api.create(gpu_pod(ns, pod, labels=labels, schedulerName=keys.KAI_SCHEDULER_NAME), "pods")
    mark_unschedulable(api, ns, pods[0])

    workload = made_by[0] if made_by else owner_reference(pcs)
    kind, _, message = wait_event(api, workload["name"], events.CLIQUE_TOO_SMALL_REASON, namespace=ns)
    assert kind == "Warning"
    assert message.startswith(f"needs {workers} nodes in one clique; largest free clique has {len(nodes)}: "), message
    [event] = [
        e for e in api.list_objects("v1", "events", namespace=ns)
        if e["reason"] == events.CLIQUE_TOO_SMALL_REASON
    ]  # fmt: skip
    assert (event["involvedObject"]["kind"], event["involvedObject"]["uid"]) == (workload["kind"], workload["uid"])


RACK_CLIQUE_AND_HOST = [{"nodeLabel": "example.com/rack"}, *CLIQUE_AND_HOST]


def copied_manifest(name: str) -> dict[str, Any]:
    """Our Topology `name` as this installation would write it, for someone else to write (a copy, a restore)."""
    return {
        "apiVersion": keys.KAI_TOPOLOGY_API_VERSION,
        "kind": keys.KAI_TOPOLOGY_KIND,
        "metadata": {
            "name": name,
            "labels": {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER},
            "annotations": {keys.INSTALLATION_ANNOTATION: release.INSTALLATION},
        },
        "spec": {"levels": RACK_CLIQUE_AND_HOST},
    }


def unchanged(api: kube.Kube, created: kube.Object) -> None:
    found = get(api, TOPOLOGY, created["metadata"]["name"])
    assert found is not None
    assert (found["metadata"]["uid"], found["metadata"]["resourceVersion"]) == (
        created["metadata"]["uid"],
        created["metadata"]["resourceVersion"],
    )


def test_a_copied_manifest_labelled_ours_is_left_alone_and_reported(kai: cluster.Testbed, name: str) -> None:
    """Labelled and annotated as this installation's Topologies are, but written by another field manager: the
    configured one (other levels: ours would be recreated) is reported and kept as it is, the unconfigured one (ours
    would be deleted) is kept too."""
    api = kai.api()
    configured = api.create(copied_manifest(name), keys.KAI_TOPOLOGY_PLURAL)
    unconfigured = api.create(copied_manifest(f"{name}-b"), keys.KAI_TOPOLOGY_PLURAL)
    replica = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    kind, _, message = wait_event(api, name, events.UNEXPECTED_TOPOLOGY_OWNER_REASON)
    assert kind == "Warning"
    assert f"but written by {cluster.FIELD_MANAGER}, not by mnnvl-topology alone (managedFields)" in message, message
    wait_metric(replica, FOREIGN_OBJECTS, {"kind": "Topology"}, 1.0)
    # Another pass: the one that would recreate the first and delete the second were they ours.
    another_pass(replica, "topologies", lambda: api.patch(kube.path_of(*TOPOLOGY, name=f"{name}-b"), touched()))
    unchanged(api, configured)
    kept = get(api, TOPOLOGY, f"{name}-b")  # touched by the test since: its uid, not its resourceVersion, stays
    assert kept is not None
    assert kept["metadata"]["uid"] == unconfigured["metadata"]["uid"]
    assert get(api, BINDING, f"{name}-binding") is None
    said = [e[1] for e in reasons_about(api, name) + reasons_about(api, f"{name}-b")]
    assert events.TOPOLOGY_RECREATED_REASON not in said
    assert events.TOPOLOGY_DELETED_REASON not in said
    assert said.count(events.UNEXPECTED_TOPOLOGY_OWNER_REASON) == 1


@contextlib.contextmanager
def second_installation(
    testbed: cluster.Testbed, tmp_path: pathlib.Path, *topologies: dict[str, Any]
) -> Iterator[tuple[controllers.Replica, str]]:
    """Another mnnvl-topology beside the release's, run bare (no installation configured: `<namespace>/mnnvl`) in
    a namespace of its own, so it holds its own Lease and leads too; its replica and installation identity."""
    api = testbed.api()
    supervisor = processes.Supervisor(testbed.state_dir)
    replica = controllers.Replica(
        name=f"{keys.TOPOLOGY_CONTROLLER}-second",
        webhook_port=0,
        metrics_port=processes.free_port(),
        health_port=processes.free_port(),
    )
    with testing.namespace(api, "second-installation") as namespace:
        config = tmp_path / "second.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.lws.x-k8s.io/v1",
                    "kind": "Configuration",
                    "metricsBindAddress": f"127.0.0.1:{replica.metrics_port}",
                    "healthBindAddress": f"127.0.0.1:{replica.health_port}",
                    # kopf serves its admission endpoint even without webhooks: a certificate of its own, made here.
                    "webhook": {"host": "127.0.0.1", "port": processes.free_port(), "certDir": str(tmp_path / "certs")},
                    "topologies": list(topologies),
                }
            )
        )
        environment = {"KUBECONFIG": str(testbed.kubeconfig), "MNNVL_CONFIG_FILE": str(config),
                       "MNNVL_NAMESPACE": namespace, "MNNVL_POD_NAME": replica.name,
                       "MNNVL_GENERATE_WEBHOOK_CERTIFICATE": "true"}  # fmt: skip
        supervisor.start(replica.name, [sys.executable, "-m", "mnnvl_topology"], env=environment)
        try:
            yield replica, f"{namespace}/mnnvl"
        finally:
            supervisor.stop(replica.name)


def test_a_second_installation_does_not_fight_the_first(
    kai: cluster.Testbed, name: str, tmp_path: pathlib.Path
) -> None:
    """Two installations configured with one name and different levels: the first creates the Topology and its
    binding; the second reports them as the first's and writes nothing, however many passes both make."""
    api = kai.api()
    first = run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    created = wait_object(api, TOPOLOGY, name)
    assert created["metadata"]["annotations"][keys.INSTALLATION_ANNOTATION] == release.INSTALLATION
    binding = wait_object(api, BINDING, f"{name}-binding")
    with second_installation(kai, tmp_path, {"name": name, "levels": RACK_CLIQUE_AND_HOST}) as (second, identity):
        assert identity != release.INSTALLATION
        kind, _, message = wait_event(api, name, events.UNEXPECTED_TOPOLOGY_OWNER_REASON)
        assert kind == "Warning"
        assert f"made by the installation {release.INSTALLATION} of mnnvl-topology" in message, message
        wait_metric(second, FOREIGN_OBJECTS, {"kind": "Topology"}, 1.0)
        topology = kube.path_of(*TOPOLOGY, name=name)

        def both_pass() -> None:
            """A Topology event, and a pass of each installation after it."""
            another_pass(first, "topologies", lambda: api.patch(topology, touched()))

        for _ in range(2):  # after the second has seen the first's Topology
            another_pass(second, "topologies", both_pass)
        found = get(api, TOPOLOGY, name)
        assert found is not None
        assert (found["metadata"]["uid"], levels_of(found)) == (created["metadata"]["uid"], CLIQUE_AND_HOST)
        kept = get(api, BINDING, f"{name}-binding")
        assert kept is not None
        assert (kept["metadata"]["uid"], kept["metadata"]["resourceVersion"]) == (
            binding["metadata"]["uid"],
            binding["metadata"]["resourceVersion"],
        )
        said = [e[1] for e in reasons_about(api, name)]
        assert events.TOPOLOGY_RECREATED_REASON not in said
        assert said.count(events.UNEXPECTED_TOPOLOGY_OWNER_REASON) == 1


def test_an_earlier_versions_topology_is_adopted_in_place(kai: cluster.Testbed, name: str) -> None:
    """Created by our field manager with no installation recorded, as versions before the installation identity
    did: the configured one now records this installation, the same object (its uid)."""
    api = kai.api()
    earlier = kube.Kube(kube.load_api_client(kai.kubeconfig), field_manager=keys.TOPOLOGY_CONTROLLER)
    manifest = copied_manifest(name)
    del manifest["metadata"]["annotations"]
    manifest["spec"]["levels"] = CLIQUE_AND_HOST
    created = earlier.create(manifest, keys.KAI_TOPOLOGY_PLURAL)
    run(kai, {"name": name, "levels": CLIQUE_AND_HOST})
    adopted = wait_object(
        api,
        TOPOLOGY,
        name,
        lambda found: (
            found["metadata"].get("annotations", {}).get(keys.INSTALLATION_ANNOTATION) == release.INSTALLATION
        ),
    )
    assert adopted["metadata"]["uid"] == created["metadata"]["uid"]
    assert wait_event(api, name, events.TOPOLOGY_ADOPTED_REASON)[0] == "Normal"
