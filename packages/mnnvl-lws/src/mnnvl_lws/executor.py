"""Applies a plan through the shared domain writer: creates, ungates, fenced deletes, lifts marks, releases,
records events and metrics. Only the Lease holder calls it. Every write rests on a fresh read and carries a
precondition, so a stale snapshot can make it do less, never something unsafe."""

from __future__ import annotations

import logging

import prometheus_client

from mnnvl_api import events, keys
from mnnvl_api.decisions import domains as facts
from mnnvl_api.models import computedomain
from mnnvl_runtime import domains, kube, metrics

from . import planner

log = logging.getLogger(__name__)
SCOPE = keys.SCOPE_REPLICA

PODS_WITHOUT_CLAIM = prometheus_client.Counter(
    "mnnvl_pods_without_channel_claim_total",
    "Pods of opted-in workloads found running without their ComputeDomain channel claim (each counted once)",
    ["scope"],
    registry=metrics.REGISTRY,
)


class Executor:
    def __init__(self, writer: domains.DomainWriter) -> None:
        self.writer = writer

    async def apply(self, snapshot: planner.Snapshot, plan: planner.Plan) -> float | None:
        """Apply `plan`; returns in how many seconds this LWS must be looked at again (a deletion fence), if so."""
        namespace = snapshot.namespace
        workload = _workload_ref(snapshot)

        def ours(domain: facts.DomainFacts) -> bool:
            return planner.is_ours(domain, snapshot.lws_name)

        come_back: list[float] = []
        for domain in plan.create:
            manifest = computedomain.manifest(
                name=domain.name, namespace=namespace, claim_template=domain.claim_template, labels=domain.labels
            )
            if await self.writer.create(manifest, workload=workload):
                group = domain.labels[keys.GROUP_INDEX_LABEL]
                await self.writer.event(
                    workload,
                    events.COMPUTE_DOMAIN_CREATED_REASON,
                    f"Created ComputeDomain {domain.name} for group {group}",
                )
        for pod in plan.ungate:
            await self.writer.ungate(namespace, pod.name, uid=pod.uid, workload=workload)
        for name in plan.uncondemn:
            await self.writer.uncondemn(namespace, name, belongs=ours, workload=workload)
        for name in plan.delete:
            deletion = await self.writer.fenced_delete(namespace, name, belongs=ours, workload=workload)
            if deletion.come_back_after is not None:
                come_back.append(deletion.come_back_after)
            if deletion.deleted:
                reason = (
                    "workload_deleted"
                    if snapshot.workload is None or snapshot.workload.uid != snapshot.domains[name].owner_uid
                    else "obsolete"
                )
                metrics.DOMAINS_DELETED.labels(scope=SCOPE, reason=reason).inc()
                await self.writer.event(
                    workload,
                    events.COMPUTE_DOMAIN_DELETED_REASON,
                    f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod uses it",
                )
        for name in plan.release:
            await self.writer.release(namespace, name, belongs=ours, workload=workload)
        for warning in plan.warnings:
            posted = await self.writer.warn_once(workload, warning.reason, warning.message)
            if posted and warning.reason == events.POD_WITHOUT_CHANNEL_CLAIM_REASON:
                PODS_WITHOUT_CLAIM.labels(scope=SCOPE).inc()
        return min(come_back) if come_back else None


def _workload_ref(snapshot: planner.Snapshot) -> kube.Object | None:
    if snapshot.workload is None:
        return None
    return domains.involved(
        keys.LWS_API_VERSION, "LeaderWorkerSet", snapshot.namespace, snapshot.lws_name, snapshot.workload.uid
    )
