"""Adds the protection finalizer (guarded by the resourceVersion it was computed from, so a finalizer another
controller adds meanwhile is never replaced) and releases it through the shared guarded release."""

from __future__ import annotations

import datetime
import logging

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_runtime import domain_writer, kube

from . import planner, telemetry

log = logging.getLogger(__name__)


async def apply(writer: domain_writer.DomainWriter, domain: domains.DomainFacts, action: planner.Action) -> None:
    if action is planner.Action.PROTECT:
        await _protect(writer, domain)
    elif action is planner.Action.RELEASE:
        await _release(writer, domain)


def protection_patch(current: kube.Object) -> kube.JsonPatch | None:
    """Add the protection finalizer to a managed, live domain, tested against the version it was read at."""
    meta = current["metadata"]
    finalizers = meta.get("finalizers")
    if meta.get("deletionTimestamp") or keys.PROTECTION_FINALIZER in (finalizers or []):
        return None  # a finalizer cannot be added to an object being deleted
    if not domains.facts_of(current).managed:
        return None
    version = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
    if finalizers is None:
        return [*version, {"op": "add", "path": "/metadata/finalizers", "value": [keys.PROTECTION_FINALIZER]}]
    return [*version, {"op": "add", "path": "/metadata/finalizers/-", "value": keys.PROTECTION_FINALIZER}]


async def _protect(writer: domain_writer.DomainWriter, domain: domains.DomainFacts) -> None:
    path = domain_writer.domain_path(domain.namespace, domain.name)
    target = f"ComputeDomain {domain.name}"
    if await writer.guarded("protect", target, None, lambda: writer.client.amodify(path, protection_patch)):
        log.info("protection added", extra={"namespace": domain.namespace, "compute_domain": domain.name})


async def _release(writer: domain_writer.DomainWriter, domain: domains.DomainFacts) -> None:
    deleted_at = await writer.release(domain.namespace, domain.name, belongs=_managed, workload=None)
    if deleted_at is None:
        return
    since = datetime.datetime.fromisoformat(deleted_at.replace("Z", "+00:00"))
    telemetry.RELEASE_WAIT.observe(max((datetime.datetime.now(datetime.UTC) - since).total_seconds(), 0.0))


def _managed(domain: domains.DomainFacts) -> bool:
    return domain.managed
