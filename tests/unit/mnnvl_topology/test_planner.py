"""mnnvl-topology's pure decisions: desired objects from configuration, drift per KAI release, census, fit."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from mnnvl_api import keys, models
from mnnvl_api.models import configuration
from mnnvl_topology import census, fit, topologies

from ..mnnvl_api.gpu_rule import GPU_RULE
from . import fake_api

CLIQUE = keys.GPU_CLIQUE_LABEL
HOST = keys.HOSTNAME_LABEL


def entry(**fields: Any) -> configuration.TopologySettings:
    return configuration.TopologySettings.model_validate(
        {"name": "nvl72", "levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOST}], **fields}
    )


INSTALLATION = "mnnvl-system/mnnvl"
OTHER = "team-b/mnnvl"


def found(
    levels: list[dict[str, str]],
    *,
    ours: bool = True,
    owner: str | None = None,
    installation: str | None = INSTALLATION,
    manager: str = keys.TOPOLOGY_CONTROLLER,
) -> dict[str, Any]:
    """A Topology as read: labelled ours (or not), recording `installation` (None: none), every label and annotation
    written by `manager`."""
    meta: dict[str, Any] = {"name": "nvl72", "uid": "u1", "labels": dict(topologies.OURS) if ours else {}}
    if installation is not None:
        meta["annotations"] = {keys.INSTALLATION_ANNOTATION: installation}
    if owner:
        meta["ownerReferences"] = [{"kind": "ClusterTopologyBinding", "name": owner, "controller": True}]
    meta["managedFields"] = [fake_api.ownership(manager, meta)]
    return {"kind": "Topology", "metadata": meta, "spec": {"levels": levels}}


def test_the_default_configuration_is_nvcfs_topology_and_binding() -> None:
    [default] = models.Configuration().topologies
    assert topologies.desired_topology(default, aliases=False, installation=INSTALLATION) == {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {
            "name": "nvcf-mnnvl-topology",
            "labels": {"app.kubernetes.io/managed-by": "mnnvl-topology"},
            "annotations": {"mnnvl.dev/installation": "mnnvl-system/mnnvl"},
        },
        "spec": {"levels": [{"nodeLabel": "nvidia.com/gpu.clique"}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }
    assert topologies.desired_binding(default, installation=INSTALLATION) == {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "ClusterTopologyBinding",
        "metadata": {
            "name": "nvcf-mnnvl-topology-binding",
            "labels": {"app.kubernetes.io/managed-by": "mnnvl-topology"},
            "annotations": {"mnnvl.dev/installation": "mnnvl-system/mnnvl"},
        },
        "spec": {
            "levels": [
                {"domain": "gpuclique", "key": "nvidia.com/gpu.clique"},
                {"domain": "hostname", "key": "kubernetes.io/hostname"},
            ],
            "schedulerTopologyBindings": [
                {"schedulerName": "kai-scheduler", "topologyReference": "nvcf-mnnvl-topology"}
            ],
        },
    }


def test_aliases_are_written_only_where_the_served_schema_has_them() -> None:
    aliased = entry(levels=[{"nodeLabel": CLIQUE, "alias": "clique"}, {"nodeLabel": HOST}])
    assert topologies.desired_topology(aliased, aliases=True, installation=INSTALLATION)["spec"]["levels"][0] == {
        "nodeLabel": CLIQUE,
        "alias": "clique",
    }
    without = topologies.desired_topology(aliased, aliases=False, installation=INSTALLATION)
    assert without["spec"]["levels"][0] == {"nodeLabel": CLIQUE}


def test_a_disabled_binding_is_not_desired_and_a_named_one_keeps_its_name() -> None:
    assert topologies.desired_binding(entry(groveBinding={"enabled": False}), installation=INSTALLATION) is None
    named = topologies.desired_binding(entry(groveBinding={"name": "nvl72"}), installation=INSTALLATION)
    assert named is not None
    assert named["metadata"]["name"] == "nvl72"


@pytest.mark.parametrize(
    ("wanted", "present", "aliases", "action"),
    [
        pytest.param([{"nodeLabel": CLIQUE}], None, False, topologies.Action.CREATE, id="missing"),
        pytest.param([{"nodeLabel": CLIQUE}], [{"nodeLabel": CLIQUE}], False, topologies.Action.KEEP, id="same-v0.16"),
        pytest.param(
            [{"nodeLabel": "example.com/rack"}, {"nodeLabel": CLIQUE}],
            [{"nodeLabel": CLIQUE}],
            False,
            topologies.Action.RECREATE,
            id="new-levels-v0.16",
        ),
        pytest.param(
            [{"nodeLabel": "example.com/rack"}, {"nodeLabel": CLIQUE}],
            [{"nodeLabel": CLIQUE}],
            True,
            topologies.Action.RECREATE,
            id="new-node-labels-v0.17",
        ),
        pytest.param(
            [{"nodeLabel": CLIQUE, "alias": "nvlink"}],
            [{"nodeLabel": CLIQUE, "alias": "clique"}],
            True,
            topologies.Action.PATCH,
            id="new-alias-v0.17",
        ),
        pytest.param(
            [{"nodeLabel": CLIQUE, "alias": "clique"}],
            [{"nodeLabel": CLIQUE}],
            True,
            topologies.Action.PATCH,
            id="added-alias-v0.17",
        ),
    ],
)
def test_drift_is_repaired_as_the_served_kai_release_allows(
    wanted: list[dict[str, str]], present: list[dict[str, str]] | None, aliases: bool, action: topologies.Action
) -> None:
    desired = {"metadata": {"name": "nvl72"}, "spec": {"levels": wanted}}
    existing = None if present is None else found(present)
    assert topologies.decide_topology(desired, existing, aliases=aliases, installation=INSTALLATION) is action


@pytest.mark.parametrize(
    ("topology", "owner"),
    [
        pytest.param(
            found([{"nodeLabel": CLIQUE}], ours=False),
            "not labelled app.kubernetes.io/managed-by=mnnvl-topology",
            id="user",
        ),
        pytest.param(
            found([{"nodeLabel": CLIQUE}], ours=False, owner="nvl72"),
            "owned by ClusterTopologyBinding nvl72",
            id="grove",
        ),
    ],
)
def test_a_same_named_topology_we_did_not_create_is_foreign(topology: dict[str, Any], owner: str) -> None:
    desired = {"metadata": {"name": "nvl72"}, "spec": {"levels": [{"nodeLabel": CLIQUE}]}}
    assert (
        topologies.decide_topology(desired, topology, aliases=True, installation=INSTALLATION)
        is topologies.Action.FOREIGN
    )
    assert topologies.foreign_owner(topology, installation=INSTALLATION) == owner


def test_a_binding_is_patched_back_when_its_spec_differs() -> None:
    desired = topologies.desired_binding(entry(), installation=INSTALLATION)
    assert desired is not None
    present = fake_api.stored(desired, manager=keys.TOPOLOGY_CONTROLLER)

    def decided(binding: dict[str, Any] | None) -> topologies.Action:
        return topologies.decide_binding(desired, binding, installation=INSTALLATION)

    assert decided(present) is topologies.Action.KEEP
    present["spec"] = {**desired["spec"], "schedulerTopologyBindings": []}
    assert decided(present) is topologies.Action.PATCH
    assert decided({"metadata": {}, "spec": desired["spec"]}) is topologies.Action.FOREIGN
    assert decided(fake_api.stored(desired)) is topologies.Action.FOREIGN  # the same manifest, written by kubectl
    assert decided(None) is topologies.Action.CREATE


def test_aliases_are_reported_as_dropped_only_where_the_served_schema_has_none() -> None:
    aliased = entry(levels=[{"nodeLabel": CLIQUE, "alias": "clique"}, {"nodeLabel": HOST, "alias": "host"}])
    assert topologies.dropped_aliases(aliased, aliases=False) == ["clique", "host"]
    assert topologies.dropped_aliases(aliased, aliases=True) == []
    assert topologies.dropped_aliases(entry(), aliases=False) == []
    assert topologies.aliases_ignored_message("nvl72", ["clique", "host"]) == (
        "Topology nvl72 is written without its aliases clique, host: the served topologies.kai.scheduler schema has "
        "no levels[].alias; KAI Scheduler v0.17+ is needed for them, until then name the levels by their nodeLabel"
    )


@pytest.mark.parametrize(
    ("unwatched", "served", "reported", "due"),
    [
        pytest.param(set(), set(topologies.OPTIONAL_APIS), set(), [], id="all-watched-since-start-up"),
        pytest.param(set(topologies.OPTIONAL_APIS), set(), set(), [], id="still-not-served"),
        pytest.param(
            set(topologies.OPTIONAL_APIS),
            set(topologies.OPTIONAL_APIS),
            set(),
            [topologies.GROVE_BINDINGS, topologies.COMPUTE_DOMAINS],
            id="both-served-since",
        ),
        pytest.param(
            set(topologies.OPTIONAL_APIS),
            set(topologies.OPTIONAL_APIS),
            {topologies.GROVE_BINDINGS},
            [topologies.COMPUTE_DOMAINS],
            id="one-reported-already",
        ),
        pytest.param(
            {topologies.GROVE_BINDINGS},
            set(topologies.OPTIONAL_APIS),
            set(),
            [topologies.GROVE_BINDINGS],
            id="the-other-watched",
        ),
    ],
)
def test_an_api_served_since_start_up_is_reported_once(
    unwatched: set[topologies.OptionalApi],
    served: set[topologies.OptionalApi],
    reported: set[topologies.OptionalApi],
    due: list[topologies.OptionalApi],
) -> None:
    assert topologies.served_since_start_up(unwatched, served, reported) == due


def test_the_restart_message_names_the_api_what_is_missed_and_the_restart() -> None:
    assert topologies.restart_message(topologies.GROVE_BINDINGS, namespace="mnnvl-system") == (
        "clustertopologybindings.grove.io is served now but was not when mnnvl-topology started, so it is not "
        "watched: an edited binding is restored by the periodic pass only, not at once; restart mnnvl-topology to "
        "watch it, e.g. kubectl -n mnnvl-system rollout restart deployment/mnnvl-topology"
    )
    assert topologies.COMPUTE_DOMAINS.name == "computedomains.resource.nvidia.com"


def test_only_our_topologies_that_left_the_configuration_are_obsolete() -> None:
    assert topologies.obsolete(["a", "b"], ["b", "c"]) == ["a"]


@pytest.mark.parametrize(
    ("version", "aliases"),
    [
        pytest.param({"name": "v1alpha1", "schema": {"openAPIV3Schema": {}}}, False, id="v0.16"),
        pytest.param(
            {
                "name": "v1alpha1",
                "schema": {
                    "openAPIV3Schema": {
                        "properties": {
                            "spec": {
                                "properties": {"levels": {"items": {"properties": {"alias": {}, "nodeLabel": {}}}}}
                            }
                        }
                    }
                },
            },
            True,
            id="v0.17",
        ),
    ],
)
def test_alias_support_is_read_from_the_served_schema(version: dict[str, Any], aliases: bool) -> None:
    assert topologies.schema_has_aliases({"spec": {"versions": [version]}}) is aliases
    assert topologies.schema_has_aliases(None) is False


def node(name: str, clique: str | None, gpus: int = 4, *, schedulable: bool = True) -> census.NodeFacts:
    return census.NodeFacts(name=name, clique=clique, gpus=gpus, schedulable=schedulable)


def pod(
    name: str,
    node_name: str | None,
    *,
    templates: frozenset[str] = frozenset(),
    channel: bool = False,
    gpu: bool = False,
) -> census.PodUsage:
    return census.PodUsage(
        namespace="ns", name=name, node=node_name, live=True, templates=templates, channel_claim=channel, gpu=gpu,
        unschedulable=False, topology_missing=False, scope=None, kai=False, slice=None, lws=None, group_index=None,
        gang=None, owner=None,
    )  # fmt: skip


def test_the_census_counts_nodes_gpus_channels_and_free_nodes_per_clique() -> None:
    nodes = [
        node("a1", "a"),
        node("a2", "a"),
        node("a3", "a", schedulable=False),
        node("b1", "b"),
        node("cpu", None, 0),
    ]
    nodes.append(node("lost", None))
    pods = [
        pod("p1", "a1", channel=True),
        pod("p2", "b1", templates=frozenset({"hand-made"})),
        pod("p3", None, channel=True),
    ]
    busy = census.channel_nodes(pods, frozenset({("ns", "hand-made")}))
    assert busy == {"a1", "b1"}
    assert census.census(nodes, busy, gpu_nodes=()) == census.Census(
        cliques=(
            census.CliqueCount(clique="a", nodes=3, gpus=12, channel_nodes=1, free_nodes=1),
            census.CliqueCount(clique="b", nodes=1, gpus=4, channel_nodes=1, free_nodes=0),
        ),
        unlabelled_gpu_nodes=("lost",),
    )


def test_a_gpu_pod_without_a_channel_makes_its_node_busy_but_holds_no_channel() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("a3", "a")]
    pods = [pod("p1", "a1", channel=True), pod("kai-0", "a2", gpu=True), pod("waiting", None, gpu=True)]
    assert census.gpu_nodes(pods) == {"a2"}
    found = census.census(nodes, census.channel_nodes(pods, frozenset()), gpu_nodes=census.gpu_nodes(pods))
    assert found.cliques == (census.CliqueCount(clique="a", nodes=3, gpus=12, channel_nodes=1, free_nodes=1),)


@pytest.mark.parametrize(("spec", "expected"), [pytest.param(s, e, id=i) for i, s, e in GPU_RULE])
def test_the_census_follows_the_one_gpu_rule(spec: dict[str, Any], expected: bool) -> None:
    """A node whose only GPU user is a GPU sidecar is busy to the census, as it is to the scheduler."""
    body = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {**spec, "nodeName": "a1"}, "status": {}}
    assert census.pod_facts(body).gpu is expected


def test_a_claim_from_another_template_is_no_channel() -> None:
    assert census.channel_nodes([pod("p", "a1", templates=frozenset({"gpu"}))], frozenset({("ns", "cd")})) == set()


def test_pod_facts_read_channels_scheduling_and_group() -> None:
    facts = census.pod_facts(
        {
            "metadata": {
                "name": "w-0-1",
                "namespace": "ns",
                "labels": {keys.LWS_NAME_LABEL: "w", keys.SCOPE_LABEL: keys.SCOPE_REPLICA},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "w-0", "controller": True}
                ],
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}],
                "resourceClaims": [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "cd-1"}],
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
    )
    assert (facts.unschedulable, facts.channel_claim, facts.templates, facts.lws, facts.owner) == (
        True, True, frozenset({"cd-1"}), "w", ("apps/v1", "StatefulSet", "w-0"),
    )  # fmt: skip
    assert (facts.gpu, facts.scope, facts.kai) == (True, keys.SCOPE_REPLICA, True)


def test_a_finished_pod_holds_no_channel() -> None:
    facts = census.pod_facts(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "nodeName": "a1",
                "containers": [{"name": "c", "resources": {"requests": {keys.GPU_RESOURCE: "1"}}}],
                "resourceClaims": [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": "t"}],
            },
            "status": {"phase": "Succeeded"},
        }
    )
    assert (facts.channel_claim, facts.templates, facts.gpu, facts.unschedulable) == (
        False, frozenset(), False, False,
    )  # fmt: skip


def census_of(*free: int) -> census.Census:
    return census.Census(
        cliques=tuple(
            census.CliqueCount(clique=f"c{index}", nodes=4, gpus=16, channel_nodes=4 - count, free_nodes=count)
            for index, count in enumerate(free)
        ),
        unlabelled_gpu_nodes=(),
    )


@pytest.mark.parametrize(
    ("needed", "census", "message"),
    [
        pytest.param(3, census_of(1, 3), None, id="fits"),
        pytest.param(
            4, census_of(1, 3, 2), "needs 4 nodes in one clique; largest free clique has 3: clique c1", id="too-big"
        ),
        pytest.param(
            2,
            census_of(),
            "needs 2 nodes in one clique; largest free clique has 0: no node is labelled nvidia.com/gpu.clique",
            id="no-cliques",
        ),
    ],
)
def test_a_group_that_no_clique_can_hold_gets_the_largest_free_clique_named(
    needed: int, census: census.Census, message: str | None
) -> None:
    assert message_of(fit.cannot_fit(needed, census)) == message


def message_of(verdict: fit.Verdict | None) -> str | None:
    return None if verdict is None else verdict.message


@pytest.mark.parametrize(
    ("needed", "placed", "census", "message"),
    [
        pytest.param(4, {"c0": 2}, census_of(2, 0), None, id="its-own-nodes-and-the-free-ones-suffice"),
        pytest.param(4, {"c0": 4}, census_of(0, 0), None, id="all-placed"),
        pytest.param(
            4, {"c0": 1}, census_of(2, 3),
            "needs 4 nodes in one clique; clique c0, where its pods run, has room for 3", id="stranded",
        ),
        pytest.param(
            4, {"c0": 1}, census_of(2, 4),
            "needs 4 nodes in one clique; clique c0, where its pods run, has room for 3; "
            "clique c1 has 4 free nodes for the whole group",
            id="stranded-while-another-clique-could-hold-it",
        ),
        pytest.param(
            5, {"c1": 1, "c0": 3}, census_of(1, 4),
            "needs 5 nodes in one clique; clique c0, where its pods run, has room for 4", id="split-most-wins",
        ),
    ],
)  # fmt: skip
def test_a_partly_placed_group_must_fit_where_its_pods_run(
    needed: int, placed: dict[str, int], census: census.Census, message: str | None
) -> None:
    """KAI keeps a required placement's later pods in the domain of its running ones: the free nodes of other
    cliques do not help the pods still pending."""
    assert message_of(fit.cannot_fit(needed, census, placed)) == message


def test_the_message_does_not_change_while_the_groups_pods_are_placed_one_by_one() -> None:
    """Once per change of the message: each placed pod takes one free node of its clique, which is no news."""
    messages = {message_of(fit.cannot_fit(5, census_of(4 - running, 4), {"c0": running})) for running in range(1, 5)}
    assert messages == {"needs 5 nodes in one clique; clique c0, where its pods run, has room for 4"}


@pytest.mark.parametrize(
    ("placed", "frees"),
    [pytest.param({"c0": 1}, (3, 5, 6, 7), id="placed"), pytest.param({}, (3, 4, 5), id="nothing-placed")],
)
def test_other_cliques_coming_and_going_is_no_news(placed: dict[str, int], frees: tuple[int, ...]) -> None:
    """Other workloads change the free nodes of cliques the group does not use: the message may say so, but it
    is the same verdict, so no second Warning is posted."""
    verdicts = [fit.cannot_fit(6, census_of(2, free), placed) for free in frees]
    news = {verdict.news for verdict in verdicts if verdict is not None}
    messages = {verdict.message for verdict in verdicts if verdict is not None}
    assert (len(news), len(messages) > 1, None in verdicts) == (1, True, False)


def gang(*groups: dict[str, Any], constraint: str | None = None, configs: Any = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"podgroups": list(groups), "topologyConstraintGroupConfigs": list(configs)}
    if constraint is not None:
        spec["topologyConstraint"] = {"packConstraint": {"required": constraint}}
    return {"kind": "PodGang", "metadata": {"name": "g", "uid": "g-uid"}, "spec": spec}


def podgroup(name: str, pods: list[str], min_replicas: int, constraint: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": name,
        "podReferences": [{"namespace": "ns", "name": pod} for pod in pods],
        "minReplicas": min_replicas,
    }
    if constraint is not None:
        found["topologyConstraint"] = {"packConstraint": {"required": constraint}}
    return found


PREFILL = podgroup("prefill", ["p-0", "p-1", "p-2"], 2)
DECODE = podgroup("decode", ["d-0", "d-1"], 2)


def test_without_a_constraint_of_its_own_a_gang_follows_its_top_owners_placement() -> None:
    """KAI's Grove grouper reads `kai.scheduler/topology-required-placement` from the gang's top owner (the
    PodCliqueSet, or Dynamo's deployment) when the PodGang has no required level; the gang's own level wins."""
    levels = fit.clique_levels([])
    group = fit.gang_group(gang(PREFILL, DECODE), "p-1", clique_levels=levels, owner_placement=CLIQUE)
    assert group is not None
    assert group.needed == 4
    own_level = gang(PREFILL, DECODE, constraint=HOST)
    assert fit.gang_group(own_level, "p-1", clique_levels=levels, owner_placement=CLIQUE) is None


@pytest.mark.parametrize(
    ("found", "needed", "members"),
    [
        pytest.param(gang(PREFILL, DECODE, constraint=CLIQUE), 4, {"p-0", "p-1", "p-2", "d-0", "d-1"}, id="gang"),
        pytest.param(gang(PREFILL, DECODE, constraint="nvlink"), 4, {"p-0", "p-1", "p-2", "d-0", "d-1"}, id="alias"),
        pytest.param(gang(PREFILL, DECODE, constraint=HOST), None, None, id="host-level"),
        pytest.param(gang(PREFILL, DECODE), None, None, id="unconstrained"),
        pytest.param(
            gang(podgroup("prefill", ["p-0", "p-1", "p-2"], 3, constraint=CLIQUE), DECODE), 3,
            {"p-0", "p-1", "p-2"}, id="its-podclique",
        ),
        pytest.param(
            gang(PREFILL, DECODE, configs=[{"name": "sg", "podGroupNames": ["prefill", "decode"],
                                            "topologyConstraint": {"packConstraint": {"required": CLIQUE}}}]),
            4, {"p-0", "p-1", "p-2", "d-0", "d-1"}, id="its-scaling-group",
        ),
        pytest.param(
            gang(PREFILL, podgroup("decode", ["d-0", "d-1"], 2, constraint=CLIQUE)), None, None,
            id="another-podclique",
        ),
        pytest.param(
            gang(podgroup("prefill", ["p-0", "p-1", "p-2"], 3, constraint=CLIQUE), DECODE, constraint=CLIQUE), 5,
            {"p-0", "p-1", "p-2", "d-0", "d-1"}, id="the-widest-constraint",
        ),
    ],
)  # fmt: skip
def test_a_grove_pods_group_is_the_widest_part_of_its_gang_asked_into_one_clique(
    found: dict[str, Any], needed: int | None, members: set[str] | None
) -> None:
    levels = fit.clique_levels([entry(levels=[{"nodeLabel": CLIQUE, "alias": "nvlink"}, {"nodeLabel": HOST}])])
    group = fit.gang_group(found, "p-1", clique_levels=levels)
    assert (None if group is None else (group.needed, set(group.members or ()), group.workload["kind"])) == (
        None if needed is None else (needed, members, "PodGang")
    )


def facts_of(labels: dict[str, str], owner: str | None = None) -> census.PodUsage:
    refs = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "controller": True}] if owner else []
    return census.pod_facts(
        {"metadata": {"name": "p", "namespace": "ns", "labels": labels, "ownerReferences": refs}, "spec": {}}
    )


@pytest.mark.parametrize(
    ("facts", "key"),
    [
        pytest.param(
            facts_of({keys.SCOPE_LABEL: keys.SCOPE_SLICE, keys.DS_NAME_LABEL: "ds", keys.DS_SLICE_LABEL: "1",
                      keys.DS_REVISION_LABEL: "r", keys.LWS_NAME_LABEL: "ds-prefill"}),
            ("slice", "ds", "1", "r"), id="slice",
        ),
        pytest.param(
            facts_of({keys.LWS_NAME_LABEL: "w", keys.LWS_GROUP_INDEX_LABEL: "2"}, owner="w-2"), ("lws", "w", "2"),
            id="lws-replica",
        ),
        pytest.param(facts_of({keys.GROVE_PODGANG_LABEL: "pcs-0"}), ("podgang", "pcs-0"), id="grove-gang"),
        pytest.param(facts_of({}, owner="db"), ("owner", "apps/v1", "StatefulSet", "db"), id="owner"),
        pytest.param(facts_of({}), ("owner", "", "", "p"), id="alone"),
    ],
)  # fmt: skip
def test_a_pods_group_is_its_slice_replica_gang_or_owner(facts: census.PodUsage, key: tuple[str, ...]) -> None:
    assert census.group_key(facts) == key


@pytest.mark.parametrize(
    ("workload", "size"),
    [
        pytest.param(
            {"kind": "LeaderWorkerSet", "metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}},
             "spec": {"leaderWorkerTemplate": {"size": 4}}}, 4, id="opted-in-lws",
        ),
        pytest.param(
            {"kind": "LeaderWorkerSet", "metadata": {"annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "disabled"}},
             "spec": {"leaderWorkerTemplate": {"size": 4}}}, None, id="opted-out-lws",
        ),
        pytest.param(
            {"kind": "StatefulSet", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: CLIQUE}},
             "spec": {"replicas": 2}}, 2, id="kai-required-clique",
        ),
        pytest.param(
            {"kind": "StatefulSet", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: "nvlink"}},
             "spec": {"replicas": 2}}, 2, id="kai-required-alias",
        ),
        pytest.param(
            {"kind": "StatefulSet", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: HOST}},
             "spec": {"replicas": 2}}, None, id="kai-required-host",
        ),
        pytest.param({"kind": "Job", "metadata": {}, "spec": {"parallelism": 8}}, None, id="not-asked"),
        pytest.param(
            {"kind": "Job", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: CLIQUE}},
             "spec": {"parallelism": 8, "completions": 3}}, 3, id="job-running-its-completions-at-once",
        ),
        pytest.param(
            {"kind": "Job", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: CLIQUE}},
             "spec": {"parallelism": 4}}, 4, id="job-without-completions",
        ),
        pytest.param(
            {"kind": "Deployment", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: CLIQUE}},
             "spec": {"replicas": 4}}, None, id="deployment-a-podgroup-per-pod",
        ),
        pytest.param(
            {"kind": "StatefulSet", "metadata": {"annotations": {keys.KAI_REQUIRED_PLACEMENT_ANNOTATION: CLIQUE}},
             "spec": {"replicas": 0}}, 1, id="scaled-to-zero",
        ),
    ],
)  # fmt: skip
def test_the_group_size_comes_from_the_workload_that_asked_for_one_clique(
    workload: dict[str, Any], size: int | None
) -> None:
    levels = fit.clique_levels([entry(levels=[{"nodeLabel": CLIQUE, "alias": "nvlink"}, {"nodeLabel": HOST}])])
    assert fit.opted_in_group_size(workload, clique_levels=levels) == size


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        pytest.param(
            {"name": "t", "levels": []},
            "topology 't': levels is empty; list at least one node label, widest first",
            id="empty",
        ),
        pytest.param(
            {"name": "t", "levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": CLIQUE}]},
            "topology 't': nodeLabel 'nvidia.com/gpu.clique' is listed twice; list each label once; "
            "domain 'gpuclique' is used twice; set distinct levels[].domain",
            id="duplicate-labels",
        ),
        pytest.param(
            {"name": "t", "levels": [{"nodeLabel": HOST}, {"nodeLabel": CLIQUE}]},
            "topology 't': kubernetes.io/hostname must be the last level, as KAI requires; move it to the end",
            id="hostname-not-last",
        ),
        pytest.param(
            {"name": "T_1", "levels": [{"nodeLabel": CLIQUE}], "groveBinding": {"enabled": False}},
            "topology 'T_1': name 'T_1' is not a DNS subdomain name; use lowercase letters, digits, '-' and '.'",
            id="not-dns",
        ),
        pytest.param(
            {"name": "t", "levels": [{"nodeLabel": CLIQUE}], "groveBinding": {"schedulerName": ""}},
            "topology 't': groveBinding.schedulerName '' is not a DNS subdomain name; "
            "use lowercase letters, digits, '-' and '.'",
            id="empty-scheduler-name",
        ),
        pytest.param(
            {
                "name": "t",
                "levels": [{"nodeLabel": CLIQUE}],
                "groveBinding": {"enabled": False, "schedulerName": "KAI_Scheduler"},
            },
            "topology 't': groveBinding.schedulerName 'KAI_Scheduler' is not a DNS subdomain name; "
            "use lowercase letters, digits, '-' and '.'",
            id="scheduler-name-not-dns-binding-disabled",
        ),
    ],
)
def test_an_invalid_topology_is_refused_naming_the_entry(document: dict[str, Any], problem: str) -> None:
    with pytest.raises(pydantic.ValidationError) as failure:
        models.Configuration.model_validate({"topologies": [document]})
    [error] = failure.value.errors()
    assert (error["loc"], error["ctx"]["error"].args[0]) == (("topologies", 0), problem)


def test_a_scheduler_name_shaped_like_kubernetes_own_is_accepted() -> None:
    named = entry(groveBinding={"schedulerName": "kai.scheduler-2"})
    binding = topologies.desired_binding(named, installation=INSTALLATION)
    assert binding is not None
    assert binding["spec"]["schedulerTopologyBindings"] == [
        {"schedulerName": "kai.scheduler-2", "topologyReference": "nvl72"}
    ]


def test_two_topologies_with_one_name_are_refused() -> None:
    same = {"name": "t", "levels": [{"nodeLabel": CLIQUE}]}
    with pytest.raises(pydantic.ValidationError) as failure:
        models.Configuration.model_validate({"topologies": [same, same]})
    [error] = failure.value.errors()
    assert error["ctx"]["error"].args[0] == (
        "topologies: 't' names two topologies; give each its own name; "
        "topologies: binding name 't-binding' is used twice; set distinct groveBinding.name"
    )


# --- whose an object is -------------------------------------------------------------------------------------------

SAME = [{"nodeLabel": CLIQUE}, {"nodeLabel": HOST}]


@pytest.mark.parametrize(
    ("topology", "provenance"),
    [
        pytest.param(found(SAME), topologies.Provenance.OURS, id="ours"),
        pytest.param(found(SAME, installation=None), topologies.Provenance.LEGACY, id="earlier-version"),
        pytest.param(
            found(SAME, installation=OTHER), topologies.Provenance.OTHER_INSTALLATION, id="other-installation"
        ),
        pytest.param(found(SAME, manager="kubectl"), topologies.Provenance.FOREIGN, id="copied-manifest"),
        pytest.param(
            found(SAME, manager="kubectl", installation=None), topologies.Provenance.FOREIGN, id="copied-bare"
        ),
        pytest.param(found(SAME, ours=False), topologies.Provenance.FOREIGN, id="not-labelled"),
    ],
)
def test_an_object_is_ours_only_when_our_field_manager_wrote_it_for_this_installation(
    topology: dict[str, Any], provenance: topologies.Provenance
) -> None:
    assert topologies.provenance(topology, installation=INSTALLATION) is provenance


def test_our_label_with_an_installation_annotation_written_by_someone_else_is_not_ours() -> None:
    """A user annotating an earlier version's object (or one of another installation) does not make it ours."""
    topology = found(SAME, installation=None)
    topology["metadata"]["annotations"] = {keys.INSTALLATION_ANNOTATION: INSTALLATION}
    topology["metadata"]["managedFields"].append(
        fake_api.ownership("kubectl-annotate", {"annotations": topology["metadata"]["annotations"]})
    )
    assert topologies.provenance(topology, installation=INSTALLATION) is topologies.Provenance.FOREIGN
    assert topologies.foreign_owner(topology, installation=INSTALLATION) == (
        "labelled app.kubernetes.io/managed-by=mnnvl-topology but written by kubectl-annotate, mnnvl-topology, not "
        "by mnnvl-topology alone (managedFields)"
    )


@pytest.mark.parametrize(
    ("topology", "owner"),
    [
        pytest.param(
            found(SAME, installation=OTHER), "made by the installation team-b/mnnvl of mnnvl-topology", id="b"
        ),
        pytest.param(
            found(SAME, manager="kubectl-client-side-apply"),
            "labelled app.kubernetes.io/managed-by=mnnvl-topology but written by kubectl-client-side-apply, not by "
            "mnnvl-topology alone (managedFields)",
            id="copied",
        ),
    ],
)
def test_an_object_labelled_ours_that_is_not_is_left_alone_saying_whose_it_is(
    topology: dict[str, Any], owner: str
) -> None:
    """Whatever its levels, nothing is written to it: no recreate, no patch, no adoption."""
    for wanted in (SAME, [{"nodeLabel": "example.com/rack"}, *SAME]):
        desired = topologies.desired_topology(entry(levels=wanted), aliases=True, installation=INSTALLATION)
        assert topologies.decide_topology(desired, topology, aliases=True, installation=INSTALLATION) is (
            topologies.Action.FOREIGN
        )
    assert topologies.foreign_owner(topology, installation=INSTALLATION) == owner
    assert not topologies.removable(topology, wanted=[], installation=INSTALLATION)


@pytest.mark.parametrize(
    ("wanted", "aliases", "action"),
    [
        pytest.param(SAME, False, topologies.Action.ADOPT, id="in-shape"),
        pytest.param([{"nodeLabel": CLIQUE, "alias": "clique"}, {"nodeLabel": HOST}], True, topologies.Action.PATCH,
                     id="new-alias"),
        pytest.param([{"nodeLabel": "example.com/rack"}, *SAME], False, topologies.Action.RECREATE, id="new-levels"),
    ],
)  # fmt: skip
def test_an_earlier_versions_object_under_a_configured_name_is_adopted(
    wanted: list[dict[str, str]], aliases: bool, action: topologies.Action
) -> None:
    """Each write of it records this installation: the apply of the desired object, or the recreated object."""
    desired = topologies.desired_topology(entry(levels=wanted), aliases=aliases, installation=INSTALLATION)
    legacy = found(SAME, installation=None)
    assert topologies.decide_topology(desired, legacy, aliases=aliases, installation=INSTALLATION) is action
    assert desired["metadata"]["annotations"] == {keys.INSTALLATION_ANNOTATION: INSTALLATION}


def test_an_earlier_versions_binding_in_shape_is_adopted() -> None:
    desired = topologies.desired_binding(entry(), installation=INSTALLATION)
    assert desired is not None
    legacy = fake_api.stored(
        {**desired, "metadata": {"name": desired["metadata"]["name"], "labels": dict(topologies.OURS)}},
        manager=keys.TOPOLOGY_CONTROLLER,
    )
    assert topologies.decide_binding(desired, legacy, installation=INSTALLATION) is topologies.Action.ADOPT


@pytest.mark.parametrize(
    ("topology", "wanted", "removable"),
    [
        pytest.param(found(SAME), [], True, id="ours-unconfigured"),
        pytest.param(found(SAME), ["nvl72"], False, id="ours-configured"),
        pytest.param(found(SAME, installation=None), [], False, id="earlier-version-unconfigured"),
        pytest.param(found(SAME, installation=OTHER), [], False, id="other-installation"),
        pytest.param(found(SAME, manager="kubectl"), [], False, id="copied-manifest"),
        pytest.param(found(SAME, ours=False), [], False, id="not-labelled"),
    ],
)
def test_only_this_installations_objects_are_deleted_when_unconfigured(
    topology: dict[str, Any], wanted: list[str], removable: bool
) -> None:
    assert topologies.removable(topology, wanted=wanted, installation=INSTALLATION) is removable


def test_a_write_over_an_object_is_conditional_on_it_as_read() -> None:
    desired = topologies.desired_topology(entry(), aliases=False, installation=INSTALLATION)
    present = {**found(SAME), "metadata": {**found(SAME)["metadata"], "resourceVersion": "42"}}
    written = topologies.conditional(desired, present)
    assert written["metadata"] == {**desired["metadata"], "resourceVersion": "42"}
    assert written["spec"] == desired["spec"]


@pytest.mark.parametrize(
    ("installation", "problem"),
    [
        pytest.param("mnnvl", "got 'mnnvl'", id="no-slash"),
        pytest.param("Team/mnnvl", "got 'Team/mnnvl'", id="namespace-not-a-label"),
        pytest.param("team/", "got 'team/'", id="no-name"),
        pytest.param("team/a/b", "got 'team/a/b'", id="two-slashes"),
    ],
)
def test_an_installation_identity_must_be_namespace_slash_name(installation: str, problem: str) -> None:
    with pytest.raises(pydantic.ValidationError) as failure:
        models.Configuration.model_validate({"installation": installation})
    [error] = failure.value.errors()
    assert error["loc"] == ("installation",)
    assert error["ctx"]["error"].args[0] == f"{configuration.INSTALLATION_RULE}; {problem}"


def test_without_an_installation_configured_it_is_the_process_namespaces_mnnvl() -> None:
    assert models.Configuration().installation_of("team-b") == "team-b/mnnvl"
    assert models.Configuration.model_validate({"installation": "ops/gpu.v2"}).installation_of("x") == "ops/gpu.v2"
