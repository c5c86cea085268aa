"""What mnnvl-topology knows from its watches: nodes, the pods that hold claims or cannot be scheduled, the
ComputeDomains' channel templates and the Topologies. Each event costs O(1); the census is computed from these
on a queue pass, coalesced however many events came in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

import kopf

from mnnvl_api import keys
from mnnvl_runtime import indexes, stores

from . import planner

registry = kopf.OperatorRegistry()
#: A unit of work: ("topologies",) every configured topology and binding; ("census",) the census;
#: ("fit", namespace, pod) whether an unschedulable pod's group fits in one clique.
Key = tuple[str, ...]
TOPOLOGIES: Final[Key] = ("topologies",)
CENSUS: Final[Key] = ("census",)
FIT: Final = "fit"
SliceKey = tuple[str, str, str, str]  # namespace, DisaggregatedSet, slice, revision


@dataclasses.dataclass
class Stores:
    nodes: dict[str, planner.NodeFacts] = dataclasses.field(default_factory=dict)
    #: Pods that hold a claim or cannot be scheduled; other pods are not kept.
    pods: dict[str, planner.PodFacts] = dataclasses.field(default_factory=dict)
    #: (namespace, pod) → facts of unschedulable pods
    unschedulable: indexes.Index[tuple[str, str], planner.PodFacts] = dataclasses.field(default_factory=indexes.Index)
    #: slice → uids of its pods that hold mnnvl's channel claim (one node each)
    slices: indexes.Index[SliceKey, bool] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) of every ComputeDomain's channel
    channel_templates: indexes.Index[tuple[str, str], bool] = dataclasses.field(default_factory=indexes.Index)
    #: names of the Topologies we created
    ours: indexes.Index[str, bool] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        self.node_mirror = stores.Mirror(stores.Resource(api_version="v1", plural="nodes"), self.apply_node)
        self.pod_mirror = stores.Mirror(stores.Resource(api_version="v1", plural="pods"), self.apply_pod)
        self.domain_mirror = stores.Mirror(
            stores.Resource(api_version=keys.COMPUTE_DOMAIN_API_VERSION, plural=keys.COMPUTE_DOMAIN_PLURAL),
            self.apply_domain,
        )
        self.topology_mirror = stores.Mirror(
            stores.Resource(api_version=keys.KAI_TOPOLOGY_API_VERSION, plural=keys.KAI_TOPOLOGY_PLURAL),
            self.apply_topology,
        )

    def mirrors(self, *, compute_domains: bool) -> list[stores.Mirror[Key]]:
        """The stores the census and the topologies rest on; ComputeDomains only where their API is served."""
        found = [self.node_mirror, self.pod_mirror, self.topology_mirror]
        return [*found, self.domain_mirror] if compute_domains else found

    def apply_node(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        if body is None:
            self.nodes.pop(uid, None)
        else:
            self.nodes[uid] = planner.node_facts(body)
        return [CENSUS]

    def apply_pod(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        before = self.pods.pop(uid, None)
        facts = None if body is None else planner.pod_facts(body)
        keep = facts is not None and (facts.templates or facts.channel_claim or facts.unschedulable)
        if facts is None or not keep:
            self.unschedulable.drop(uid)
            self.slices.drop(uid)
            return [CENSUS] if before is not None else []
        self.pods[uid] = facts
        self.unschedulable.put(uid, {(facts.namespace, facts.name): facts} if facts.unschedulable else {})
        self.slices.put(uid, {(facts.namespace, *facts.slice): True} if facts.slice and facts.channel_claim else {})
        return [CENSUS, (FIT, facts.namespace, facts.name)] if facts.unschedulable else [CENSUS]

    def apply_domain(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        template = None
        if body is not None:
            channel = (body.get("spec") or {}).get("channel") or {}
            template = (channel.get("resourceClaimTemplate") or {}).get("name")
        namespace = "" if body is None else str(body["metadata"].get("namespace", ""))
        self.channel_templates.put(uid, {(namespace, str(template)): True} if template else {})
        return [CENSUS]

    def apply_topology(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        ours = body is not None and planner.is_ours(body)
        self.ours.put(uid, {str(body["metadata"]["name"]): True} if body is not None and ours else {})
        return [TOPOLOGIES]

    def census(self) -> planner.Census:
        templates = frozenset(self.channel_templates.groups())
        return planner.census(self.nodes.values(), planner.channel_nodes(self.pods.values(), templates))

    def unschedulable_pod(self, namespace: str, name: str) -> planner.PodFacts | None:
        return self.unschedulable.first((namespace, name))

    def slice_size(self, namespace: str, ds: str, slice_: str, revision: str) -> int:
        return len(self.slices.get((namespace, ds, slice_, revision)))

    def our_topologies(self) -> list[str]:
        return sorted(self.ours.groups())

    def keys(self) -> list[Key]:
        """Every unit of work, for the periodic resync."""
        return [TOPOLOGIES, CENSUS, *((FIT, namespace, name) for namespace, name in self.unschedulable.groups())]
