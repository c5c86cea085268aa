"""Adds and releases the protection finalizer, guarded by JSON-patch `test`s; releases only after a fresh
read confirms that no non-terminal pod references the domain's claim template."""

from __future__ import annotations

import datetime
import logging

from mnnvl_api import keys
from mnnvl_api.decisions import domains, references
from mnnvl_runtime import kube

from . import planner, telemetry

log = logging.getLogger(__name__)


def _path(domain: domains.DomainFacts) -> str:
    return kube.path_of(
        keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, namespace=domain.namespace, name=domain.name
    )


async def apply(client: kube.Kube, domain: domains.DomainFacts, action: planner.Action) -> None:
    if action is planner.Action.PROTECT:
        await _protect(client, domain)
    elif action is planner.Action.RELEASE:
        await _release(client, domain)


async def _protect(client: kube.Kube, domain: domains.DomainFacts) -> None:
    def add(current: kube.Object) -> kube.JsonPatch | None:
        meta = current["metadata"]
        finalizers = meta.get("finalizers")
        if meta.get("deletionTimestamp") or keys.PROTECTION_FINALIZER in (finalizers or []):
            return None  # a finalizer cannot be added to an object being deleted
        if finalizers is None:
            return [{"op": "add", "path": "/metadata/finalizers", "value": [keys.PROTECTION_FINALIZER]}]
        return [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": keys.PROTECTION_FINALIZER},
        ]

    if await client.amodify(_path(domain), add) is not None:
        log.info("protection added", extra={"namespace": domain.namespace, "compute_domain": domain.name})


async def _release(client: kube.Kube, domain: domains.DomainFacts) -> None:
    pods = await client.alist_objects("v1", "pods", namespace=domain.namespace)
    users = references.users_of(pods, domain.claim_template)
    if users:
        log.info(
            "compute domain still in use", extra={"compute_domain": domain.name, "pods": users[: planner.NAMED_PODS]}
        )
        return

    def remove(current: kube.Object) -> kube.JsonPatch | None:
        finalizers = current["metadata"].get("finalizers") or []
        if keys.PROTECTION_FINALIZER not in finalizers or not current["metadata"].get("deletionTimestamp"):
            return None  # nothing to release, or a live successor of the same name: never unprotect it
        pointer = f"/metadata/finalizers/{finalizers.index(keys.PROTECTION_FINALIZER)}"
        return [{"op": "test", "path": pointer, "value": keys.PROTECTION_FINALIZER}, {"op": "remove", "path": pointer}]

    released = await client.amodify(_path(domain), remove)
    if released is None:
        return
    deleted_at = released["metadata"].get("deletionTimestamp")
    waited = 0.0
    if deleted_at:
        since = datetime.datetime.fromisoformat(deleted_at.replace("Z", "+00:00"))
        waited = max((datetime.datetime.now(datetime.UTC) - since).total_seconds(), 0.0)
    telemetry.RELEASE_WAIT.observe(waited)
    log.info(
        "protection released",
        extra={"namespace": domain.namespace, "compute_domain": domain.name, "waited_seconds": waited},
    )
