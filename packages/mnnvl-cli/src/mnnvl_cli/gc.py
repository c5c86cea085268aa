"""`kubectl mnnvl gc`: the ComputeDomains mnnvl made for workloads that are gone (deleted while the gate was off,
so no controller collects them), with the pods still using each; with `--apply`, deleted through the controllers'
own fenced deletion and released once no pod uses them.

Only domains the API server records as made by mnnvl's scope controllers (`DomainFacts.managed`) are considered,
and a domain is an orphan only when no LeaderWorkerSet or DisaggregatedSet listed *after* it has its owner uid:
a workload created after the domain list cannot make its own new domain look orphaned."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence

from mnnvl_api import keys
from mnnvl_api.decisions import domains
from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import domain_writer, kube

from . import reading, release, render
from .snapshot import Snapshot, labels_of, users_of

#: The fence when no installed controller's Configuration says otherwise: the controllers' own default.
DEFAULT_FENCE_SECONDS = configuration_file.minimum_fence_seconds(
    configuration_file.DEFAULT_API_SERVER_REQUEST_TIMEOUT_SECONDS
)
METRICS_SCOPE = "cli"
#: How often a release that met a concurrent write is tried again, and how long apart.
RELEASE_ATTEMPTS = 20
RELEASE_RETRY_SECONDS = 0.5


class Action(enum.Enum):
    DELETE = "delete"  # no pod uses it: fenced deletion, then release
    RELEASE = "release"  # already being deleted, no pod uses it: release the protection finalizer
    KEEP = "keep"  # pods still use it: nothing, until they are gone


class Orphan(render.Report):
    namespace: str
    name: str
    uid: str
    manager: str
    owner_uid: str
    workload: str | None
    deleting: bool
    users: list[str]
    action: Action


def orphans(snapshot: Snapshot) -> list[Orphan]:
    """The managed domains of the snapshot whose workload (by owner uid) is not among its workloads."""
    workload_uids = {
        str(w["metadata"].get("uid")) for w in [*snapshot.leaderworkersets, *(snapshot.disaggregatedsets or ())]
    }
    found = []
    for domain in snapshot.domains or ():
        facts = domains.facts_of(domain)
        if not facts.managed or facts.owner_uid in workload_uids:
            continue
        users = users_of(snapshot, domain)
        action = Action.KEEP if users else Action.RELEASE if facts.deleting else Action.DELETE
        if facts.deleting and not facts.protected:
            continue  # nothing of ours holds it: the driver finishes the deletion
        found.append(
            Orphan(
                namespace=facts.namespace,
                name=facts.name,
                uid=facts.uid,
                manager=str(facts.managed_by),
                owner_uid=str(facts.owner_uid),
                workload=labels_of(domain).get(keys.WORKLOAD_NAME_LABEL),
                deleting=facts.deleting,
                users=users,
                action=action,
            )
        )
    return sorted(found, key=lambda o: (o.namespace, o.name))


def read(client: kube.Kube, namespace: str | None) -> Snapshot:
    """The domains first, then the workloads and pods (`reading.read_cluster` lists in that order)."""
    snapshot = reading.read_cluster(client, namespace)
    if snapshot.domains is None:
        raise reading.UserError(reading.no_domain_api_line())
    return snapshot


def fence_seconds(controllers: Sequence[release.InstalledController]) -> float:
    """The longest deletion fence any installed scope controller uses (at least the default's lower bound)."""
    fences = [
        c.configuration.compute_domain.deletion_fence_seconds
        for c in controllers
        if c.configuration is not None and c.controller in keys.DOMAIN_MANAGERS
    ]
    return max(fences, default=DEFAULT_FENCE_SECONDS)


def belongs_to(orphan: Orphan) -> domain_writer.Belongs:
    """The domain read afresh is still this very orphan: same uid (not a same-named successor), ours, same owner."""
    return lambda facts: facts.uid == orphan.uid and facts.managed and facts.owner_uid == orphan.owner_uid


async def collect(client: kube.Api, found: Sequence[Orphan], *, fence: float) -> dict[str, str]:
    """Delete (fenced) and release every orphan no pod uses; returns `namespace/name` → what became of it."""
    writer = domain_writer.DomainWriter(client, component=keys.CLI, scope=METRICS_SCOPE, fence_seconds=fence)
    acted_on = [o for o in found if o.action is not Action.KEEP]
    workload_uids = await _workload_uids(client, {o.namespace for o in acted_on})
    return dict(await asyncio.gather(*(_collect_one(writer, o, workload_uids) for o in acted_on)))


async def _workload_uids(client: kube.Api, namespaces: set[str]) -> set[str]:
    """Afresh, just before writing: the uids of the workloads in these namespaces (one list per kind each)."""
    uids: set[str] = set()
    for namespace in sorted(namespaces):
        for api_version, plural in ((keys.LWS_API_VERSION, keys.LWS_PLURAL), (keys.DS_API_VERSION, keys.DS_PLURAL)):
            try:
                async for page in kube.pages(client, api_version, plural, namespace=namespace):
                    uids |= {str(w["metadata"].get("uid")) for w in page.items}
            except kube.ApiError as error:
                if error.status != 404:  # a kind not served has no workloads
                    raise
    return uids


async def _collect_one(writer: domain_writer.DomainWriter, orphan: Orphan, workload_uids: set[str]) -> tuple[str, str]:
    key = f"{orphan.namespace}/{orphan.name}"
    if orphan.owner_uid in workload_uids:
        return key, "kept: its workload exists after all"
    belongs = belongs_to(orphan)
    if orphan.action is Action.DELETE:
        while True:
            step = await writer.fenced_delete(orphan.namespace, orphan.name, belongs=belongs, workload=None)
            if step.deleted:
                break
            if step.come_back_after is None:  # in use again, gone, or no longer this orphan
                users = await _users(writer, orphan)
                return key, f"kept: used by {', '.join(users)}" if users else "left: it changed or went meanwhile"
            await asyncio.sleep(step.come_back_after)
    return key, await _release(writer, orphan, belongs)


async def _release(writer: domain_writer.DomainWriter, orphan: Orphan, belongs: domain_writer.Belongs) -> str:
    """Release the deleted orphan's protection once no pod uses it; a release that met a concurrent write (the
    driver's own finalizer or status) is tried again on a fresh read."""
    for _ in range(RELEASE_ATTEMPTS):
        if await writer.release(orphan.namespace, orphan.name, belongs=belongs, workload=None) is not None:
            return "deleted and released"
        fresh = await writer.client.aget(
            keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, orphan.name, namespace=orphan.namespace
        )
        facts = None if fresh is None else domains.facts_of(fresh)
        if facts is None or not belongs(facts) or not facts.protected:
            return "deleted" if orphan.action is Action.DELETE else "released by another writer meanwhile"
        users = await writer.fresh_users(facts)
        if users:
            return f"deleting, protection kept: used by {', '.join(users)}"
        await asyncio.sleep(RELEASE_RETRY_SECONDS)
    return "deleting, protection not released yet (the domain kept changing): run gc again"


async def _users(writer: domain_writer.DomainWriter, orphan: Orphan) -> list[str]:
    fresh = await writer.client.aget(
        keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, orphan.name, namespace=orphan.namespace
    )
    return [] if fresh is None else await writer.fresh_users(domains.facts_of(fresh))


# --- output ----------------------------------------------------------------------------------------------


def as_table(found: Sequence[Orphan], *, apply: bool, outcome: dict[str, str] | None = None) -> str:
    if not found:
        return "No orphaned ComputeDomain: every domain mnnvl made has its workload."
    rows = [["NAMESPACE", "COMPUTEDOMAIN", "MADE BY", "WORKLOAD (GONE)", "ACTION", "USED BY"]]
    for orphan in found:
        key = f"{orphan.namespace}/{orphan.name}"
        if outcome is not None and key in outcome:
            action = outcome[key]
        elif orphan.action is Action.KEEP:
            action = "keep (in use)"
        else:
            action = f"{'' if apply else 'would '}{orphan.action.value}"
        rows.append(
            [
                orphan.namespace,
                orphan.name,
                orphan.manager,
                orphan.workload or "-",
                action,
                ", ".join(orphan.users) or "-",
            ]
        )
    hint = "" if apply else "\n\nDry run: nothing was changed. Run with --apply to delete what no pod uses."
    return "\n".join(render.table(rows)) + hint
