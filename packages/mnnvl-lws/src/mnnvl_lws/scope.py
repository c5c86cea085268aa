"""mnnvl-lws as a scope controller (`mnnvl_runtime.scopes`): LeaderWorkerSet replicas, one ComputeDomain per
group incarnation."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_api.decisions import plans
from mnnvl_runtime import preflight, scopes

from . import admission, planner, state


def created(domain: plans.DomainToCreate) -> str:
    return f"Created ComputeDomain {domain.name} for group {domain.labels[keys.GROUP_INDEX_LABEL]}"


def deleted(snapshot: planner.Snapshot, name: str) -> str:
    return f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod uses it"


SCOPE: scopes.Scope[planner.Snapshot, state.Stores] = scopes.Scope(
    name=planner.MANAGER,
    scope=keys.SCOPE_REPLICA,
    workload_api_version=keys.LWS_API_VERSION,
    workload_kind="LeaderWorkerSet",
    registry=state.registry,
    stores=state.STORES,
    plan=planner.plan,
    is_ours=planner.is_ours,
    created=created,
    deleted=deleted,
    admit_pod=admission.admit,
    # The pod webhook binds a worker to its leader through the worker's StatefulSet, read afresh; it tells whether
    # a leader's template revision was opted in from upstream's ControllerRevisions (watched, and listed afresh).
    reads=(
        preflight.Access(group="apps", resource="statefulsets", verbs=("get",)),
        preflight.Access(group="apps", resource="controllerrevisions", verbs=("list", "watch")),
    ),
)
CONTROLLER = scopes.register(SCOPE)
