"""Applies a plan: creates, ungates, deletes and releases, records events and metrics. Only the Lease holder
calls it. Every write is guarded (create-if-absent, JSON-patch `test`, a fresh check before deleting), so a
stale snapshot can make it do less, never something unsafe."""

from __future__ import annotations

import datetime
import logging

from mnnvl_api import events, keys
from mnnvl_api.decisions import injection, references
from mnnvl_api.models import computedomain
from mnnvl_runtime import events as posting
from mnnvl_runtime import kube, metrics

from . import planner

log = logging.getLogger(__name__)
SCOPE = keys.SCOPE_REPLICA
CD_API = keys.COMPUTE_DOMAIN_API_VERSION
LWS_API = keys.LWS_API_VERSION


class Executor:
    def __init__(self, client: kube.Kube, component: str) -> None:
        self.client = client
        self.component = component
        self._warned: set[tuple[str, str]] = set()  # (workload uid, message): warn once, not every pass

    async def apply(self, snapshot: planner.Snapshot, plan: planner.Plan) -> None:
        namespace = snapshot.namespace
        for domain in plan.create:
            await self._create(snapshot, domain)
        for pod in plan.ungate:
            await self._ungate(namespace, pod)
        for name in plan.delete:
            await self._delete(snapshot, name)
        for name in plan.release:
            await self._release(namespace, name)
        for warning in plan.warnings:
            await self._warn(snapshot, warning)

    def _workload_ref(self, snapshot: planner.Snapshot) -> kube.Object | None:
        if snapshot.workload is None:
            return None
        return {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": {"name": snapshot.lws_name, "namespace": snapshot.namespace, "uid": snapshot.workload.uid},
        }

    async def _event(self, snapshot: planner.Snapshot, reason: str, message: str, *, warning: bool = False) -> None:
        involved = self._workload_ref(snapshot)
        if involved is not None:
            event = posting.event_for(
                involved, reason=reason, message=message, warning=warning, component=self.component
            )
            await posting.post(self.client, event)

    async def _create(self, snapshot: planner.Snapshot, domain: planner.DomainToCreate) -> None:
        manifest = computedomain.manifest(
            name=domain.name, namespace=domain.namespace, claim_template=domain.claim_template, labels=domain.labels
        )
        try:
            await self.client.acreate(manifest, keys.COMPUTE_DOMAIN_PLURAL)
        except kube.ApiError as error:
            if error.status == 409:
                return  # created meanwhile (by us, or someone else: the next pass tells which)
            raise
        metrics.DOMAINS_CREATED.labels(scope=SCOPE).inc()
        log.info("compute domain created", extra={"namespace": domain.namespace, "compute_domain": domain.name})
        await self._event(
            snapshot,
            events.COMPUTE_DOMAIN_CREATED_REASON,
            f"Created ComputeDomain {domain.name} for group {domain.labels[keys.GROUP_INDEX_LABEL]}",
        )

    async def _ungate(self, namespace: str, pod: str) -> None:
        path = kube.path_of("v1", "pods", namespace=namespace, name=pod)
        updated = await self.client.amodify(path, lambda current: injection.scheduling_gate_removal(current["spec"]))
        if updated is None:
            return
        created = datetime.datetime.fromisoformat(updated["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        waited = (datetime.datetime.now(datetime.UTC) - created).total_seconds()
        metrics.GATE_DURATION.labels(scope=SCOPE).observe(max(waited, 0.0))
        log.info("pod ungated", extra={"namespace": namespace, "pod": pod, "waited_seconds": round(waited, 3)})

    async def _delete(self, snapshot: planner.Snapshot, name: str) -> None:
        domain = snapshot.domains[name]
        # The snapshot comes from watch caches; confirm with a fresh read that no pod uses the domain.
        pods = await self.client.alist_objects("v1", "pods", namespace=snapshot.namespace)
        users = references.users_of(pods, domain.claim_template)
        if users:
            log.info("compute domain still in use", extra={"compute_domain": name, "pods": users[:5]})
            return
        path = kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=snapshot.namespace, name=name)
        if not await self.client.adelete(path):
            return
        reason = (
            "workload_deleted" if snapshot.workload is None or snapshot.workload.uid != domain.owner_uid else "obsolete"
        )
        metrics.DOMAINS_DELETED.labels(scope=SCOPE, reason=reason).inc()
        log.info(
            "compute domain deleted", extra={"namespace": snapshot.namespace, "compute_domain": name, "reason": reason}
        )
        await self._event(
            snapshot,
            events.COMPUTE_DOMAIN_DELETED_REASON,
            f"Deleted ComputeDomain {name}: its group incarnation is gone and no pod references it",
        )

    async def _release(self, namespace: str, name: str) -> None:
        path = kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace, name=name)

        def without_finalizer(current: kube.Object) -> kube.JsonPatch | None:
            finalizers = current["metadata"].get("finalizers") or []
            if keys.PROTECTION_FINALIZER not in finalizers:
                return None
            pointer = f"/metadata/finalizers/{finalizers.index(keys.PROTECTION_FINALIZER)}"
            return [
                {"op": "test", "path": pointer, "value": keys.PROTECTION_FINALIZER},
                {"op": "remove", "path": pointer},
            ]

        if await self.client.amodify(path, without_finalizer) is not None:
            log.info("protection released", extra={"namespace": namespace, "compute_domain": name})

    async def _warn(self, snapshot: planner.Snapshot, warning: planner.Warning) -> None:
        uid = snapshot.workload.uid if snapshot.workload else ""
        if (uid, warning.message) in self._warned:
            return
        self._warned.add((uid, warning.message))
        log.warning(
            "unexpected compute domain owner", extra={"namespace": snapshot.namespace, "reason": warning.reason}
        )
        await self._event(snapshot, warning.reason, warning.message, warning=True)
