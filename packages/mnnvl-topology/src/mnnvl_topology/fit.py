"""Pure decisions of the fit check: which groups must fit in one clique, how many nodes they need, and whether any
clique has them. No I/O, no clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_api.models import configuration

from . import census


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
    None: nothing asks for one clique. The workload is the gang itself; `fit_warner` replaces it with the set that
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


def cannot_fit(needed: int, found: census.Census, placed: Mapping[str, int] | None = None) -> Verdict | None:
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
