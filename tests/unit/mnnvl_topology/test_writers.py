"""mnnvl-topology's executor against a fake API server: one refused object does not stop the others."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mnnvl_api import events as reasons
from mnnvl_api import keys
from mnnvl_runtime import kube, metrics
from mnnvl_topology import census_writer, effects, passes, topologies, topology_writer

from ..mnnvl_runtime import fakes
from .fake_api import INSTALLATION, LEVELS, FakeApi, entry, passes_over, stored, topologies_seen

Object = dict[str, Any]
#: The v1alpha1 version of KAI v0.17's Topology CRD, as far as `topologies.schema_has_aliases` reads it.
ALIASED_VERSION = {
    "name": keys.KAI_TOPOLOGY_VERSION,
    "schema": {
        "openAPIV3Schema": {
            "properties": {
                "spec": {"properties": {"levels": {"items": {"properties": {"alias": {}, "nodeLabel": {}}}}}}
            }
        }
    },
}


def refused(kind: str) -> float:
    return metrics.REGISTRY.get_sample_value("mnnvl_topology_refused_writes_total", {"kind": kind}) or 0.0


def warnings(api: FakeApi, reason: str) -> list[Object]:
    return [event for event in api.events if event["type"] == "Warning" and event["reason"] == reason]


def test_a_refused_binding_is_reported_and_the_other_entries_are_still_written() -> None:
    api = FakeApi(refuse={"b-binding"})
    before = refused(keys.GROVE_BINDING_KIND)

    with pytest.raises(topology_writer.IncompletePassError, match="b"):
        asyncio.run(fakes.within(passes_over(api, "a", "b", "c").topologies.sync()))

    assert sorted(api.objects) == [
        (keys.GROVE_BINDING_PLURAL, "a-binding"),
        (keys.GROVE_BINDING_PLURAL, "c-binding"),
        (keys.KAI_TOPOLOGY_PLURAL, "a"),
        (keys.KAI_TOPOLOGY_PLURAL, "b"),
        (keys.KAI_TOPOLOGY_PLURAL, "c"),
    ]
    [warning] = [event for event in api.events if event["type"] == "Warning"]
    assert warning["reason"] == reasons.TOPOLOGY_WRITE_REFUSED_REASON
    # The binding does not exist: the Warning is on the census ConfigMap, with the webhook's own words.
    assert (warning["involvedObject"]["kind"], warning["involvedObject"]["name"]) == (
        "ConfigMap",
        effects.CENSUS_CONFIGMAP,
    )
    assert 'admission webhook "grove" denied the request: b-binding is invalid' in warning["message"]
    assert refused(keys.GROVE_BINDING_KIND) == before + 1


def test_a_refused_removal_is_reported_on_its_object_and_the_entries_are_still_written() -> None:
    api = FakeApi(refuse={"old"})
    old = stored(
        topologies.desired_topology(entry("old"), aliases=False, installation=INSTALLATION),
        manager=keys.TOPOLOGY_CONTROLLER,
    )
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "old")] = old
    running = passes_over(api, "a")
    running.stores.apply_topology(old["metadata"]["uid"], old)

    with pytest.raises(topology_writer.IncompletePassError, match="old"):
        asyncio.run(fakes.within(running.topologies.sync()))

    assert (keys.KAI_TOPOLOGY_PLURAL, "a") in api.objects
    [warning] = [event for event in api.events if event["type"] == "Warning"]
    assert (warning["involvedObject"]["name"], warning["involvedObject"]["uid"]) == ("old", old["metadata"]["uid"])
    assert '400: admission webhook "grove" denied the request: old is invalid' in warning["message"]


def test_the_census_is_applied_again_after_a_resync_or_on_gaining_the_lease_never_twice_in_between() -> None:
    api = FakeApi(refuse=set())
    running = passes_over(api, "a")
    running.stores.apply_node("n", {"metadata": {"name": "a1", "labels": {keys.GPU_CLIQUE_LABEL: "a"}}})

    async def publish() -> int:
        await running.census.publish()
        return len(api.applied)

    assert asyncio.run(fakes.within(publish())) == 1
    assert asyncio.run(fakes.within(publish())) == 1  # unchanged: not written again
    running.on_lease_change(False)
    assert asyncio.run(fakes.within(publish())) == 1
    running.on_lease_change(True)  # the previous holder may have left another census, or none
    assert asyncio.run(fakes.within(publish())) == 2
    running.on_resync()  # the periodic resync: a deleted ConfigMap comes back
    assert asyncio.run(fakes.within(publish())) == 3
    assert api.applied[-1]["data"][census_writer.CENSUS_KEY] == running.stores.current_census().to_json()


def test_a_vanished_clique_leaves_the_gauges_and_the_others_keep_their_values() -> None:
    running = passes_over(FakeApi(refuse=set()), "a")
    for uid, clique in (("n1", "x"), ("n2", "y")):
        running.stores.apply_node(uid, {"metadata": {"name": uid, "labels": {keys.GPU_CLIQUE_LABEL: clique}}})
    asyncio.run(fakes.within(running.census.publish()))
    running.stores.apply_node("n2", None)
    asyncio.run(fakes.within(running.census.publish()))

    def nodes(clique: str) -> float | None:
        return metrics.REGISTRY.get_sample_value("mnnvl_clique_nodes", {"clique": clique})

    assert (nodes("x"), nodes("y")) == (1.0, None)
    assert running.census.published_cliques == {"x"}


def grove_pod(name: str, node: str | None) -> Object:
    status = (
        {"phase": "Running"}
        if node
        else {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    )
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {keys.GROVE_PODGANG_LABEL: "pcs-0"}},
        "spec": {
            "schedulerName": keys.KAI_SCHEDULER_NAME,
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}],
        },
        "status": status,
    }


def owned_by(kind: str, name: str, uid: str, api_version: str = keys.GROVE_API_VERSION) -> Object:
    return {
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]
    }


def over_two_cliques_of_four(api: FakeApi) -> passes.Passes:
    """Queue passes whose nodes are cliques a (a1…a4) and b (b1…b4), four GPUs each."""
    running = passes_over(api, "a")
    for clique in "ab":
        for index in range(1, 5):
            node = {
                "metadata": {"name": f"{clique}{index}", "labels": {keys.GPU_CLIQUE_LABEL: clique}},
                "status": {"capacity": {keys.GPU_RESOURCE: "4"}},
            }
            running.stores.apply_node(f"{clique}{index}", node)
    return running


def stranded_gang(*, made_by_dynamo: bool) -> tuple[FakeApi, passes.Passes]:
    """Grove's gang of 5 workers for two cliques of 4 free nodes: w-0 runs in clique a, w-1…w-4 are pending."""
    api = FakeApi(refuse=set())
    api.objects[(keys.GROVE_PODGANG_PLURAL, "pcs-0")] = {
        "apiVersion": keys.GROVE_SCHEDULER_API_VERSION,
        "kind": "PodGang",
        "metadata": {
            "name": "pcs-0",
            "namespace": "ns",
            "uid": "gang-uid",
            **owned_by("PodCliqueSet", "pcs", "pcs-uid"),
        },
        "spec": {
            "podgroups": [
                {
                    "name": "worker",
                    "minReplicas": 5,
                    "podReferences": [{"namespace": "ns", "name": f"w-{i}"} for i in range(5)],
                }
            ],
            "topologyConstraint": {"packConstraint": {"required": keys.GPU_CLIQUE_LABEL}},
        },
    }
    dgd = owned_by(keys.DYNAMO_DEPLOYMENT_KIND, "my-llm", "dgd-uid", keys.DYNAMO_API_VERSION) if made_by_dynamo else {}
    api.objects[(keys.DYNAMO_DEPLOYMENT_PLURAL, "my-llm")] = {
        "apiVersion": keys.DYNAMO_API_VERSION,
        "kind": keys.DYNAMO_DEPLOYMENT_KIND,
        "metadata": {"name": "my-llm", "namespace": "ns", "uid": "dgd-uid"},
    }
    api.objects[(keys.GROVE_PODCLIQUESET_PLURAL, "pcs")] = {
        "apiVersion": keys.GROVE_API_VERSION,
        "kind": keys.GROVE_PODCLIQUESET_KIND,
        "metadata": {"name": "pcs", "namespace": "ns", "uid": "pcs-uid", **dgd},
    }
    running = over_two_cliques_of_four(api)
    running.stores.apply_pod("0", grove_pod("w-0", "a1"))
    for index in range(1, 5):
        running.stores.apply_pod(str(index), grove_pod(f"w-{index}", None))
    return api, running


@pytest.mark.parametrize("made_by_dynamo", [True, False], ids=["dgd", "pcs"])
def test_a_grove_gang_that_cannot_fit_is_warned_about_on_the_workload_that_made_it(made_by_dynamo: bool) -> None:
    api, running = stranded_gang(made_by_dynamo=made_by_dynamo)

    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    asyncio.run(fakes.within(running.fit.check("ns", "w-2")))  # same group, same message: no second Warning

    [warning] = api.events
    involved = warning["involvedObject"]
    expected = ("DynamoGraphDeployment", "my-llm", "dgd-uid") if made_by_dynamo else ("PodCliqueSet", "pcs", "pcs-uid")
    assert (involved["kind"], involved["name"], involved["uid"]) == expected
    assert (warning["type"], warning["reason"]) == ("Warning", reasons.CLIQUE_TOO_SMALL_REASON)
    assert warning["message"].startswith("needs 5 nodes in one clique; clique a, where its pods run, has room for 4")


def test_a_workload_stuck_again_after_its_pods_left_is_warned_about_again() -> None:
    api, running = stranded_gang(made_by_dynamo=False)
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    running.on_resync()  # its pods are still unschedulable: the Warning stands, nothing is posted again
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    assert len(api.events) == 1
    for index in range(1, 5):  # the pending pods go (scaled down, deleted)
        running.stores.apply_pod(str(index), None)
    running.on_resync()
    for index in range(1, 5):  # and come back, stuck the same way
        running.stores.apply_pod(str(index), grove_pod(f"w-{index}", None))
    asyncio.run(fakes.within(running.fit.check("ns", "w-3")))
    assert [event["message"] for event in api.events][1:] == [api.events[0]["message"].replace("w-1", "w-3")]


def test_a_grove_pod_without_its_gang_is_not_judged() -> None:
    api = FakeApi(refuse=set())
    running = passes_over(api, "a")
    running.stores.apply_pod("1", grove_pod("w-1", None))
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    assert api.events == []


def lws_pod(name: str, replica: int, node: str | None, **status: Any) -> Object:
    labels = {keys.LWS_NAME_LABEL: "w", keys.LWS_GROUP_INDEX_LABEL: str(replica), keys.SCOPE_LABEL: keys.SCOPE_REPLICA}
    body = grove_pod(name, node)
    body["metadata"]["labels"] = labels
    body["spec"]["schedulerName"] = "default-scheduler"
    body["status"] = {**body["status"], **status}
    return body


def lws_in_two_cliques() -> tuple[FakeApi, passes.Passes]:
    """An opted-in LWS of size 4: replica 0 runs two pods in clique a (two nodes free there, so it fits; its third pod
    waits for something else), replica 1 has nothing placed and clique b has only 3 free nodes."""
    api = FakeApi(refuse=set())
    api.objects[(keys.LWS_PLURAL, "w")] = {
        "apiVersion": keys.LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "w", "namespace": "ns", "uid": "lws-uid",
                     "annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED}},
        "spec": {"leaderWorkerTemplate": {"size": 4}},
    }  # fmt: skip
    running = over_two_cliques_of_four(api)
    running.stores.apply_pod("busy", grove_pod("other", "b1"))
    running.stores.apply_pod("r0-0", lws_pod("w-0", 0, "a1"))
    running.stores.apply_pod("r0-1", lws_pod("w-0-1", 0, "a2"))
    running.stores.apply_pod("r0-2", lws_pod("w-0-2", 0, None))
    running.stores.apply_pod("r1-0", lws_pod("w-1", 1, None))
    return api, running


def test_each_group_of_a_workload_is_judged_on_its_own_and_posted_once() -> None:
    api, running = lws_in_two_cliques()
    for _ in range(3):  # three resyncs, each checking both replicas
        asyncio.run(fakes.within(running.fit.check("ns", "w-0-2")))
        asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
        running.on_resync()
    [warning] = api.events
    assert warning["message"].startswith("needs 4 nodes in one clique; largest free clique has 3: clique b; pod w-1 ")


def test_a_pod_kai_holds_back_for_a_missing_topology_is_no_question_of_room() -> None:
    api, running = lws_in_two_cliques()
    missing = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "Requested topology nvcf-mnnvl-topology-binding does not exist"}  # fmt: skip
    running.stores.apply_pod("r1-0", lws_pod("w-1", 1, None, conditions=[missing]))
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    assert api.events == []


def test_on_gaining_the_lease_a_standing_verdict_is_posted_again() -> None:
    """Another replica may have posted newer news while it held the Lease: what this one posted before is no
    reason to stay silent."""
    api, running = lws_in_two_cliques()
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    running.on_lease_change(True)
    asyncio.run(fakes.within(running.fit.check("ns", "w-1")))
    assert len(api.events) == 2


def test_aliases_the_served_schema_cannot_hold_are_reported_once_per_topology_until_it_can() -> None:
    api = FakeApi(refuse=set())
    aliased = [
        {"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "clique"},
        {"nodeLabel": keys.HOSTNAME_LABEL, "alias": "host"},
    ]
    running = passes_over(api, "a", "b", levels=aliased)

    def sync() -> None:
        asyncio.run(fakes.within(running.topologies.sync()))

    sync()
    sync()  # said once per topology, however many passes
    ignored = warnings(api, reasons.TOPOLOGY_ALIASES_IGNORED_REASON)
    assert [(event["involvedObject"]["kind"], event["involvedObject"]["name"]) for event in ignored] == [
        (keys.KAI_TOPOLOGY_KIND, "a"),
        (keys.KAI_TOPOLOGY_KIND, "b"),
    ]
    assert ignored[0]["message"].startswith("Topology a is written without its aliases clique, host: ")
    assert api.objects[(keys.KAI_TOPOLOGY_PLURAL, "a")]["spec"]["levels"] == LEVELS
    # KAI upgraded to v0.17 (the schema gains aliases), then downgraded: said again.
    api.objects[("customresourcedefinitions", keys.KAI_TOPOLOGY_CRD)] = {"spec": {"versions": [ALIASED_VERSION]}}
    sync()
    assert len(warnings(api, reasons.TOPOLOGY_ALIASES_IGNORED_REASON)) == 2
    del api.objects[("customresourcedefinitions", keys.KAI_TOPOLOGY_CRD)]
    sync()
    assert len(warnings(api, reasons.TOPOLOGY_ALIASES_IGNORED_REASON)) == 4


def test_an_api_served_since_start_up_is_reported_once_on_the_census_configmap() -> None:
    api = FakeApi(refuse=set(), served=())
    running = passes_over(api, "a", unwatched=frozenset(topologies.OPTIONAL_APIS))

    def restarts() -> list[str]:
        asyncio.run(fakes.within(running.topologies.sync()))
        found = warnings(api, reasons.WATCH_NEEDS_RESTART_REASON)
        assert {(event["involvedObject"]["kind"], event["involvedObject"]["name"]) for event in found} <= {
            ("ConfigMap", effects.CENSUS_CONFIGMAP)
        }
        return [event["message"].split(" ", 1)[0] for event in found]

    assert restarts() == []
    api.served.add(topologies.GROVE_BINDINGS)
    assert restarts() == ["clustertopologybindings.grove.io"]
    assert (keys.GROVE_BINDING_PLURAL, "a-binding") in api.objects  # the periodic pass uses it at once
    assert restarts() == ["clustertopologybindings.grove.io"]
    api.served.add(topologies.COMPUTE_DOMAINS)
    assert restarts() == ["clustertopologybindings.grove.io", "computedomains.resource.nvidia.com"]
    assert restarts() == ["clustertopologybindings.grove.io", "computedomains.resource.nvidia.com"]


def test_an_api_served_at_start_up_is_watched_and_never_reported() -> None:
    api = FakeApi(refuse=set(), served=topologies.OPTIONAL_APIS)
    asyncio.run(fakes.within(passes_over(api, "a").topologies.sync()))
    assert warnings(api, reasons.WATCH_NEEDS_RESTART_REASON) == []


def foreign_objects(kind: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("mnnvl_topology_foreign_objects", {"kind": kind})


def copied(name: str, *, installation: str = INSTALLATION, manager: str = "kubectl") -> Object:
    """Our Topology `name`'s manifest, as written by `manager` (a copied manifest, a restore)."""
    return stored(topologies.desired_topology(entry(name), aliases=False, installation=installation), manager=manager)


def run_passes(running: passes.Passes, api: FakeApi, count: int = 2) -> None:
    for _ in range(count):
        running.topologies.stores = topologies_seen(api)
        asyncio.run(fakes.within(running.topologies.sync()))


@pytest.mark.parametrize(
    ("body", "owner"),
    [
        pytest.param(copied("a"), "but written by kubectl, not by mnnvl-topology alone", id="copied-manifest"),
        pytest.param(
            copied("a", installation="team-b/mnnvl", manager=keys.TOPOLOGY_CONTROLLER),
            "made by the installation team-b/mnnvl of mnnvl-topology",
            id="other-installation",
        ),
    ],
)
def test_an_object_labelled_ours_that_this_installation_did_not_make_is_never_written(body: Object, owner: str) -> None:
    """Configured with other levels (a recreate if it were ours), and a second one under a name no longer configured
    (a deletion if it were ours): neither is written; the configured one is reported once, with the gauge."""
    api = FakeApi(refuse=set())
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "a")] = body
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "gone")] = {**copy.deepcopy(body), "metadata": {
        **copy.deepcopy(body["metadata"]), "name": "gone", "uid": "uid-gone"}}  # fmt: skip
    running = passes_over(api, "a", levels=[{"nodeLabel": "example.com/rack"}, *LEVELS])

    run_passes(running, api)

    assert api.writes == []
    [warning] = warnings(api, reasons.UNEXPECTED_TOPOLOGY_OWNER_REASON)
    assert (warning["involvedObject"]["name"], warning["involvedObject"]["uid"]) == ("a", body["metadata"]["uid"])
    assert owner in warning["message"]
    assert foreign_objects(keys.KAI_TOPOLOGY_KIND) == 1.0


def test_an_object_changing_hands_is_news_and_reported_again() -> None:
    api = FakeApi(refuse=set())
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "a")] = copied("a")
    running = passes_over(api, "a")
    run_passes(running, api)
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "a")]["metadata"]["ownerReferences"] = [
        {"kind": keys.GROVE_BINDING_KIND, "name": "a", "controller": True}
    ]
    run_passes(running, api)
    messages = [event["message"] for event in warnings(api, reasons.UNEXPECTED_TOPOLOGY_OWNER_REASON)]
    assert len(messages) == 2
    assert "owned by ClusterTopologyBinding a" in messages[1]


def test_an_earlier_versions_objects_are_adopted_where_configured_and_never_deleted() -> None:
    """Written by our field manager before installations were recorded: the configured Topology and binding now
    record this installation (same uid, an event each); the unconfigured one is left, as another installation may
    use it."""
    api = FakeApi(refuse=set())
    bare = {"labels": dict(topologies.OURS)}
    topology = topologies.desired_topology(entry("a"), aliases=False, installation=INSTALLATION)
    binding = topologies.desired_binding(entry("a"), installation=INSTALLATION)
    assert binding is not None
    for plural, manifest, name in (
        (keys.KAI_TOPOLOGY_PLURAL, topology, "a"),
        (keys.GROVE_BINDING_PLURAL, binding, "a-binding"),
        (keys.KAI_TOPOLOGY_PLURAL, topology, "old"),
    ):
        earlier = {**manifest, "metadata": {"name": name, **bare}}
        api.objects[(plural, name)] = stored(earlier, manager=keys.TOPOLOGY_CONTROLLER)
    uids = {key: body["metadata"]["uid"] for key, body in api.objects.items()}
    running = passes_over(api, "a")

    run_passes(running, api)

    assert [(verb, plural, before and before["metadata"]["name"]) for verb, plural, before, _ in api.writes] == [
        ("apply", keys.KAI_TOPOLOGY_PLURAL, "a"),
        ("apply", keys.GROVE_BINDING_PLURAL, "a-binding"),
    ]
    assert {key: body["metadata"]["uid"] for key, body in api.objects.items()} == uids
    for plural, name in ((keys.KAI_TOPOLOGY_PLURAL, "a"), (keys.GROVE_BINDING_PLURAL, "a-binding")):
        adopted = api.objects[(plural, name)]
        assert topologies.provenance(adopted, installation=INSTALLATION) is topologies.Provenance.OURS
    old = api.objects[(keys.KAI_TOPOLOGY_PLURAL, "old")]
    assert topologies.provenance(old, installation=INSTALLATION) is topologies.Provenance.LEGACY
    assert [event["reason"] for event in api.events if event["reason"].endswith("Adopted")] == [
        reasons.TOPOLOGY_ADOPTED_REASON,
        reasons.BINDING_ADOPTED_REASON,
    ]


class ReplacedBeforeTheWrite(FakeApi):
    """An API server where a same-named object appears between the read and the create (another installation's)."""

    async def acreate(self, manifest: Object, plural: str) -> Object:
        raise kube.ApiError(status=409, reason="AlreadyExists")


def test_an_object_that_appeared_since_it_was_read_is_no_refusal_and_the_pass_is_retried() -> None:
    api = ReplacedBeforeTheWrite(refuse=set())
    with pytest.raises(topology_writer.IncompletePassError):
        asyncio.run(fakes.within(passes_over(api, "a").topologies.sync()))
    assert warnings(api, reasons.TOPOLOGY_WRITE_REFUSED_REASON) == []


class HandedOverAfterTheRead(FakeApi):
    """An API server where each object read is then taken over by another installation (re-annotated, a new
    resourceVersion) before the caller's next call."""

    async def aget(self, api_version: str, plural: str, name: str, *, namespace: str | None = None) -> Object | None:
        read = await super().aget(api_version, plural, name, namespace=namespace)
        if read is not None and plural in (keys.KAI_TOPOLOGY_PLURAL, keys.GROVE_BINDING_PLURAL):
            taken = copied(name, installation="team-b/mnnvl", manager=keys.TOPOLOGY_CONTROLLER)
            taken["metadata"]["uid"] = read["metadata"]["uid"]
            self.objects[(plural, name)] = taken
        return read


def test_an_object_taken_over_between_the_read_and_the_delete_is_left() -> None:
    api = HandedOverAfterTheRead(refuse=set())
    old = copied("old", manager=keys.TOPOLOGY_CONTROLLER)
    api.objects[(keys.KAI_TOPOLOGY_PLURAL, "old")] = old
    running = passes_over(api, "a")
    running.topologies.stores = topologies_seen(api)
    with pytest.raises(topology_writer.IncompletePassError, match="old"):
        asyncio.run(fakes.within(running.topologies.sync()))
    assert (keys.KAI_TOPOLOGY_PLURAL, "old") in api.objects
    assert warnings(api, reasons.TOPOLOGY_WRITE_REFUSED_REASON) == []
