"""Applies a replica-scope plan through the shared executor (`mnnvl_runtime.executing`): which domains the
plan may touch, and what the events on the LeaderWorkerSet say."""

from __future__ import annotations

from mnnvl_api import keys
from mnnvl_api.decisions import domains as facts
from mnnvl_api.decisions import plans
from mnnvl_runtime import domains, executing, kube

from . import planner


class Executor:
    def __init__(self, writer: domains.DomainWriter) -> None:
        self.applying = executing.Executor(writer)

    async def apply(self, snapshot: planner.Snapshot, plan: plans.Plan) -> float | None:
        """Apply `plan`; returns in how many seconds this LWS must be looked at again (a deletion fence), if so."""

        def ours(domain: facts.DomainFacts) -> bool:
            return planner.is_ours(domain, snapshot.lws_name)

        def created(domain: plans.DomainToCreate) -> str:
            return f"Created ComputeDomain {domain.name} for group {domain.labels[keys.GROUP_INDEX_LABEL]}"

        def deleted(name: str) -> tuple[str, str]:
            gone = snapshot.workload is None or snapshot.workload.uid != snapshot.domains[name].owner_uid
            return (
                "workload_deleted" if gone else "obsolete",
                f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod uses it",
            )

        workload = executing.Workload(
            namespace=snapshot.namespace,
            reference=_workload_ref(snapshot),
            belongs=ours,
            created=created,
            deleted=deleted,
        )
        return await self.applying.apply(plan, workload)


def _workload_ref(snapshot: planner.Snapshot) -> kube.Object | None:
    if snapshot.workload is None:
        return None
    return domains.involved(
        keys.LWS_API_VERSION, "LeaderWorkerSet", snapshot.namespace, snapshot.lws_name, snapshot.workload.uid
    )
