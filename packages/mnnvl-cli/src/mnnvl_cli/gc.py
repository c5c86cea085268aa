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
from .snapshot import Object, Snapshot, labels_of, live_workload_uids, users_of

#: The fence when no installed controller's Configuration says otherwise: the controllers' own default.
DEFAULT_FENCE_SECONDS = configuration_file.minimum_fence_seconds(
    configuration_file.DEFAULT_API_SERVER_REQUEST_TIMEOUT_SECONDS
)
METRICS_SCOPE = "cli"
#: How an outcome of `collect` starts when a write failed.
FAILED = "failed: "
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
    workload_uids = live_workload_uids([*snapshot.leaderworkersets, *(snapshot.disaggregatedsets or ())])
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


class Fence(render.Report):
    seconds: float
    #: Where it comes from, for the user: the controllers' Configurations, or the default and why.
    source: str


def fence_of(controllers: Sequence[release.InstalledController] | None) -> Fence:
    """The longest deletion fence any installed scope controller uses; the controllers' default when none can be
    read (the reason is said: a controller configured for a longer fence would want the longer one)."""
    fences = {
        c.controller: c.configuration.compute_domain.deletion_fence_seconds
        for c in controllers or ()
        if c.configuration is not None and c.controller in keys.DOMAIN_MANAGERS
    }
    if fences:
        return Fence(seconds=max(fences.values()), source=f"the longest of {', '.join(sorted(fences))}'s Configuration")
    why = "no scope controller's Configuration is installed" if controllers is not None else "you may not read them"
    return Fence(seconds=DEFAULT_FENCE_SECONDS, source=f"the controllers' default ({why})")


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
    """Afresh, just before writing: the live workload uids in these namespaces (one list per kind each)."""
    found: list[Object] = []
    for namespace in sorted(namespaces):
        for api_version, plural in ((keys.LWS_API_VERSION, keys.LWS_PLURAL), (keys.DS_API_VERSION, keys.DS_PLURAL)):
            try:
                async for page in kube.pages(client, api_version, plural, namespace=namespace):
                    found += page.items
            except kube.ApiError as error:
                if error.status != 404:  # a kind not served has no workloads
                    raise
    return live_workload_uids(found)


async def _collect_one(writer: domain_writer.DomainWriter, orphan: Orphan, workload_uids: set[str]) -> tuple[str, str]:
    """What became of one orphan; a write the API server refused is this orphan's outcome, never the run's end."""
    key = f"{orphan.namespace}/{orphan.name}"
    try:
        return key, await _collect(writer, orphan, workload_uids)
    except kube.ApiError as error:
        denial = kube.admission_denial(error)
        if denial is not None:  # the guardian in Deny mode: it sees a pod using the domain
            return key, f"kept: refused at admission: {denial}"
        return key, f"{FAILED}{reading.explained(error, f'writing ComputeDomain {orphan.name}')}"


async def _collect(writer: domain_writer.DomainWriter, orphan: Orphan, workload_uids: set[str]) -> str:
    if orphan.owner_uid in workload_uids:
        return "kept: its workload exists after all"
    belongs = belongs_to(orphan)
    if orphan.action is Action.DELETE:
        while True:
            step = await writer.fenced_delete(orphan.namespace, orphan.name, belongs=belongs, workload=None)
            if step.deleted:
                break
            if step.come_back_after is None:  # in use again, gone, or no longer this orphan
                users = await _users(writer, orphan)
                return f"kept: used by {', '.join(users)}" if users else "left: it changed or went meanwhile"
            await asyncio.sleep(step.come_back_after)
    return await _release(writer, orphan, belongs)


async def lift_own_marks(client: kube.Api, found: Sequence[Orphan]) -> list[str]:
    """After an interrupted `--apply`: lift the deletion marks `kubectl mnnvl` set on these orphans (pods may be
    admitted onto them again); returns the domains whose mark was lifted."""
    writer = domain_writer.DomainWriter(client, component=keys.CLI, scope=METRICS_SCOPE, fence_seconds=0)
    lifted = []
    for orphan in found:
        fresh = await client.aget(
            keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, orphan.name, namespace=orphan.namespace
        )
        facts = None if fresh is None else domains.facts_of(fresh)
        if facts is None or facts.deleting or not facts.condemned_mark.startswith(f"{keys.CLI}/"):
            continue
        await writer.uncondemn(orphan.namespace, orphan.name, belongs=belongs_to(orphan), workload=None)
        lifted.append(f"{orphan.namespace}/{orphan.name}")
    return lifted


def failed(outcome: dict[str, str]) -> list[str]:
    """The orphans whose collection failed (their outcome says why)."""
    return [key for key, text in outcome.items() if text.startswith(FAILED)]


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


def as_table(
    found: Sequence[Orphan], *, apply: bool, outcome: dict[str, str] | None = None, fence: Fence | None = None
) -> str:
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
    if apply:
        hint = "" if fence is None else f"\n\nDeletion fence: {fence.seconds:g} s, {fence.source}."
    else:
        hint = (
            "\n\nDry run: nothing was changed (users shown are pods of LeaderWorkerSets). Run with --apply to delete "
            "what no pod uses; it checks every pod of the namespace afresh first."
        )
    return "\n".join(render.table(rows)) + hint
