"""mnnvl-ds as a scope controller (`mnnvl_runtime.scopes`): DisaggregatedSet slices, one ComputeDomain per
(slice, revision)."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_api.decisions import plans
from mnnvl_runtime import controller, preflight, scopes

from . import admission, planner, retries, state


def created(domain: plans.DomainToCreate) -> str:
    labels = domain.labels
    return (
        f"Created ComputeDomain {domain.name} for slice {labels[keys.SLICE_LABEL]} at revision "
        f"{labels[keys.REVISION_LABEL]}"
    )


def deleted(snapshot: planner.Snapshot, name: str) -> str:
    domain = snapshot.domains[name]
    return (
        f"Deleted ComputeDomain {name}: no LeaderWorkerSet of slice {domain.slice} at revision {domain.revision} "
        "remains and no pod uses it"
    )


def upstream_retries(context: controller.Context) -> retries.UpstreamRetries:
    return retries.UpstreamRetries(context.client, may_write=context.elector.may_write)


SCOPE: scopes.Scope[planner.Snapshot, state.Stores] = scopes.Scope(
    name=planner.MANAGER,
    scope=keys.SCOPE_SLICE,
    workload_api_version=keys.DS_API_VERSION,
    workload_kind=keys.DS_KIND,
    registry=state.registry,
    stores=state.STORES,
    plan=planner.plan,
    is_ours=planner.is_ours,
    created=created,
    deleted=deleted,
    admit_pod=admission.admit,
    # The webhooks read a pod's LeaderWorkerSet and its DisaggregatedSet afresh when the stores do not know them.
    reads=(
        preflight.Access(group=keys.DS_GROUP, resource=keys.DS_PLURAL, verbs=("get",)),
        preflight.Access(group=keys.LWS_GROUP, resource=keys.LWS_PLURAL, verbs=("get",)),
    ),
    follow_up=upstream_retries,
)
CONTROLLER = scopes.register(SCOPE)
