"""Pure decisions of mnnvl-topology: the objects a configuration asks for, whose the ones found are and what to do
about them, the clique census, and whether a Pending group can fit in one clique. Values in, values out; no I/O,
no clock."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from mnnvl_api import keys
from mnnvl_api.decisions import domains, injection, ownership, references
from mnnvl_api.models import configuration

Object = dict[str, Any]
OURS = {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER}


class Action(enum.Enum):
    KEEP = "keep"
    CREATE = "create"
    #: Apply the desired object over the existing one (KAI v0.17+ aliases; a Grove binding's mutable spec).
    PATCH = "patch"
    #: Delete and create again: the API server refuses the change in place.
    RECREATE = "recreate"
    #: An earlier version's object, as desired: apply the desired object, which records this installation on it.
    ADOPT = "adopt"
    #: A same-named object this installation did not create: never touched.
    FOREIGN = "foreign"


class Provenance(enum.Enum):
    """Who made an object found under a name of ours, as far as the API server's records tell."""

    #: This installation: our field manager alone wrote the managed-by label and the installation annotation,
    #: and the annotation names this installation.
    OURS = "ours"
    #: An earlier version of ours: our field manager alone wrote the managed-by label, and no installation is
    #: recorded. Adopted under a configured name; never deleted (it may be another installation's).
    LEGACY = "legacy"
    #: Another installation of mnnvl-topology: our field manager wrote it for the installation it records.
    OTHER_INSTALLATION = "other-installation"
    #: Anyone else: not labelled ours, or labelled so by another field manager (a copied manifest, a restore).
    FOREIGN = "foreign"


# --- desired objects ---------------------------------------------------------------------------------------


def _metadata(name: str, installation: str) -> Object:
    return {"name": name, "labels": dict(OURS), "annotations": {keys.INSTALLATION_ANNOTATION: installation}}


def desired_topology(entry: configuration.TopologySettings, *, aliases: bool, installation: str) -> Object:
    """The KAI Topology for `entry`; `aliases`: whether the served schema has `levels[].alias` (KAI v0.17+)."""
    levels: list[Object] = []
    for level in entry.levels:
        wanted: Object = {"nodeLabel": level.node_label}
        if aliases and level.alias is not None:
            wanted["alias"] = level.alias
        levels.append(wanted)
    return {
        "apiVersion": keys.KAI_TOPOLOGY_API_VERSION,
        "kind": keys.KAI_TOPOLOGY_KIND,
        "metadata": _metadata(entry.name, installation),
        "spec": {"levels": levels},
    }


def desired_binding(entry: configuration.TopologySettings, *, installation: str) -> Object | None:
    """The Grove ClusterTopologyBinding for `entry` (None when disabled). It always names the KAI Topology in
    `schedulerTopologyBindings`: without it Grove would create and own a Topology of the binding's name."""
    if not entry.grove_binding.enabled:
        return None
    return {
        "apiVersion": keys.GROVE_API_VERSION,
        "kind": keys.GROVE_BINDING_KIND,
        "metadata": _metadata(entry.binding_name, installation),
        "spec": {
            "levels": [{"domain": level.grove_domain, "key": level.node_label} for level in entry.levels],
            "schedulerTopologyBindings": [
                {"schedulerName": entry.grove_binding.scheduler_name, "topologyReference": entry.name}
            ],
        },
    }


# --- what to do about what exists ----------------------------------------------------------------------------


def labelled_as_ours(found: Mapping[str, Any]) -> bool:
    """Whether the object carries our managed-by label: a candidate only, anyone can write a label."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(keys.MANAGED_BY_LABEL) == keys.TOPOLOGY_CONTROLLER)


def recorded_installation(found: Mapping[str, Any]) -> str | None:
    annotations = (found.get("metadata") or {}).get("annotations") or {}
    recorded = annotations.get(keys.INSTALLATION_ANNOTATION)
    return None if recorded is None else str(recorded)


def provenance(found: Mapping[str, Any], *, installation: str) -> Provenance:
    """Who made `found`: our field manager must alone own its managed-by label and, when there is one, its
    installation annotation (`managedFields`, as for ComputeDomains); the annotation then says which installation."""
    if not labelled_as_ours(found):
        return Provenance.FOREIGN
    recorded = recorded_installation(found)
    identity = (keys.INSTALLATION_ANNOTATION,) if recorded is not None else ()
    meta = found.get("metadata") or {}
    if domains.identity_owner(meta, labels=(keys.MANAGED_BY_LABEL,), annotations=identity) != keys.TOPOLOGY_CONTROLLER:
        return Provenance.FOREIGN
    if recorded is None:
        return Provenance.LEGACY
    return Provenance.OURS if recorded == installation else Provenance.OTHER_INSTALLATION


def foreign_owner(found: Mapping[str, Any], *, installation: str) -> str:
    """Who the same-named object belongs to, for the Warning: its controlling owner (Grove creates and owns a
    Topology for a binding without a `kai-scheduler` entry), the other installation it records, the field managers
    that wrote our label on it (a copied manifest, a restore), its manager label, or nobody we know."""
    meta = found.get("metadata") or {}
    if (owner := ownership.controller_owner(meta)) is not None:
        return f"owned by {owner[1]} {owner[2]}"
    if provenance(found, installation=installation) is Provenance.OTHER_INSTALLATION:
        return f"made by the installation {recorded_installation(found)} of {keys.TOPOLOGY_CONTROLLER}"
    if labelled_as_ours(found):
        writers = domains.field_owners(meta, "labels", keys.MANAGED_BY_LABEL) | domains.field_owners(
            meta, "annotations", keys.INSTALLATION_ANNOTATION
        )
        return (
            f"labelled {keys.MANAGED_BY_LABEL}={keys.TOPOLOGY_CONTROLLER} but written by "
            f"{', '.join(sorted(writers)) or 'no recorded field manager'}, not by {keys.TOPOLOGY_CONTROLLER} alone "
            "(managedFields)"
        )
    manager = (meta.get("labels") or {}).get(keys.MANAGED_BY_LABEL)
    return f"managed by {manager}" if manager else f"not labelled {keys.MANAGED_BY_LABEL}={keys.TOPOLOGY_CONTROLLER}"


def _levels(topology: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [
        (str(level.get("nodeLabel")), level.get("alias"))
        for level in ((topology.get("spec") or {}).get("levels") or ())
    ]


def _may_write(found: Mapping[str, Any], *, installation: str) -> bool:
    """Only this installation's objects, and an earlier version's under a configured name, are ever written."""
    return provenance(found, installation=installation) in (Provenance.OURS, Provenance.LEGACY)


def _adopting(action: Action, found: Mapping[str, Any], *, installation: str) -> Action:
    """An earlier version's object in shape still needs this installation recorded on it."""
    legacy = provenance(found, installation=installation) is Provenance.LEGACY
    return Action.ADOPT if action is Action.KEEP and legacy else action


def decide_topology(
    desired: Mapping[str, Any], found: Mapping[str, Any] | None, *, aliases: bool, installation: str
) -> Action:
    """KAI <= v0.16 refuses any edit of `spec.levels`; v0.17+ (`aliases`) refuses only a new nodeLabel sequence.
    So a new sequence always recreates, and new aliases are patched in place where the schema has them."""
    if found is None:
        return Action.CREATE
    if not _may_write(found, installation=installation):
        return Action.FOREIGN
    wanted, present = _levels(desired), _levels(found)
    if wanted == present:
        action = Action.KEEP
    elif aliases and [label for label, _ in wanted] == [label for label, _ in present]:
        action = Action.PATCH
    else:
        action = Action.RECREATE
    return _adopting(action, found, installation=installation)


def decide_binding(desired: Mapping[str, Any], found: Mapping[str, Any] | None, *, installation: str) -> Action:
    """A binding's spec is mutable: patch it back whenever it differs (levels, scheduler bindings)."""
    if found is None:
        return Action.CREATE
    if not _may_write(found, installation=installation):
        return Action.FOREIGN
    spec, present = desired["spec"], found.get("spec") or {}
    same = all(present.get(field) == value for field, value in spec.items())
    return _adopting(Action.KEEP if same else Action.PATCH, found, installation=installation)


def removable(found: Mapping[str, Any], *, wanted: Iterable[str], installation: str) -> bool:
    """Whether `found` is to be deleted: this installation made it and the configuration no longer names it. An
    earlier version's object is not: nothing says which installation made it."""
    name = (found.get("metadata") or {}).get("name")
    return name not in set(wanted) and provenance(found, installation=installation) is Provenance.OURS


def conditional(desired: Mapping[str, Any], found: Mapping[str, Any]) -> Object:
    """`desired` applied only over `found` as read (its resourceVersion a precondition): an object replaced or
    relabelled meanwhile makes the write fail (409) instead of taking it over."""
    meta = {**desired["metadata"], "resourceVersion": found["metadata"]["resourceVersion"]}
    return {**desired, "metadata": meta}


def schema_has_aliases(crd: Mapping[str, Any] | None) -> bool:
    """Whether the served KAI Topology schema has `levels[].alias` (v0.17+): the served version is read from the
    CRD the API server enforces, not from configuration, since KAI may be upgraded under us."""
    for version in ((crd or {}).get("spec") or {}).get("versions") or ():
        if version.get("name") != keys.KAI_TOPOLOGY_VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        levels = schema.get("properties", {}).get("spec", {}).get("properties", {}).get("levels", {})
        return "alias" in (levels.get("items") or {}).get("properties", {})
    return False


def dropped_aliases(entry: configuration.TopologySettings, *, aliases: bool) -> list[str]:
    """The configured aliases `desired_topology` leaves out: all of them where the served schema has none."""
    return [] if aliases else [level.alias for level in entry.levels if level.alias is not None]


def aliases_ignored_message(name: str, dropped: Sequence[str]) -> str:
    """The Warning for a Topology written without its configured aliases (KAI <= v0.16)."""
    return (
        f"{keys.KAI_TOPOLOGY_KIND} {name} is written without its aliases {', '.join(dropped)}: the served "
        f"{keys.KAI_TOPOLOGY_CRD} schema has no levels[].alias; KAI Scheduler v0.17+ is needed for them, until "
        "then name the levels by their nodeLabel"
    )


def obsolete(ours: Iterable[str], wanted: Iterable[str]) -> list[str]:
    """Names of our objects the configuration no longer asks for."""
    return sorted(set(ours) - set(wanted))


def refusal_message(kind: str, name: str, *, status: int | None, body: object) -> str:
    """The Warning for a call the API server refused, with its own message (a webhook's reason is in it)."""
    said: object = None
    if isinstance(body, str | bytes):
        try:
            said = json.loads(body).get("message")
        except (ValueError, AttributeError):
            said = body.decode(errors="replace") if isinstance(body, bytes) else body
    return (
        f"{kind} {name} could not be written by {keys.TOPOLOGY_CONTROLLER}: the API server answered {status}"
        + (f": {said}" if said else "")
        + "; the other topologies are still kept, and this one is retried with back-off"
    )


# --- APIs served after start-up -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptionalApi:
    """An API mnnvl-topology works without and watches when it is served at start-up. kopf looks for the
    resources it watches only then (CRD scanning is off), so one served later is watched after a restart only."""

    api_version: str
    plural: str
    #: What goes unseen until its watch starts.
    unseen: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.api_version.partition('/')[0]}"


GROVE_BINDINGS = OptionalApi(
    api_version=keys.GROVE_API_VERSION,
    plural=keys.GROVE_BINDING_PLURAL,
    unseen="an edited binding is restored by the periodic pass only, not at once",
)
COMPUTE_DOMAINS = OptionalApi(
    api_version=keys.COMPUTE_DOMAIN_API_VERSION,
    plural=keys.COMPUTE_DOMAIN_PLURAL,
    unseen="the clique census does not count pods holding a channel of a ComputeDomain made by hand",
)
OPTIONAL_APIS = (GROVE_BINDINGS, COMPUTE_DOMAINS)


def served_since_start_up(
    unwatched: Iterable[OptionalApi], served: Iterable[OptionalApi], reported: Iterable[OptionalApi]
) -> list[OptionalApi]:
    """The APIs to report now: not served at start-up (so never watched), served now, and not reported yet."""
    new = (set(unwatched) & set(served)) - set(reported)
    return [api for api in OPTIONAL_APIS if api in new]


def restart_message(api: OptionalApi, *, namespace: str) -> str:
    """The Warning for an API served since start-up: what is missed, and the restart that starts its watch."""
    return (
        f"{api.name} is served now but was not when {keys.TOPOLOGY_CONTROLLER} started, so it is not watched: "
        f"{api.unseen}; restart {keys.TOPOLOGY_CONTROLLER} to watch it, e.g. "
        f"kubectl -n {namespace} rollout restart deployment/{keys.TOPOLOGY_CONTROLLER}"
    )


# --- the clique census ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeFacts:
    name: str
    clique: str | None
    gpus: int
    schedulable: bool = True


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    meta = node.get("metadata") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    raw = str(capacity.get(keys.GPU_RESOURCE, "0"))
    return NodeFacts(
        name=str(meta["name"]),
        clique=(meta.get("labels") or {}).get(keys.GPU_CLIQUE_LABEL) or None,
        gpus=int(raw) if raw.isdigit() else 0,
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliqueCount:
    clique: str
    nodes: int
    gpus: int
    #: Nodes where a non-terminal pod holds a ComputeDomain channel (one per node in the driver's mode).
    channel_nodes: int
    #: Schedulable GPU nodes with neither a channel nor a GPU pod in use.
    free_nodes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Census:
    cliques: tuple[CliqueCount, ...]
    #: GPU nodes without the clique label: KAI places no clique-constrained workload on them.
    unlabelled_gpu_nodes: tuple[str, ...]

    def largest_free(self) -> CliqueCount | None:
        """The clique with the most free nodes (the first by value among equals), None without cliques."""
        return max(self.cliques, key=lambda count: count.free_nodes, default=None)

    def free_in(self, clique: str) -> int:
        return next((count.free_nodes for count in self.cliques if count.clique == clique), 0)

    def to_json(self) -> str:
        """The ConfigMap's `census.json`: stable (sorted, no timestamps), so an unchanged census writes nothing."""
        document = {
            "cliqueLabel": keys.GPU_CLIQUE_LABEL,
            "cliques": [
                {
                    "clique": count.clique,
                    "nodes": count.nodes,
                    "gpus": count.gpus,
                    "channelNodes": count.channel_nodes,
                    "freeNodes": count.free_nodes,
                }
                for count in self.cliques
            ],
            "gpuNodesWithoutClique": list(self.unlabelled_gpu_nodes),
        }
        return json.dumps(document, indent=2, sort_keys=True)


def census(nodes: Iterable[NodeFacts], channel_nodes: Iterable[str], *, gpu_nodes: Iterable[str]) -> Census:
    """Per clique value: nodes, GPU capacity, nodes with a channel in use, free nodes; sorted by clique value.
    A node is busy with a channel or with any GPU pod (one GPU pod per node in the driver's mode)."""
    with_channel = set(channel_nodes)
    busy = with_channel | set(gpu_nodes)
    by_clique: dict[str, list[NodeFacts]] = {}
    unlabelled: list[str] = []
    for node in nodes:
        if node.clique is not None:
            by_clique.setdefault(node.clique, []).append(node)
        elif node.gpus > 0:
            unlabelled.append(node.name)
    counts = tuple(
        CliqueCount(
            clique=clique,
            nodes=len(members),
            gpus=sum(node.gpus for node in members),
            channel_nodes=sum(1 for node in members if node.name in with_channel),
            free_nodes=sum(1 for node in members if node.gpus > 0 and node.schedulable and node.name not in busy),
        )
        for clique, members in sorted(by_clique.items())
    )
    return Census(cliques=counts, unlabelled_gpu_nodes=tuple(sorted(unlabelled)))


# --- pods: channels held, and groups that cannot fit ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodFacts:
    namespace: str
    name: str
    node: str | None
    #: Neither Succeeded nor Failed: on its node, it occupies it.
    live: bool
    #: Claim templates the pod holds while non-terminal, and whether it holds mnnvl's channel claim.
    templates: frozenset[str]
    channel_claim: bool
    #: Non-terminal and asks for `nvidia.com/gpu`: its node is busy, channel or not.
    gpu: bool
    #: Pending, and the scheduler found no node for it.
    unschedulable: bool
    #: KAI said why, and it is the topology itself (the Topology or its level is missing), not the cliques' room.
    topology_missing: bool
    #: mnnvl's scope label (slice, replica), and whether KAI Scheduler places it (`spec.schedulerName`).
    scope: str | None
    kai: bool
    #: (DisaggregatedSet, slice, revision) of a slice-scope pod.
    slice: tuple[str, str, str] | None
    #: The LeaderWorkerSet and the replica (group index) of an LWS pod.
    lws: str | None
    group_index: str | None
    #: The Grove PodGang of a Grove workload's pod.
    gang: str | None
    owner: tuple[str, str, str] | None  # (apiVersion, kind, name) of the controlling owner


#: What KAI's unschedulable message says when the Topology a workload names, or its level, is missing
#: (`pkg/scheduler/plugins/topology`): no clique's room is to blame then.
TOPOLOGY_MISSING_WORDS: Final = ("does not exist", "does not contain a level")


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    live = references.is_non_terminal(pod)
    claims = spec.get("resourceClaims") or ()
    scheduled = [c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"]
    refusals = [c for c in scheduled if c.get("status") == "False" and c.get("reason") == "Unschedulable"]
    unschedulable = status.get("phase", "Pending") == "Pending" and not spec.get("nodeName") and bool(refusals)
    slice_of = None
    if labels.get(keys.SCOPE_LABEL) == keys.SCOPE_SLICE and labels.get(keys.DS_NAME_LABEL):
        slice_of = (
            str(labels[keys.DS_NAME_LABEL]),
            str(labels.get(keys.DS_SLICE_LABEL, "0")),
            str(labels.get(keys.DS_REVISION_LABEL, "")),
        )
    owner = ownership.controller_owner(meta)
    return PodFacts(
        namespace=str(meta.get("namespace", "")),
        name=str(meta["name"]),
        node=spec.get("nodeName") or None,
        live=live,
        templates=references.live_claim_templates(pod),
        channel_claim=live and any(claim.get("name") == keys.CHANNEL_CLAIM_NAME for claim in claims),
        gpu=live and injection.pod_requests_gpu(spec),
        unschedulable=unschedulable,
        topology_missing=any(
            any(words in str(c.get("message", "")) for words in TOPOLOGY_MISSING_WORDS) for c in refusals
        ),
        scope=labels.get(keys.SCOPE_LABEL) or None,
        kai=spec.get("schedulerName") == keys.KAI_SCHEDULER_NAME,
        slice=slice_of,
        lws=labels.get(keys.LWS_NAME_LABEL) or None,
        group_index=labels.get(keys.LWS_GROUP_INDEX_LABEL) or None,
        gang=labels.get(keys.GROVE_PODGANG_LABEL) or None,
        owner=owner,
    )


def holds_channel(pod: PodFacts, channel_templates: frozenset[tuple[str, str]]) -> bool:
    """Whether the pod holds a ComputeDomain channel: mnnvl's channel claim, or any claim generated from a
    ComputeDomain's channel template (a domain made by hand)."""
    return pod.channel_claim or any((pod.namespace, template) in channel_templates for template in pod.templates)


def channel_nodes(pods: Iterable[PodFacts], channel_templates: frozenset[tuple[str, str]]) -> set[str]:
    return {pod.node for pod in pods if pod.node is not None and holds_channel(pod, channel_templates)}


def gpu_nodes(pods: Iterable[PodFacts]) -> set[str]:
    return {pod.node for pod in pods if pod.node is not None and pod.gpu}


def in_placed_group(pod: PodFacts) -> bool:
    """Whether the pod belongs to a group that may have asked for one clique and takes a node of it: a slice or
    replica scope pod (a DisaggregatedSet slice, an opted-in LWS) or one KAI places (a required placement is on its
    workload), asking for GPUs or holding a claim (a channel, DRA GPUs; one such pod per node in the driver's mode:
    the check counts nodes). Pods without either are no concern of a clique's room."""
    takes_a_node = pod.gpu or pod.channel_claim or bool(pod.templates)
    return (pod.scope in (keys.SCOPE_SLICE, keys.SCOPE_REPLICA) or pod.kai) and takes_a_node


def may_need_one_clique(pod: PodFacts) -> bool:
    """Whether the pod is unschedulable and its group may have asked for one clique."""
    return pod.unschedulable and in_placed_group(pod)


def group_key(pod: PodFacts) -> tuple[str, ...]:
    """The pods placed together with this one, as far as its own labels tell: its slice, its LWS replica, its
    Grove gang, else the pods of its controlling owner (a StatefulSet's, a Job's)."""
    if pod.slice is not None:
        return ("slice", *pod.slice)
    if pod.lws is not None:
        return ("lws", pod.lws, pod.group_index or "")
    if pod.gang is not None:
        return ("podgang", pod.gang)
    return ("owner", *(pod.owner or ("", "", pod.name)))


def placed_member(pod: PodFacts) -> bool:
    """Whether the pod runs on a node as a member of a group that may need one clique: the group's other pods must
    join it in that node's clique."""
    return pod.live and pod.node is not None and in_placed_group(pod)


def worth_keeping(pod: PodFacts) -> bool:
    """Whether the census or the fit check needs the pod: it holds a claim (a channel, a slice's size) or a GPU,
    its group may need one clique, or it is placed in such a group. Every other pod is forgotten at once."""
    return pod.channel_claim or bool(pod.templates) or pod.gpu or may_need_one_clique(pod) or placed_member(pod)


def census_view(pod: PodFacts | None) -> tuple[object, ...] | None:
    """The facts of a pod the census reads (None: it counts on no node); the census is computed again only
    when these change."""
    return (
        None
        if pod is None or pod.node is None
        else (pod.namespace, pod.node, pod.templates, pod.channel_claim, pod.gpu)
    )


def clique_levels(topologies: Sequence[configuration.TopologySettings]) -> frozenset[str]:
    """The values of a KAI required placement that mean "one clique": the clique label and its aliases."""
    aliases = {
        level.alias
        for entry in topologies
        for level in entry.levels
        if level.node_label == keys.GPU_CLIQUE_LABEL and level.alias is not None
    }
    return frozenset({keys.GPU_CLIQUE_LABEL, *aliases})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Group:
    """Pods that asked to share one clique, as the fit check sees them."""

    #: What the Warning is about: the workload the user wrote.
    workload: Mapping[str, Any]
    #: How many of its pods must be placed in one clique.
    needed: int
    #: The names of its pods, when its pods' group key holds more than the group (a Grove gang's PodClique).
    members: frozenset[str] | None = None


def opted_in_group_size(workload: Mapping[str, Any], *, clique_levels: frozenset[str]) -> int | None:
    """How many nodes of one clique a workload's group needs, when it asked for one clique: an LWS that opted in
    to a ComputeDomain per replica (its `size`), or a workload whose top owner asks KAI for a required placement
    at the clique level (an LWS's `size`, a Job's pods running at once, else its `replicas`). None: it did not ask,
    or it is a Deployment, whose every pod KAI places on its own (a PodGroup per pod)."""
    meta = workload.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = workload.get("spec") or {}
    kind = workload.get("kind")
    opted_in = (
        kind == "LeaderWorkerSet" and annotations.get(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION) == keys.OPT_IN_ENABLED
    )
    asked = annotations.get(keys.KAI_REQUIRED_PLACEMENT_ANNOTATION) in clique_levels
    if kind == "Deployment" or not (opted_in or asked):
        return None
    if kind == "LeaderWorkerSet":
        return _count(spec.get("leaderWorkerTemplate") or {}, "size")
    if kind == "Job":
        return min(_count(spec, "parallelism"), _count(spec, "completions", default=_count(spec, "parallelism")))
    return _count(spec, "replicas")


def _count(spec: Mapping[str, Any], field: str, *, default: int = 1) -> int:
    """A count field as Kubernetes defaults it (absent: `default`), never below 1: a group of none cannot be stuck."""
    value = spec.get(field)
    return max(1, int(value)) if isinstance(value, int) else default


def gang_group(
    gang: Mapping[str, Any], pod: str, *, clique_levels: frozenset[str], owner_placement: str | None = None
) -> Group | None:
    """The part of a Grove PodGang that must share one clique with `pod`: the widest constraint KAI applies at the
    clique level that covers the pod's PodGroup, needing the sum of those PodGroups' `minReplicas` (what KAI
    gang-schedules). The constraints: the gang's own (Grove writes node label keys there, never its domain names;
    when it has none, KAI takes `kai.scheduler/topology-required-placement` from the gang's or its top owner's
    annotations, `owner_placement`), a scaling group's in `topologyConstraintGroupConfigs`, or the pod's PodClique's.
    None: nothing asks for one clique. The workload is the gang itself; the executor replaces it with the set that
    made it."""
    spec = gang.get("spec") or {}
    groups = {str(group.get("name")): group for group in spec.get("podgroups") or ()}
    own = next(
        (
            name
            for name, group in groups.items()
            if any(ref.get("name") == pod for ref in group.get("podReferences") or ())
        ),
        None,
    )

    def required(holder: Mapping[str, Any]) -> object:
        return ((holder.get("topologyConstraint") or {}).get("packConstraint") or {}).get("required")

    scopes = [list(groups)] if (required(spec) or owner_placement) in clique_levels else []
    scopes += [
        [str(name) for name in config.get("podGroupNames") or () if name in groups]
        for config in spec.get("topologyConstraintGroupConfigs") or ()
        if own in (config.get("podGroupNames") or ()) and required(config) in clique_levels
    ]
    if own is not None and required(groups[own]) in clique_levels:
        scopes.append([own])
    if not scopes:
        return None

    def needed(names: list[str]) -> int:
        return sum(int(groups[name].get("minReplicas") or 0) for name in names)

    widest = max(scopes, key=needed)
    members = frozenset(str(ref.get("name")) for name in widest for ref in groups[name].get("podReferences") or ())
    return Group(workload=gang, needed=needed(widest), members=members)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Why a group cannot fit: the Warning's message, and what makes two verdicts the same news (`news`): the free
    nodes of cliques the group does not use are left out, so other workloads coming and going post nothing."""

    message: str
    news: tuple[object, ...]


def cannot_fit(needed: int, found: Census, placed: Mapping[str, int] | None = None) -> Verdict | None:
    """Whether the group cannot have `needed` nodes in one clique (None: it can). `placed` counts the nodes where
    the group's pods already run, per clique: the rest must join them (KAI keeps a required placement's later pods
    in the domain of its running ones), so the clique holding most of them is the only one left; its room is its
    free nodes plus the group's own, which does not change while the group's pods are being placed."""
    needs = f"needs {needed} nodes in one clique"
    largest = found.largest_free()
    if placed:
        home, running = max(sorted(placed.items()), key=lambda item: item[1])
        room = running + found.free_in(home)
        if room >= needed:
            return None
        message = f"{needs}; clique {home}, where its pods run, has room for {room}"
        if largest is not None and largest.clique != home and largest.free_nodes >= needed:
            message += f"; clique {largest.clique} has {largest.free_nodes} free nodes for the whole group"
        return Verdict(message, news=(needed, home, room))
    if largest is not None and largest.free_nodes >= needed:
        return None
    if largest is None:
        return Verdict(f"{needs}; largest free clique has 0: no node is labelled {keys.GPU_CLIQUE_LABEL}", (needed,))
    return Verdict(f"{needs}; largest free clique has {largest.free_nodes}: clique {largest.clique}", news=(needed,))
