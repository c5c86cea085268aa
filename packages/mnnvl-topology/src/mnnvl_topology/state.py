"""What mnnvl-topology knows from its watches: nodes, the pods that hold claims or cannot be scheduled, the
ComputeDomains' channel templates and the Topologies. Each event costs O(1); the census is computed from these
on a queue pass, coalesced however many events came in."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import references
from mnnvl_runtime import indexes, stores

from . import census, topologies

registry = kopf.OperatorRegistry()
#: A unit of work: ("topologies",) every configured topology and binding; ("census",) the census;
#: ("fit", namespace, pod) whether an unschedulable pod's group fits in one clique.
Key = tuple[str, ...]
TOPOLOGIES: Final[Key] = ("topologies",)
CENSUS: Final[Key] = ("census",)
FIT: Final = "fit"
SliceKey = tuple[str, str, str, str]  # namespace, DisaggregatedSet, slice, revision

#: The pods the API server sends, on the watch and on the stores' lists: the non-terminal ones. No label selects
#: what the census and the fit check need (GPU pods and pods of hand-made domains carry no label of ours), but a pod
#: that has Succeeded or Failed is nothing to either, whatever it holds (`census.worth_keeping` is false for it), so
#: it is never sent. A pod that finishes leaves the selection, which the watch reports as a deletion; no pod comes
#: back from a terminal phase, so none is missed on re-entering.
POD_FIELD_SELECTOR: Final = ",".join(f"status.phase!={phase}" for phase in sorted(references.TERMINAL_PHASES))


@dataclasses.dataclass
class Stores:
    nodes: dict[str, census.NodeFacts] = dataclasses.field(default_factory=dict)
    #: Pods `census.worth_keeping`: holding a claim or a GPU, or unschedulable in a group that may need a clique.
    pods: dict[str, census.PodUsage] = dataclasses.field(default_factory=dict)
    #: (namespace, pod) → facts of unschedulable pods whose group may need one clique
    unschedulable: indexes.Index[tuple[str, str], census.PodUsage] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, *census.group_key) → (pod, node) of the group's pods running on a node
    placed: indexes.Index[tuple[str, ...], tuple[str, str]] = dataclasses.field(default_factory=indexes.Index)
    #: node name → the uid of the node of that name seen last (a node re-registered under its name has a new uid,
    #: and the two may be applied in either order)
    node_uids: dict[str, str] = dataclasses.field(default_factory=dict)
    #: slice → names of its pods that hold mnnvl's channel claim (one node each), by pod uid
    slices: indexes.Index[SliceKey, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) of every ComputeDomain's channel
    channel_templates: indexes.Index[tuple[str, str], bool] = dataclasses.field(default_factory=indexes.Index)
    #: names of the Topologies labelled ours: candidates for removal only, each decided on a fresh read (anyone
    #: can write a label)
    labelled: indexes.Index[str, bool] = dataclasses.field(default_factory=indexes.Index)
    #: The census of the facts above, computed once however many fit checks read it (None: facts changed).
    computed: census.Census | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.node_mirror = stores.Mirror(stores.Resource(api_version="v1", plural="nodes"), self.apply_node)
        self.pod_mirror = stores.Mirror(
            stores.Resource(api_version="v1", plural="pods", field_selector=POD_FIELD_SELECTOR), self.apply_pod
        )
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
        gone = self.nodes.pop(uid, None)
        if gone is not None and self.node_uids.get(gone.name) == uid:
            del self.node_uids[gone.name]
        if body is not None:
            facts = self.nodes[uid] = census.node_facts(body)
            self.node_uids[facts.name] = uid
        self.computed = None
        return [CENSUS]

    def apply_pod(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        before = self.pods.pop(uid, None)
        facts = None if body is None else census.pod_facts(body)
        kept = facts if facts is not None and census.worth_keeping(facts) else None
        found: list[Key] = []
        if census.census_view(before) != census.census_view(kept):
            self.computed = None
            found.append(CENSUS)
        if kept is None:
            self.unschedulable.drop(uid)
            self.placed.drop(uid)
            self.slices.drop(uid)
            return found
        self.pods[uid] = kept
        fit = census.may_need_one_clique(kept)
        self.unschedulable.put(uid, {(kept.namespace, kept.name): kept} if fit else {})
        group = (kept.namespace, *census.group_key(kept))
        self.placed.put(uid, {group: (kept.name, kept.node or "")} if census.placed_member(kept) else {})
        self.slices.put(uid, {(kept.namespace, *kept.slice): kept.name} if kept.slice and kept.channel_claim else {})
        return [*found, (FIT, kept.namespace, kept.name)] if fit else found

    def apply_domain(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        template = None
        if body is not None:
            channel = (body.get("spec") or {}).get("channel") or {}
            template = (channel.get("resourceClaimTemplate") or {}).get("name")
        namespace = "" if body is None else str(body["metadata"].get("namespace", ""))
        self.channel_templates.put(uid, {(namespace, str(template)): True} if template else {})
        self.computed = None
        return [CENSUS]

    def apply_topology(self, uid: str, body: Mapping[str, Any] | None) -> list[Key]:
        labelled = body is not None and topologies.labelled_as_ours(body)
        self.labelled.put(uid, {str(body["metadata"]["name"]): True} if body is not None and labelled else {})
        return [TOPOLOGIES]

    def current_census(self) -> census.Census:
        if self.computed is None:
            templates = frozenset(self.channel_templates.groups())
            pods = self.pods.values()
            self.computed = census.census(
                self.nodes.values(), census.channel_nodes(pods, templates), gpu_nodes=census.gpu_nodes(pods)
            )
        return self.computed

    def unschedulable_pod(self, namespace: str, name: str) -> census.PodUsage | None:
        return self.unschedulable.first((namespace, name))

    def slice_size(self, namespace: str, ds: str, slice_: str, revision: str) -> int:
        """Its pods by name: a pod recreated under its name while the old one terminates is one member."""
        return len(set(self.slices.get((namespace, ds, slice_, revision)).values()))

    def clique_of(self, node: str) -> str | None:
        uid = self.node_uids.get(node)
        facts = None if uid is None else self.nodes.get(uid)
        return None if facts is None else facts.clique

    def placed_cliques(self, pod: census.PodUsage, members: frozenset[str] | None) -> dict[str, int]:
        """Per clique, on how many nodes pods of the pod's group run (of `members` only, when given); nodes without
        the clique label are left out, as KAI leaves them out of the topology."""
        nodes: dict[str, set[str]] = {}
        for name, node in self.placed.get((pod.namespace, *census.group_key(pod))).values():
            clique = self.clique_of(node)
            if clique is not None and (members is None or name in members):
                nodes.setdefault(clique, set()).add(node)
        return {clique: len(found) for clique, found in nodes.items()}

    def labelled_topologies(self) -> list[str]:
        return sorted(self.labelled.groups())

    def keys(self) -> list[Key]:
        """Every unit of work, for the periodic resync."""
        return [TOPOLOGIES, CENSUS, *((FIT, namespace, name) for namespace, name in self.unschedulable.groups())]
