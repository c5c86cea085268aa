"""The domain writer every scope controller (and the guardian) shares: create, ungate, fenced delete, guarded
release, and Warning events posted once.

Every write rests on a fresh read, not on the watch stores, and carries a precondition for what it relied
on (create-if-absent, JSON-patch `test`, uid and resourceVersion on DELETE), so a stale store can make a
writer do less, never something unsafe. The decisions themselves are pure (`mnnvl_api.decisions`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import prometheus_client

from mnnvl_api import events, keys
from mnnvl_api.decisions import domains, fencing, injection, patches, references

from . import kube, metrics, posting

log = logging.getLogger(__name__)
Result = TypeVar("Result")
#: Statuses a retry cannot fix: the request itself, or our permissions, are wrong.
PERMANENT_STATUSES = frozenset({400, 401, 403, 405, 415, 422})
#: How many fresh pod lists (in-use checks before a deletion or release) one writer keeps in flight; each
#: holds one page at a time.
FRESH_POD_LISTS_AT_ONCE = 8
#: Decides whether a freshly read domain is one this writer may act on (identity, not labels alone).
Belongs = Callable[[domains.DomainFacts], bool]
#: How many (workload, message) warnings a writer remembers having posted; beyond that the oldest is forgotten
#: and may be posted once more (a repeated Event, never a missing one).
WARNINGS_REMEMBERED = 4096
#: How long past its fence a mark's first sighting is kept when no pass comes back to its domain (deleted by
#: someone else, its workload gone); forgetting a sighting only makes that fence start again.
SIGHTING_KEPT_AFTER_FENCE_SECONDS = 600.0

PERMANENT_ERRORS = prometheus_client.Counter(
    "mnnvl_permanent_write_errors_total",
    "Writes that failed with an error a retry cannot fix (reported once as a Warning event), by action and status",
    ["action", "status"],
    registry=metrics.REGISTRY,
)
CONDEMNED = prometheus_client.Counter(
    "mnnvl_compute_domains_condemned_total",
    "ComputeDomains marked for deletion (pods are no longer admitted onto them)",
    ["scope"],
    registry=metrics.REGISTRY,
)
DELETE_ABORTED = prometheus_client.Counter(
    "mnnvl_compute_domain_deletions_aborted_total",
    "Deletions given up because a fresh read found a pod using the domain",
    ["scope"],
    registry=metrics.REGISTRY,
)


async def users_of(client: kube.Api, domain: domains.DomainFacts) -> list[str]:
    """The non-terminal pods that hold the domain's claim or record it, from a fresh list of its namespace."""
    users: list[str] = []
    async for page in kube.pages(client, "v1", "pods", namespace=domain.namespace):
        users += references.users_of(page.items, domain=domain.name, claim_template=domain.claim_template)
    return users


def new_mark(component: str) -> str:
    """The value of a condemned mark `component` sets: a nonce of its own, so that a mark lifted and set again is
    a new mark, whose fence starts anew (`fencing.sighting`)."""
    return f"{component}/{uuid.uuid4().hex}"


def domain_path(namespace: str, name: str) -> str:
    return kube.path_of(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace, name=name)


def involved(api_version: str, kind: str, namespace: str, name: str, uid: str) -> kube.Object:
    """The reference an Event needs to land on a workload."""
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace, "uid": uid}}


class NotLeadingError(RuntimeError):
    """A write was about to start after this replica's Lease could have been taken over."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Deletion:
    """How far a fenced deletion got: `come_back_after` seconds when it has to be looked at again."""

    deleted: bool = False
    come_back_after: float | None = None


class DomainWriter:
    def __init__(
        self,
        client: kube.Api,
        *,
        component: str,
        scope: str,
        fence_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        may_write: Callable[[], bool] = lambda: True,
        term: Callable[[], int] = lambda: 0,
    ) -> None:
        """`term` tells the Lease term this replica leads in (`LeaderElector.term`): a new term never trusts
        what this writer saw in an earlier one."""
        self.client = client
        self.clock = clock
        self.may_write = may_write
        self.term = term
        self.component = component
        self.scope = scope
        self.fence_seconds = fence_seconds
        # (workload uid, message) → None, oldest first: warn once, not every pass.
        self._warned = posting.Once(WARNINGS_REMEMBERED)
        # (namespace, name) → the first sighting of the domain's mark, oldest first.
        self._condemned_seen: dict[tuple[str, str], fencing.Sighting] = {}
        # Each in-use check lists the namespace's pods afresh; a mass deletion must not hold hundreds of such
        # lists in memory at once (measured: 1 GiB RSS deleting 2,500 domains among 5,000 pods).
        self._pod_lists = asyncio.Semaphore(FRESH_POD_LISTS_AT_ONCE)

    # --- events -------------------------------------------------------------------------------------------

    async def event(self, workload: kube.Object | None, reason: str, message: str) -> None:
        if workload is not None:
            await posting.post(
                self.client,
                posting.event_for(workload, reason=reason, message=message, warning=False, component=self.component),
            )

    async def warn_once(self, workload: kube.Object | None, reason: str, message: str) -> bool:
        """A Warning event on the workload, once per workload and message; True when it was posted now."""
        uid = str(workload["metadata"].get("uid")) if workload else ""
        if not self._warned.first((uid, message)):
            return False
        log.warning("warning reported", extra={"reason": reason, "message_text": message})
        if workload is not None:
            await posting.post(
                self.client,
                posting.event_for(workload, reason=reason, message=message, warning=True, component=self.component),
            )
        return True

    async def guarded(
        self, action: str, target: str, workload: kube.Object | None, write: Callable[[], Awaitable[Result]]
    ) -> Result:
        """Run a write; an error a retry cannot fix is reported once (event, metric) and raised for back-off.

        No write starts once this replica may have lost its Lease (`may_write`): another may already lead."""
        if not self.may_write():
            raise NotLeadingError(f"not writing ({action} {target}): the Lease may have passed to another replica")
        try:
            return await write()
        except kube.ApiError as error:
            if error.status in PERMANENT_STATUSES:
                # A webhook's refusal (the guardian in Deny mode: the domain is in use, and by whom) is no RBAC
                # problem and no write error of ours: it is reported as what the webhook said.
                denial = kube.admission_denial(error)
                message = (
                    f"Could not {action} {target}: {error.status} {error.reason}; check the controller's RBAC "
                    f"(ClusterRole of {self.component}) and the object, the write is retried with back-off"
                    if denial is None
                    else f"Could not {action} {target}, refused at admission: {denial}; retried with back-off"
                )
                posted = await self.warn_once(workload, events.COMPUTE_DOMAIN_WRITE_FAILED_REASON, message)
                # The guardian's refusal is the product working; a policy's means a write of ours it does not
                # expect, which the alert on this metric must show.
                if posted and (denial is None or kube.POLICY_DENIAL.search(denial)):
                    PERMANENT_ERRORS.labels(action=action, status=str(error.status)).inc()
            raise

    # --- writes -------------------------------------------------------------------------------------------

    async def create(self, manifest: kube.Object, *, workload: kube.Object | None) -> bool:
        """Create a domain unless one of that name exists (by us or anyone: the next pass tells which)."""
        meta = manifest["metadata"]

        async def write() -> bool:
            try:
                await self.client.acreate(manifest, keys.COMPUTE_DOMAIN_PLURAL)
            except kube.ApiError as error:
                if error.status == 409:
                    return False
                raise
            return True

        created = await self.guarded("create", f"ComputeDomain {meta['name']}", workload, write)
        if created:
            metrics.DOMAINS_CREATED.labels(scope=self.scope).inc()
            log.info("compute domain created", extra={"namespace": meta["namespace"], "compute_domain": meta["name"]})
        return created

    async def ungate(
        self, namespace: str, pod: str, *, uid: str, gate_at: int | None = None, workload: kube.Object | None
    ) -> None:
        """Remove the scheduling gate of this pod incarnation, if it is still non-terminal and not being deleted.

        `gate_at` is where the watch last saw the gate: then one patch, tested on the uid and on the gate at that
        place, removes it without a read (a watch round trip saved per pod); if the pod moved on since, the test
        fails and the pod is read afresh. The claims a pod holds cannot change, so its uid vouches for them."""
        path = kube.path_of("v1", "pods", namespace=namespace, name=pod)
        uid_test = {"op": "test", "path": "/metadata/uid", "value": uid}

        def change(current: kube.Object) -> kube.JsonPatch | None:
            meta = current["metadata"]
            if meta.get("uid") != uid or meta.get("deletionTimestamp") or not references.is_non_terminal(current):
                return None
            removal = injection.scheduling_gate_removal(current.get("spec") or {})
            return [uid_test, *removal] if removal else None

        async def remove_gate() -> kube.Object | None:
            if gate_at is not None:
                try:
                    patch = [uid_test, *injection.gate_removal_at(gate_at)]
                    return await self.client.apatch(path, patch, content_type=kube.JSON_PATCH)
                except kube.ApiError as error:
                    if error.status == 404:
                        return None
                    if error.status not in (409, 422):  # 422: a test failed, the watched pod is out of date
                        raise
            return await self.client.amodify(path, change)

        updated = await self.guarded("ungate", f"pod {pod}", workload, remove_gate)
        if updated is None:
            return
        created = datetime.datetime.fromisoformat(updated["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        waited = (datetime.datetime.now(datetime.UTC) - created).total_seconds()
        metrics.GATE_DURATION.labels(scope=self.scope).observe(max(waited, 0.0))
        log.info("pod ungated", extra={"namespace": namespace, "pod": pod, "waited_seconds": round(waited, 3)})

    async def _fresh(self, namespace: str, name: str) -> tuple[kube.Object, domains.DomainFacts] | None:
        found = await self.client.aget(
            keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=namespace
        )
        return None if found is None else (found, domains.facts_of(found))

    async def fresh_users(self, domain: domains.DomainFacts) -> list[str]:
        """`users_of` from a fresh list, at most `FRESH_POD_LISTS_AT_ONCE` of them at once for this writer."""
        async with self._pod_lists:
            return await users_of(self.client, domain)

    async def fenced_delete(
        self, namespace: str, name: str, *, belongs: Belongs, workload: kube.Object | None
    ) -> Deletion:
        """One step of the fenced deletion (`mnnvl_api.decisions.fencing`) of a domain that should go."""
        fresh = await self._fresh(namespace, name)
        if fresh is None or fresh[1].deleting or not belongs(fresh[1]):
            self._condemned_seen.pop((namespace, name), None)  # nothing of ours left to fence under this name
            return Deletion()
        current, domain = fresh
        checked_at = self.clock()  # before the pod list: a pod persisted while it runs may be missing from it
        users = await self.fresh_users(domain)
        seen_at = None
        if domain.condemned:
            seen_at = self._sight(domain, domain.condemned_mark, term=self.term(), now=checked_at).at
        decision = fencing.next_step(
            condemned=domain.condemned,
            users=len(users),
            condemned_seen_at=seen_at,
            now=checked_at,
            fence_seconds=self.fence_seconds,
        )
        target = f"ComputeDomain {name}"
        if decision.step is fencing.Step.NOTHING:
            log.info("compute domain still in use", extra={"compute_domain": name, "pods": users[:5]})
        elif decision.step is fencing.Step.UNCONDEMN:
            DELETE_ABORTED.labels(scope=self.scope).inc()
            log.info("compute domain deletion aborted", extra={"compute_domain": name, "pods": users[:5]})
            await self.guarded("uncondemn", target, workload, lambda: self._mark(current, mark=None))
        elif decision.step is fencing.Step.CONDEMN:
            mark, term = new_mark(self.component), self.term()
            if await self.guarded("condemn", target, workload, lambda: self._mark(current, mark=mark)):
                self._sight(domain, mark, term=term, now=self.clock())  # persisted by now: its fence starts
                CONDEMNED.labels(scope=self.scope).inc()
                log.info("compute domain condemned", extra={"namespace": namespace, "compute_domain": name})
            return Deletion(come_back_after=decision.wait_seconds)
        elif decision.step is fencing.Step.WAIT:
            return Deletion(come_back_after=decision.wait_seconds)
        else:
            return await self._delete(domain, workload)
        return Deletion()

    def _sight(self, domain: domains.DomainFacts, mark: str, *, term: int, now: float) -> fencing.Sighting:
        """The sighting of `mark` on the domain that its fence is timed from (`fencing.sighting`), remembered
        oldest first; sightings older than the fence plus `SIGHTING_KEPT_AFTER_FENCE_SECONDS` are forgotten."""
        key = (domain.namespace, domain.name)
        seen = fencing.sighting(
            self._condemned_seen.pop(key, None), domain_uid=domain.uid, mark=mark, term=term, now=now
        )
        stale_before = now - self.fence_seconds - SIGHTING_KEPT_AFTER_FENCE_SECONDS
        while self._condemned_seen and next(iter(self._condemned_seen.values())).at < stale_before:
            del self._condemned_seen[next(iter(self._condemned_seen))]
        self._condemned_seen[key] = seen
        return seen

    async def _delete(self, domain: domains.DomainFacts, workload: kube.Object | None) -> Deletion:
        path = domain_path(domain.namespace, domain.name)

        async def write() -> bool:
            try:
                return await self.client.adelete(path, uid=domain.uid, resource_version=domain.resource_version)
            except kube.ApiError as error:
                if error.status == 409:  # changed since the fresh read: look again soon
                    return False
                raise

        if not await self.guarded("delete", f"ComputeDomain {domain.name}", workload, write):
            return Deletion(come_back_after=1.0)
        self._condemned_seen.pop((domain.namespace, domain.name), None)
        log.info("compute domain deleted", extra={"namespace": domain.namespace, "compute_domain": domain.name})
        return Deletion(deleted=True)

    async def _mark(self, current: kube.Object, *, mark: str | None) -> bool:
        """Set `mark` as the condemned mark (None: lift the mark) on exactly the object version that was checked."""
        domain = domains.facts_of(current)
        precondition = [
            {"op": "test", "path": "/metadata/uid", "value": domain.uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": domain.resource_version},
        ]
        if mark is not None:
            marks = patches.set_annotation(current["metadata"], keys.CONDEMNED_ANNOTATION, mark)
        else:
            marks = [{"op": "remove", "path": patches.pointer("metadata", "annotations", keys.CONDEMNED_ANNOTATION)}]
        try:
            await self.client.apatch(
                domain_path(domain.namespace, domain.name), precondition + marks, content_type=kube.JSON_PATCH
            )
        except kube.ApiError as error:
            if error.status in (404, 409, 422):  # gone or changed since the check: the next pass decides again
                return False
            raise
        if mark is None:
            self._condemned_seen.pop((domain.namespace, domain.name), None)
        return True

    async def uncondemn(self, namespace: str, name: str, *, belongs: Belongs, workload: kube.Object | None) -> None:
        """Lift the mark from a domain that is wanted again (its group is current, or a pod uses it)."""
        fresh = await self._fresh(namespace, name)
        if fresh is None or not fresh[1].condemned or not belongs(fresh[1]):
            return
        await self.guarded("uncondemn", f"ComputeDomain {name}", workload, lambda: self._mark(fresh[0], mark=None))

    async def release(self, namespace: str, name: str, *, belongs: Belongs, workload: kube.Object | None) -> str | None:
        """Remove the protection finalizer from a deleted domain once a fresh read of the pods finds no user;
        returns the domain's deletionTimestamp when released.

        The one implementation of the release: only a domain that is being deleted (never a same-named live
        successor), that is ours, carries the finalizer, and that no non-terminal pod uses.
        """
        fresh = await self._fresh(namespace, name)
        if fresh is None:
            return None
        current, domain = fresh
        if not domain.deleting or not domain.protected or not belongs(domain):
            return None
        users = await self.fresh_users(domain)
        if users:
            log.info("compute domain still in use", extra={"compute_domain": name, "pods": users[:5]})
            return None
        finalizers = current["metadata"].get("finalizers") or []
        pointer = f"/metadata/finalizers/{finalizers.index(keys.PROTECTION_FINALIZER)}"
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": domain.uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": domain.resource_version},
            {"op": "test", "path": pointer, "value": keys.PROTECTION_FINALIZER},
            {"op": "remove", "path": pointer},
        ]

        async def write() -> bool:
            try:
                await self.client.apatch(domain_path(namespace, name), patch, content_type=kube.JSON_PATCH)
            except kube.ApiError as error:
                if error.status in (404, 409, 422):
                    return False
                raise
            return True

        if not await self.guarded("release", f"ComputeDomain {name}", workload, write):
            return None
        log.info("protection released", extra={"namespace": namespace, "compute_domain": name})
        return str(current["metadata"]["deletionTimestamp"])
