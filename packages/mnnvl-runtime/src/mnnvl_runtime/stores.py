"""Watch stores that are complete before anyone decides on them, and that never keep ghosts.

Watch events feed a `Mirror` per watched resource, which passes each object (or its deletion) on to the
controller's indexes. Two things a watch alone cannot promise are added here:

- a cache-sync barrier: `StoreSync.synced` is set only once every mirror has been filled from a complete,
  fresh list. Until then nothing may be decided from the stores (an empty pod store makes every domain look
  unused);
- no ghosts: after a watch answers 410 and is re-listed, objects deleted in the gap never produce a DELETED
  event. Every `every` seconds each mirror is reconciled against a fresh list: objects absent from it and not
  seen since it was taken are dropped; objects newer in the list are applied.

Ordering between a list and the events around it is by resourceVersion: an event newer than the list wins;
an object deleted while the list was in flight stays deleted (tombstone).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import prometheus_client

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, plans, references

from . import indexes, kube, metrics

log = logging.getLogger(__name__)
Key = TypeVar("Key", bound=Hashable)
#: Applies one object (None: its deletion) to the indexes; returns the work keys whose state it may change.
Apply = Callable[[str, Mapping[str, Any] | None], Iterable[Key]]

GHOSTS_DROPPED = prometheus_client.Counter(
    "mnnvl_store_ghosts_dropped_total",
    "Objects dropped from a watch store because a fresh list no longer had them (a deletion the watch missed)",
    ["resource"],
    registry=metrics.REGISTRY,
)
RESYNC_ERRORS = prometheus_client.Counter(
    "mnnvl_store_resync_errors_total",
    "Fresh lists of a watched resource that failed (retried on the next resync)",
    ["resource"],
    registry=metrics.REGISTRY,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resource:
    api_version: str
    plural: str
    #: The same selectors the watch uses, so the list and the watch see the same objects.
    label_selector: str | None = None
    field_selector: str | None = None


def _version(body: Mapping[str, Any]) -> int | None:
    found = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return int(found) if found.isdigit() else None


def _newer(candidate: int | None, known: int | None) -> bool:
    """Whether an object at `candidate` supersedes what is known; unknown versions are always taken."""
    return candidate is None or known is None or candidate > known


class Mirror(Generic[Key]):
    """One watched resource, mirrored into a controller's indexes through `apply`."""

    def __init__(self, resource: Resource, apply: Apply[Key]) -> None:
        self.resource = resource
        self._apply = apply
        self._versions: dict[str, int | None] = {}  # uid → resourceVersion last applied
        self._deleted_during_list: set[str] | None = None
        self._listed: set[str] = set()

    def __len__(self) -> int:
        return len(self._versions)

    def observe(self, body: Mapping[str, Any], *, deleted: bool) -> list[Key]:
        """A watch event."""
        uid = str(body["metadata"]["uid"])
        if deleted:
            if self._deleted_during_list is not None:
                self._deleted_during_list.add(uid)
            self._versions.pop(uid, None)
            return list(self._apply(uid, None))
        version = _version(body)
        if uid in self._versions and not _newer(version, self._versions[uid]):
            return []  # older than what a list already gave us
        self._versions[uid] = version
        return list(self._apply(uid, body))

    def begin_list(self) -> None:
        """Call right before the first page is asked for: deletions seen from now on must not be undone by it."""
        self._deleted_during_list = set()
        self._listed = set()

    def finish_list_aborted(self) -> None:
        self._deleted_during_list = None
        self._listed = set()

    def take_page(self, items: Sequence[Mapping[str, Any]]) -> list[Key]:
        """Apply one page of the list in flight; returns the touched keys."""
        deleted = self._deleted_during_list or set()
        touched: list[Key] = []
        for body in items:
            uid = str(body["metadata"]["uid"])
            self._listed.add(uid)
            version = _version(body)
            if uid in deleted or (uid in self._versions and not _newer(version, self._versions[uid])):
                continue
            self._versions[uid] = version
            touched += self._apply(uid, body)
        return touched

    def finish_list(self, list_version: str) -> tuple[list[Key], int]:
        """The list taken at `list_version` is complete (every page taken): drop what it no longer has.
        Returns the keys the dropped objects touched, and how many were dropped."""
        listed, self._listed = self._listed, set()
        self._deleted_during_list = None
        touched: list[Key] = []
        at = int(list_version) if list_version.isdigit() else None
        ghosts = [
            uid
            for uid, version in self._versions.items()
            if uid not in listed and (at is None or version is None or version <= at)
        ]
        for uid in ghosts:
            del self._versions[uid]
            touched += self._apply(uid, None)
        return touched, len(ghosts)


class StoreSync(Generic[Key]):
    """Fills every mirror from a fresh list, then opens the barrier; re-lists every `every` seconds."""

    def __init__(
        self,
        client: kube.Api,
        mirrors: Sequence[Mirror[Key]],
        *,
        every: float,
        touched: Callable[[list[Key]], None],
    ) -> None:
        self.client = client
        self.mirrors = mirrors
        self.every = every
        self.touched = touched
        self.synced = asyncio.Event()

    async def run(self) -> None:
        while True:
            complete = True
            for mirror in self.mirrors:
                complete = await self.resync(mirror) and complete
            if complete and not self.synced.is_set():
                log.info("watch stores synced", extra={"objects": sum(len(m) for m in self.mirrors)})
                self.synced.set()
            await asyncio.sleep(self.every if complete else min(self.every, 2.0))

    async def resync(self, mirror: Mirror[Key]) -> bool:
        resource = mirror.resource
        name = f"{resource.plural}.{resource.api_version}"
        mirror.begin_list()
        touched: list[Key] = []
        version = ""
        try:
            async for page in kube.pages(
                self.client,
                resource.api_version,
                resource.plural,
                label_selector=resource.label_selector,
                field_selector=resource.field_selector,
            ):
                touched += mirror.take_page(page.items)
                version = page.resource_version
        except kube.ApiError as error:  # an error status, or no answer at all (`kube.UnreachableError`)
            mirror.finish_list_aborted()
            RESYNC_ERRORS.labels(resource=name).inc()
            log.warning("watch store resync failed", extra={"resource": name, "error": str(error)})
            if touched:
                self.touched(touched)
            return False
        dropped, ghosts = mirror.finish_list(version)
        touched += dropped
        if ghosts:
            GHOSTS_DROPPED.labels(resource=name).inc(ghosts)
            log.info("watch store ghosts dropped", extra={"resource": name, "count": ghosts})
        if touched:
            self.touched(touched)
        return True


NamespacedName = tuple[str, str]


@dataclasses.dataclass
class DomainStores:
    """The indexes every controller that decides on ComputeDomains keeps: domains by name, by claim template
    and by workload; the claim templates that exist; and which non-terminal pods use each domain, by holding
    its claim or by recording it. Keyed by object uid (`indexes`)."""

    #: ("name", namespace, name) | ("template", namespace, claim template) | ("workload", namespace, workload)
    compute_domains: indexes.Index[tuple[str, str, str], domains.DomainFacts] = dataclasses.field(
        default_factory=indexes.Index
    )
    #: (namespace, name) → ResourceClaimTemplates that exist
    templates: indexes.Index[NamespacedName, bool] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, claim template) → names of the non-terminal pods holding it
    template_users: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, domain) → names of the non-terminal pods recording it
    domain_recorders: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)

    def apply_domain(self, uid: str, body: Mapping[str, Any] | None, *, manager: str | None = None) -> None:
        """Index a domain; it is indexed under its workload only when `manager` (if given) manages it."""
        if body is None:
            self.compute_domains.drop(uid)
            return
        facts = domains.facts_of(body)
        contributions = {
            ("name", facts.namespace, facts.name): facts,
            ("template", facts.namespace, facts.claim_template): facts,
        }
        if facts.workload and (manager is None or facts.managed_by == manager):
            contributions[("workload", facts.namespace, facts.workload)] = facts
        self.compute_domains.put(uid, contributions, version=indexes.version_of(body))

    def apply_template(self, uid: str, body: Mapping[str, Any] | None) -> None:
        if body is None:
            self.templates.drop(uid)
        else:
            meta = body["metadata"]
            self.templates.put(uid, {(meta.get("namespace", ""), meta["name"]): True})

    def apply_pod(self, uid: str, pod: Mapping[str, Any] | None) -> None:
        """Index what a pod uses; a terminal pod uses nothing."""
        if pod is None:
            self.template_users.drop(uid)
            self.domain_recorders.drop(uid)
            return
        meta = pod["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        self.template_users.put(uid, {(namespace, t): name for t in references.live_claim_templates(pod)})
        recorded = references.live_recorded_domain(pod)
        self.domain_recorders.put(uid, {(namespace, recorded): name} if recorded else {})

    def domain(self, namespace: str, name: str) -> domains.DomainFacts | None:
        """The domain of that name; of two incarnations, the newer one (`Index.newest`)."""
        return self.compute_domains.newest(("name", namespace, name))

    def domains_of(self, namespace: str, workload: str) -> list[domains.DomainFacts]:
        return list(self.compute_domains.get(("workload", namespace, workload)).values())

    def domains_by_template(self, namespace: str, template: str) -> list[domains.DomainFacts]:
        return list(self.compute_domains.get(("template", namespace, template)).values())

    def template_exists(self, namespace: str, template: str) -> bool:
        return (namespace, template) in self.templates

    def in_use(self, facts: domains.DomainFacts) -> bool:
        """Whether a non-terminal pod the stores know holds the domain's claim or records the domain."""
        return (facts.namespace, facts.claim_template) in self.template_users or (
            facts.namespace,
            facts.name,
        ) in self.domain_recorders

    def users(self, facts: domains.DomainFacts) -> list[str]:
        """The names of the non-terminal pods the stores know to hold the domain's claim or record the domain."""
        holding = self.template_users.get((facts.namespace, facts.claim_template)).values()
        recording = self.domain_recorders.get((facts.namespace, facts.name)).values()
        return sorted({*holding, *recording})

    def domain_states(self) -> dict[str, int]:
        """How many domains are indexed under a workload (those its manager manages, see `apply_domain`), by
        state: `pending` (no claim template yet), `ready`, `terminating`."""
        counts = {"pending": 0, "ready": 0, "terminating": 0}
        for tag, namespace, name in self.compute_domains.groups():
            if tag != "workload":
                continue
            for facts in self.compute_domains.get((tag, namespace, name)).values():
                if facts.deleting:
                    counts["terminating"] += 1
                elif self.template_exists(namespace, facts.claim_template):
                    counts["ready"] += 1
                else:
                    counts["pending"] += 1
        return counts


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainUsage:
    """What a scope's snapshot knows of its domains' claim templates and users."""

    existing_templates: frozenset[str]
    templates_in_use: frozenset[str]  # held by non-terminal pods in the namespace
    domains_recorded: frozenset[str]  # recorded by non-terminal pods in the namespace


#: Every scope watches every ComputeDomain (a foreign one may collide with a name of ours) and claim template.
DOMAIN_RESOURCE = Resource(api_version=keys.COMPUTE_DOMAIN_API_VERSION, plural=keys.COMPUTE_DOMAIN_PLURAL)
TEMPLATE_RESOURCE = Resource(api_version="resource.k8s.io/v1", plural="resourceclaimtemplates")
WorkloadT = TypeVar("WorkloadT", bound=plans.WorkloadFacts)
PodT = TypeVar("PodT", bound=plans.PodFacts)
SnapshotT = TypeVar("SnapshotT", bound=plans.ScopeSnapshot[Any, Any])


@dataclasses.dataclass
class ScopeStores(abc.ABC, Generic[WorkloadT, PodT]):
    """What a scope controller (replica, slice) knows: its workloads and their scope pods, by workload
    (namespace, name); the shared domain stores; and which workloads' pods record each domain, to tell which
    workloads a ComputeDomain or claim template event concerns.

    A scope names the `manager` whose domains it indexes under their workload, the resources of its pods (their
    label selector) and of its workloads, how it reads their facts (`pod_of`, `workload_of`), and any more
    resources it watches (`more_mirrors`, `more_keys`)."""

    manager: ClassVar[str]
    pod_resource: ClassVar[Resource]
    workload_resource: ClassVar[Resource]
    #: Domains, claim templates and which pods use what: the indexes every domain controller shares.
    shared: DomainStores = dataclasses.field(default_factory=DomainStores)
    #: (namespace, domain) → names of the workloads whose pods record it
    domain_users: indexes.Index[NamespacedName, str] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, workload name) → its scope pods
    pods: indexes.Index[NamespacedName, PodT] = dataclasses.field(default_factory=indexes.Index)
    #: (namespace, workload name) → the workload
    workloads: indexes.Index[NamespacedName, WorkloadT] = dataclasses.field(default_factory=indexes.Index)

    def __post_init__(self) -> None:
        self.pod_mirror = Mirror(self.pod_resource, self.apply_pod)
        self.workload_mirror = Mirror(self.workload_resource, self.apply_workload)
        self.domain_mirror = Mirror(DOMAIN_RESOURCE, self.apply_domain)
        self.template_mirror = Mirror(TEMPLATE_RESOURCE, self.apply_template)

    @property
    def mirrors(self) -> list[Mirror[NamespacedName]]:
        return [self.pod_mirror, self.workload_mirror, *self.more_mirrors(), self.domain_mirror, self.template_mirror]

    def more_mirrors(self) -> list[Mirror[NamespacedName]]:
        """The scope's own watched resources besides pods, workloads, domains and claim templates."""
        return []

    def more_keys(self) -> set[NamespacedName]:
        """The workloads the scope's own indexes name."""
        return set()

    @abc.abstractmethod
    def pod_of(self, pod: Mapping[str, Any]) -> tuple[str, PodT] | None:
        """The name of the workload a pod of this scope belongs to, and its facts; None for any other pod."""

    @abc.abstractmethod
    def workload_of(self, body: Mapping[str, Any]) -> WorkloadT | None:
        """The facts of a workload; None for one whose shape cannot be read."""

    @abc.abstractmethod
    def snapshot(self, namespace: str, name: str, *, gate_enabled: bool) -> Any:
        """What the scope's planner decides the workload's domains from (its `plans.ScopeSnapshot`)."""

    # --- feeding (through the mirrors: watch events and fresh lists) ---------------------------------------

    def apply_pod(self, uid: str, pod: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a pod of the scope (None: its deletion); returns the (namespace, workload) it belongs to."""
        before = self.pods.groups_of(uid)
        self.shared.apply_pod(uid, pod)
        self.pods.drop(uid)
        self.domain_users.drop(uid)
        found = None if pod is None else self.pod_of(pod)
        if pod is None or found is None:
            return list(before)
        workload, facts = found
        key = (pod["metadata"].get("namespace", ""), workload)
        self.pods.put(uid, {key: facts})
        self.domain_users.put(uid, {(key[0], facts.domain): workload} if facts.domain else {})
        return sorted({*before, key})

    def apply_workload(self, uid: str, body: Mapping[str, Any] | None) -> list[NamespacedName]:
        before = self.workloads.groups_of(uid)
        facts = None if body is None else self.workload_of(body)
        if body is None or facts is None:
            self.workloads.drop(uid)
            return list(before)
        key = (facts.namespace, facts.name)
        self.workloads.put(uid, {key: facts}, version=indexes.version_of(body))
        return sorted({*before, key})

    def apply_domain(self, uid: str, domain: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a ComputeDomain; returns the workload keys that care about it (before and after the change)."""
        before = [self._interested(facts) for facts in self._domain_facts(uid)]
        self.shared.apply_domain(uid, domain, manager=self.manager)
        after = [self._interested(facts) for facts in self._domain_facts(uid)]
        return sorted({key for found in (*before, *after) for key in found})

    def apply_template(self, uid: str, template: Mapping[str, Any] | None) -> list[NamespacedName]:
        """Index a ResourceClaimTemplate; returns the workload keys whose domains it serves."""
        keys_before = self.shared.templates.groups_of(uid)
        self.shared.apply_template(uid, template)
        touched = {*keys_before, *self.shared.templates.groups_of(uid)}
        return sorted(
            {
                workload
                for namespace, name in touched
                for facts in self.shared.domains_by_template(namespace, name)
                for workload in self._interested(facts)
            }
        )

    # --- reading -------------------------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> WorkloadT | None:
        return self.workloads.newest((namespace, name))

    def scope_pods(self, namespace: str, workload: str) -> tuple[PodT, ...]:
        return tuple(self.pods.get((namespace, workload)).values())

    def domains_for(self, namespace: str, workload: str, also: Iterable[str]) -> dict[str, domains.DomainFacts]:
        """For a snapshot, by name: the domains `manager` made for the workload, and those named `also` that
        exist (whoever made them); of two incarnations of a name, the newer."""
        found = {
            facts.name: self.shared.domain(namespace, facts.name) or facts
            for facts in self.shared.domains_of(namespace, workload)
        }
        found.update(self.known_domains(namespace, [name for name in also if name not in found]))
        return found

    def known_domains(self, namespace: str, wanted: Iterable[str]) -> dict[str, domains.DomainFacts]:
        """The domains of these names that exist, whoever made them (of two incarnations of a name, the newer)."""
        return {name: known for name in wanted if (known := self.shared.domain(namespace, name)) is not None}

    def snapshot_of(
        self,
        new: Callable[..., SnapshotT],
        namespace: str,
        name: str,
        *,
        pods: tuple[PodT, ...],
        found: dict[str, domains.DomainFacts],
        wanted: Iterable[str],
        gate_enabled: bool,
        **scope_fields: Any,
    ) -> SnapshotT:
        """The scope's snapshot (`new`, a `plans.ScopeSnapshot` type) of the workload: the workload as stored, its
        `pods`, the domains `found` for it, which claim templates of those and of the `wanted` names exist and
        are used (`usage`), and the scope's own fields."""
        usage = self.usage(namespace, found, wanted)
        return new(
            namespace=namespace,
            workload_name=name,
            workload=self.workload(namespace, name),
            pods=pods,
            domains=found,
            existing_templates=usage.existing_templates,
            templates_in_use=usage.templates_in_use,
            domains_recorded=usage.domains_recorded,
            gate_enabled=gate_enabled,
            **scope_fields,
        )

    def usage(self, namespace: str, found: Mapping[str, domains.DomainFacts], wanted: Iterable[str]) -> DomainUsage:
        """For a snapshot: which claim templates exist among those of the domains `found` and `wanted` (by name),
        and which of the `found` domains pods use (hold their claim template, or record them)."""
        relevant = {facts.claim_template for facts in found.values()} | {
            names.claim_template_name(name) for name in (*found, *wanted)
        }
        return DomainUsage(
            existing_templates=frozenset(t for t in relevant if self.shared.template_exists(namespace, t)),
            templates_in_use=frozenset(
                f.claim_template for f in found.values() if (namespace, f.claim_template) in self.shared.template_users
            ),
            domains_recorded=frozenset(name for name in found if (namespace, name) in self.shared.domain_recorders),
        )

    def gated_pods(self) -> int:
        return sum(1 for key in self.pods.groups() for pod in self.pods.get(key).values() if pod.gated)

    def workload_keys(self) -> list[NamespacedName]:
        """Every workload this controller may have work for: known objects, their pods, their domains, and what
        the scope's own indexes name."""
        return sorted(
            set(self.workloads.groups()) | set(self.pods.groups()) | self.managed_workloads() | self.more_keys()
        )

    def managed_workloads(self) -> set[NamespacedName]:
        """The workloads that `manager`'s domains name."""
        return {(namespace, name) for tag, namespace, name in self.shared.compute_domains.groups() if tag == "workload"}

    def _domain_facts(self, uid: str) -> list[domains.DomainFacts]:
        return [
            facts
            for key in self.shared.compute_domains.groups_of(uid)
            if key[0] == "name"
            for facts in [self.shared.compute_domains.get(key).get(uid)]
            if facts is not None
        ]

    def _interested(self, facts: domains.DomainFacts) -> list[NamespacedName]:
        found = {(facts.namespace, name) for name in self.domain_users.get((facts.namespace, facts.name)).values()}
        if facts.workload and facts.managed_by == self.manager:
            found.add((facts.namespace, facts.workload))
        return sorted(found)
