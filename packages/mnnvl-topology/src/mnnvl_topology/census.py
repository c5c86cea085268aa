"""Pure decisions of the clique census: what a node and a pod are to it, and the count per clique. No I/O, no
clock."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from mnnvl_api import keys
from mnnvl_api.decisions import injection, ownership, references

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
class PodUsage:
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


def pod_facts(pod: Mapping[str, Any]) -> PodUsage:
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
    return PodUsage(
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


def holds_channel(pod: PodUsage, channel_templates: frozenset[tuple[str, str]]) -> bool:
    """Whether the pod holds a ComputeDomain channel: mnnvl's channel claim, or any claim generated from a
    ComputeDomain's channel template (a domain made by hand)."""
    return pod.channel_claim or any((pod.namespace, template) in channel_templates for template in pod.templates)


def channel_nodes(pods: Iterable[PodUsage], channel_templates: frozenset[tuple[str, str]]) -> set[str]:
    return {pod.node for pod in pods if pod.node is not None and holds_channel(pod, channel_templates)}


def gpu_nodes(pods: Iterable[PodUsage]) -> set[str]:
    return {pod.node for pod in pods if pod.node is not None and pod.gpu}


def in_placed_group(pod: PodUsage) -> bool:
    """Whether the pod belongs to a group that may have asked for one clique and takes a node of it: a slice or
    replica scope pod (a DisaggregatedSet slice, an opted-in LWS) or one KAI places (a required placement is on its
    workload), asking for GPUs or holding a claim (a channel, DRA GPUs; one such pod per node in the driver's mode:
    the check counts nodes). Pods without either are no concern of a clique's room."""
    takes_a_node = pod.gpu or pod.channel_claim or bool(pod.templates)
    return (pod.scope in (keys.SCOPE_SLICE, keys.SCOPE_REPLICA) or pod.kai) and takes_a_node


def may_need_one_clique(pod: PodUsage) -> bool:
    """Whether the pod is unschedulable and its group may have asked for one clique."""
    return pod.unschedulable and in_placed_group(pod)


def group_key(pod: PodUsage) -> tuple[str, ...]:
    """The pods placed together with this one, as far as its own labels tell: its slice, its LWS replica, its
    Grove gang, else the pods of its controlling owner (a StatefulSet's, a Job's)."""
    if pod.slice is not None:
        return ("slice", *pod.slice)
    if pod.lws is not None:
        return ("lws", pod.lws, pod.group_index or "")
    if pod.gang is not None:
        return ("podgang", pod.gang)
    return ("owner", *(pod.owner or ("", "", pod.name)))


def placed_member(pod: PodUsage) -> bool:
    """Whether the pod runs on a node as a member of a group that may need one clique: the group's other pods must
    join it in that node's clique."""
    return pod.live and pod.node is not None and in_placed_group(pod)


def worth_keeping(pod: PodUsage) -> bool:
    """Whether the census or the fit check needs the pod: it holds a claim (a channel, a slice's size) or a GPU,
    its group may need one clique, or it is placed in such a group. Every other pod is forgotten at once."""
    return pod.channel_claim or bool(pod.templates) or pod.gpu or may_need_one_clique(pod) or placed_member(pod)


def census_view(pod: PodUsage | None) -> tuple[object, ...] | None:
    """The facts of a pod the census reads (None: it counts on no node); the census is computed again only
    when these change."""
    return (
        None
        if pod is None or pod.node is None
        else (pod.namespace, pod.node, pod.templates, pod.channel_claim, pod.gpu)
    )
