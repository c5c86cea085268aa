"""Placement advice: an IMEX channel only connects GPUs within one NVLink clique, so pods sharing a ComputeDomain
must be placed within one clique. Upstream places them when asked (`exclusive-topology` on an LWS or a
DisaggregatedSet role, `spec.placementPolicy` on a DisaggregatedSet), and so does KAI Scheduler for a workload whose
topology annotations require the clique label; mnnvl warns when nothing asks, and never refuses: the workload may
be placed by other means (node selectors, another topology-aware scheduler)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .. import errors, keys
from ..models import disaggregatedset

#: DisaggregatedSet placement policies that keep every pod of a slice within one value of their topology key.
SLICE_PLACEMENTS: Final = ("ExclusiveSlice", "ExclusiveTopology")
_WHY = "an IMEX channel only connects GPUs within one NVLink clique"


def places_slices_on_cliques(ds: disaggregatedset.DisaggregatedSet) -> bool:
    """Whether upstream places each slice of `ds` within one NVLink clique."""
    policy = ds.spec.placement_policy
    return policy is not None and policy.type in SLICE_PLACEMENTS and policy.topology == keys.GPU_CLIQUE_LABEL


def slice_placement_warning(ds: disaggregatedset.DisaggregatedSet) -> str | None:
    """A warning for slice ComputeDomains without a placement policy on the clique label (None: placed)."""
    if places_slices_on_cliques(ds):
        return None
    return (
        f"spec.placementPolicy: slice ComputeDomains are enabled, but no placement policy keeps each slice within "
        f"one {keys.GPU_CLIQUE_LABEL}: {_WHY}, so a slice spread over several cliques cannot use its ComputeDomain; "
        f"set spec.placementPolicy to type {SLICE_PLACEMENTS[0]} (or {SLICE_PLACEMENTS[1]}) with topology "
        f"{keys.GPU_CLIQUE_LABEL}"
    )


def has_placement_policy(ds: disaggregatedset.DisaggregatedSet) -> bool:
    """Whether `ds` asks upstream for any placement; upstream then refuses `exclusive-topology` on its roles."""
    policy = ds.spec.placement_policy
    return policy is not None and policy.type != "None"


def asks_kai_for_one_clique(annotations: Mapping[str, str]) -> bool:
    """Whether a workload's annotations have KAI place each of its gangs (an LWS replica) within one clique: a
    Topology named and the clique label required (a v0.17+ alias of that label cannot be told apart here)."""
    return (
        bool(annotations.get(keys.KAI_TOPOLOGY_ANNOTATION))
        and annotations.get(keys.KAI_REQUIRED_PLACEMENT_ANNOTATION) == keys.GPU_CLIQUE_LABEL
    )


def replica_placement_warning(
    annotations: Mapping[str, str], path: str, *, placed: bool, exclusive_topology_allowed: bool = True
) -> str | None:
    """A warning for per-replica ComputeDomains whose groups nothing places within one clique (None: placed).

    `annotations` are the workload's (an LWS's, or a DisaggregatedSet role's) at `path`; `placed` says the
    workload is placed by other means (its DisaggregatedSet's placement policy on the clique label). Where
    `exclusive-topology` is not allowed (a DisaggregatedSet with a placement policy), the fix is that policy's
    topology."""
    if placed or keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION in annotations or asks_kai_for_one_clique(annotations):
        return None
    field = errors.annotation_path(path, keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION)
    fix = (
        f"set {keys.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION}: {keys.GPU_CLIQUE_LABEL}"
        if exclusive_topology_allowed
        else f"set spec.placementPolicy.topology to {keys.GPU_CLIQUE_LABEL}"
    )
    return (
        f"{field}: per-replica ComputeDomains are enabled, but nothing keeps each replica within one "
        f"{keys.GPU_CLIQUE_LABEL}: {_WHY}, so a replica spread over several cliques cannot use its ComputeDomain; "
        f"{fix}"
    )
