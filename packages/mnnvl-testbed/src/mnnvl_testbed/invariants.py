"""The chaos run's invariant watcher, its decisions: plain objects from the watcher's own watches in, violations out.

Independent of the controllers' code on purpose: it reads pods, ComputeDomains and the owners between them as the
API server returns them and decides with rules written here from the user contract (annotation, label and claim
names), never with the controllers' decision functions, so that a defect in those cannot hide itself.

Moments are resourceVersions. On one etcd they are its global revision, one order over every kind, so the watcher
judges a deletion against its pod map *as it was at the revision the deletion started*, once its pod watch has
passed that revision: the two watch streams may deliver in any interleaving without a false or a missed violation.
The checks:

- a domain whose deletion starts (its first event carrying `deletionTimestamp`, or its DELETED event when it never
  carried one) while a non-terminal pod references it (records its name or holds its claim template);
- a pod of an opted-in revision bound to a node while a GPU container of it lacks the channel claim;
- two live (non-terminal, not deleting) pods of one group incarnation recording two domains: a replica group is
  its leader pod (workers reach it through their StatefulSet), a slice group is (DisaggregatedSet, slice, revision);
- a change to an object that is not ours, watched throughout (a foreign look-alike): to its labels, annotations,
  finalizers, owners, spec or deletion. The driver's own writes to every ComputeDomain (its finalizer, the status)
  are not changes the watcher holds against anyone; which finalizers those are is the watcher's to be told.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from mnnvl_api import keys

Object = Mapping[str, Any]
TERMINAL = ("Succeeded", "Failed")

DELETED_UNDER_A_POD = "no domain deleted under a pod"
RUNS_WITHOUT_CLAIM = "opted-in pod runs without its claim"
ONE_GROUP_ONE_DOMAIN = "one group, one domain"
NOTHING_FOREIGN_WRITTEN = "nothing foreign written"
#: Every invariant the watcher checks, in the order reports list them.
INVARIANTS = (DELETED_UNDER_A_POD, RUNS_WITHOUT_CLAIM, ONE_GROUP_ONE_DOMAIN, NOTHING_FOREIGN_WRITTEN)
#: The event of an object delivered by a list: not in resourceVersion order, so it moves no moment forward (the
#: list's own resourceVersion does, once the whole list is in: `relisted_pods`).
LISTED = "LISTED"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Violation:
    invariant: str
    #: The resourceVersion at which it held (the deletion's start, the pod's or the object's write).
    moment: int
    objects: tuple[str, ...]
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodView:
    namespace: str
    name: str
    uid: str
    terminal: bool
    deleting: bool
    bound: bool
    recorded: str | None
    claim_templates: frozenset[str]
    #: GPU containers (and restartable init containers) without a reference to the channel claim.
    unclaimed_gpu_containers: tuple[str, ...]
    scope: str | None
    leader: bool
    #: The controller owner's (kind, uid): a worker's StatefulSet, a leader's StatefulSet.
    owner: tuple[str, str] | None
    #: (slice, revision) of a DisaggregatedSet pod.
    slice_revision: tuple[str, str] | None

    @property
    def live(self) -> bool:
        return not self.terminal and not self.deleting

    def references(self, domain: str, template: str) -> bool:
        return not self.terminal and (self.recorded == domain or bool(template and template in self.claim_templates))


_QUANTITY = re.compile(r"^([0-9]*\.?[0-9]*)([a-zA-Z]*)$")


def quantity_positive(text: object) -> bool:
    """Whether a Kubernetes quantity ("4", "0", "0.0", "500m", "1k") is above zero; an unreadable one counts as
    positive, so that a pod the watcher cannot read is judged as asking for GPUs."""
    match = _QUANTITY.match(str(text).strip())
    if match is None or match.group(1) in ("", "."):
        return True
    return float(match.group(1)) > 0


def _gpu(container: Object) -> bool:
    resources = container.get("resources") or {}
    return any(
        keys.GPU_RESOURCE in (resources.get(kind) or {}) and quantity_positive(resources[kind][keys.GPU_RESOURCE])
        for kind in ("limits", "requests")
    )


def controller_of(meta: Object) -> tuple[str, str] | None:
    for reference in meta.get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference.get("kind")), str(reference.get("uid"))
    return None


def pod_view(pod: Object) -> PodView:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    claims = spec.get("resourceClaims") or []
    containers = [
        *(spec.get("containers") or []),
        *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
    ]
    unclaimed = tuple(
        str(container.get("name"))
        for container in containers
        if _gpu(container)
        and keys.CHANNEL_CLAIM_NAME
        not in [claim.get("name") for claim in (container.get("resources") or {}).get("claims") or []]
    )
    ds_slice = labels.get(keys.DS_SLICE_LABEL, "0")
    revision = labels.get(keys.DS_REVISION_LABEL)
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta["name"]),
        uid=str(meta["uid"]),
        terminal=(pod.get("status") or {}).get("phase") in TERMINAL,
        deleting=bool(meta.get("deletionTimestamp")),
        bound=bool(spec.get("nodeName")),
        recorded=annotations.get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION),
        claim_templates=frozenset(
            str(claim["resourceClaimTemplateName"]) for claim in claims if claim.get("resourceClaimTemplateName")
        ),
        unclaimed_gpu_containers=unclaimed,
        scope=labels.get(keys.SCOPE_LABEL),
        leader=labels.get(keys.LWS_WORKER_INDEX_LABEL) == "0",
        owner=controller_of(meta),
        slice_revision=(str(ds_slice), str(revision)) if revision is not None else None,
    )


def _template_of(domain: Object) -> str:
    return str((((domain.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name", ""))


def managed(domain: Object) -> bool:
    return (domain["metadata"].get("labels") or {}).get(keys.MANAGED_BY_LABEL) in keys.DOMAIN_MANAGERS


@dataclasses.dataclass(frozen=True)
class _Deletion:
    namespace: str
    name: str
    template: str
    #: The revision its deletion started at; when a watch gap hides it, the latest it can have started.
    moment: int
    #: The earliest it can have started: `moment` when seen starting, the gap's start when a gap hid it.
    since: int


@dataclasses.dataclass
class Watcher:
    """The watcher's view: every pod as it was at each of its writes, ComputeDomains as last seen, the controller
    owner of every pod, StatefulSet and LeaderWorkerSet, and the foreign objects watched."""

    #: pod uid → [(resourceVersion, the pod then, None once deleted)], in resourceVersion order
    pods: dict[str, list[tuple[int, PodView | None]]] = dataclasses.field(default_factory=dict)
    #: domain uid → (namespace, name, claim template, deleting)
    domains: dict[str, tuple[str, str, str, bool]] = dataclasses.field(default_factory=dict)
    #: uid → its controller owner's (kind, uid)
    owners: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: (plural, namespace, name) → the uid of a foreign object and what it was when the run began (`fingerprint`)
    foreign: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    #: The namespaces judged (empty: all); pods and domains elsewhere (an earlier run's, draining) are not.
    namespaces: frozenset[str] = frozenset()
    #: Finalizers others than mnnvl put on foreign objects by design (the driver's on every ComputeDomain).
    tolerated_finalizers: frozenset[str] = frozenset()
    #: How far the pod watch has delivered: deletions that started up to here can be judged.
    pods_seen_to: int = 0
    pending: list[_Deletion] = dataclasses.field(default_factory=list)
    #: Pod watch gaps (from, to]: the revisions a re-list skipped, where the pod map is known only at both ends.
    pod_gaps: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    #: Where the domain watch's current re-list began (its events between there and the list are lost).
    domain_gap_from: int = 0
    #: Deletions that could not be judged exactly: a pod referenced the domain before a watch gap and was gone
    #: after it, or the pod watch never reached the deletion's revision.
    inconclusive: list[str] = dataclasses.field(default_factory=list)
    #: Checks made per invariant, and managed domains seen created and deleted.
    checks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    created: set[str] = dataclasses.field(default_factory=set)
    deleted: set[str] = dataclasses.field(default_factory=set)
    violations: list[Violation] = dataclasses.field(default_factory=list)

    # --- events -----------------------------------------------------------------------------------------------

    def watch_foreign(self, plural: str, body: Object) -> None:
        meta = body["metadata"]
        self.foreign[(plural, meta.get("namespace", ""), meta["name"])] = (str(meta["uid"]), self.fingerprint(body))

    def fingerprint(self, body: Object) -> dict[str, Any]:
        """What nobody but its owner may change on a foreign object: all but status and tolerated finalizers."""
        meta = body["metadata"]
        return {
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
            "finalizers": sorted(set(meta.get("finalizers") or []) - self.tolerated_finalizers),
            "ownerReferences": meta.get("ownerReferences") or [],
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "spec": body.get("spec"),
        }

    def on_foreign(self, plural: str, body: Object, event: str = "MODIFIED") -> list[Violation]:
        """Any event of a kind that holds foreign objects: a change to one of them, its deletion or another object
        made under its name is a violation."""
        meta = body["metadata"]
        key = (plural, meta.get("namespace", ""), meta["name"])
        if key not in self.foreign:
            return []
        self.checks[NOTHING_FOREIGN_WRITTEN] += 1
        uid, was = self.foreign[key]
        now = self.fingerprint(body)
        changed = sorted(part for part, value in now.items() if was[part] != value)
        if event == "DELETED":
            what = "it was deleted"
        elif str(meta["uid"]) != uid:
            what = "another object was made under its name"
        elif changed:
            what = f"its {', '.join(changed)} changed: {[(part, now[part]) for part in changed]}"
        else:
            return []
        self.foreign[key] = (str(meta["uid"]), now)
        return self._violation(NOTHING_FOREIGN_WRITTEN, _version(body), (f"{plural} {key[1]}/{key[2]}",), what)

    def on_owner(self, event: str, body: Object) -> list[Violation]:
        """A StatefulSet or LeaderWorkerSet event: remembers its controller owner (kept after deletion, as pods
        outlive their owners briefly). A group check that waited for this owner is made now."""
        meta = body["metadata"]
        owner = controller_of(meta)
        if owner is None or event == "DELETED":
            return []
        self.owners[str(meta["uid"])] = owner
        waiting = [
            view
            for view in self._current_pods()
            if view.owner == ("StatefulSet", meta["uid"])
            or (view.scope == keys.SCOPE_SLICE and event in ("ADDED", LISTED))
        ]
        return [violation for view in waiting for violation in self._group(view)]

    def judged(self, meta: Object) -> bool:
        return not self.namespaces or meta.get("namespace") in self.namespaces

    def on_pod(self, event: str, pod: Object) -> list[Violation]:
        if not self.judged(pod["metadata"]):
            return []
        uid = str(pod["metadata"]["uid"])
        moment = _version(pod)
        view = None if event == "DELETED" else pod_view(pod)
        self._record(uid, moment, view)
        found = self.progress(moment) if event != LISTED else []
        if view is None:
            return found
        if view.scope is not None and view.bound and not view.terminal:
            self.checks[RUNS_WITHOUT_CLAIM] += 1
            if view.unclaimed_gpu_containers:
                found += self._violation(
                    RUNS_WITHOUT_CLAIM,
                    moment,
                    (f"{view.namespace}/{view.name}",),
                    f"GPU containers {list(view.unclaimed_gpu_containers)} lack {keys.CHANNEL_CLAIM_NAME}",
                )
        return found + self._group(view)

    def relisted_pods(self, since: int, moment: int, present: Iterable[str]) -> list[Violation]:
        """After a re-list at `moment` whose watch had delivered up to `since` (events in between are lost): pods
        not `present` are gone, at some revision in the gap."""
        present = set(present)
        for uid, history in self.pods.items():
            if uid not in present and history[-1][1] is not None:
                history.append((moment, None))
        if since:
            self.pod_gaps.append((since, moment))
        return self.progress(moment)

    def relisting_domains(self, since: int) -> None:
        """The domain watch broke after delivering up to `since`; a re-list follows."""
        self.domain_gap_from = since

    def relisted_domains(self, moment: int, present: Iterable[str]) -> list[Violation]:
        """After a re-list at `moment`: a domain not `present` went in the gap, its deletion starting somewhere in
        it, unless it was seen starting already."""
        present = set(present)
        for uid, (namespace, name, template, deleting) in list(self.domains.items()):
            if uid not in present:
                del self.domains[uid]
                if not deleting:
                    self.pending.append(_Deletion(namespace, name, template, moment, self.domain_gap_from))
        return self.progress(self.pods_seen_to)

    def on_domain(self, event: str, domain: Object) -> list[Violation]:
        meta = domain["metadata"]
        if not self.judged(meta):
            return self.on_foreign(keys.COMPUTE_DOMAIN_PLURAL, domain, event)
        uid = str(meta["uid"])
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        was = self.domains.get(uid)
        deleting = bool(meta.get("deletionTimestamp")) or event == "DELETED"
        found = self.on_foreign(keys.COMPUTE_DOMAIN_PLURAL, domain, event)
        ours = managed(domain) and (keys.COMPUTE_DOMAIN_PLURAL, namespace, name) not in self.foreign
        if ours and was is None and not deleting and event == "ADDED":
            self.created.add(uid)
        if deleting and not (was is not None and was[3]):
            # Listed already deleting after a gap: its deletion started somewhere between the gap and this version.
            since = self.domain_gap_from if event == LISTED else _version(domain)
            self.pending.append(_Deletion(namespace, name, _template_of(domain), _version(domain), since))
            found += self.progress(self.pods_seen_to)
        if event == "DELETED":
            self.domains.pop(uid, None)
            if ours:
                self.deleted.add(uid)
        else:
            self.domains[uid] = (namespace, name, _template_of(domain), deleting)
        return found

    def progress(self, moment: int) -> list[Violation]:
        """The pod watch has delivered everything up to `moment` (an event, a bookmark, a re-list): judge every
        deletion that started by then against the pods as they were at its start."""
        self.pods_seen_to = max(self.pods_seen_to, moment)
        ready = [d for d in self.pending if d.moment <= self.pods_seen_to]
        self.pending = [d for d in self.pending if d.moment > self.pods_seen_to]
        return [v for deletion in ready for v in self._judge(deletion)]

    def finish(self) -> list[Violation]:
        """At the end of the run: a deletion the pod watch never reached cannot be judged; it is inconclusive."""
        self.inconclusive += [f"{d.namespace}/{d.name}: the pod watch never reached its deletion" for d in self.pending]
        self.pending = []
        return []

    # --- judgements -------------------------------------------------------------------------------------------

    def users_at(self, moment: int, namespace: str, domain: str, template: str) -> dict[str, str]:
        """uid → namespace/name of the pods referencing the domain at `moment`."""
        users = {}
        for uid, history in self.pods.items():
            then = _at(history, moment)
            if then is not None and then.namespace == namespace and then.references(domain, template):
                users[uid] = f"{then.namespace}/{then.name}"
        return users

    def _judge(self, deletion: _Deletion) -> list[Violation]:
        """Exactly, against the pods at its start; where a watch gap hides when it started or what the pods did,
        against the pods that referenced it both before and after the gap (a pod cannot stop referencing a domain
        and start again), the others counted as inconclusive."""
        self.checks[DELETED_UNDER_A_POD] += 1
        start, end = deletion.since, deletion.moment
        for gap_from, gap_to in self.pod_gaps:
            if gap_from < end and gap_to >= start:
                start, end = min(start, gap_from), max(end, gap_to)
        before = self.users_at(start, deletion.namespace, deletion.name, deletion.template)
        after = self.users_at(end, deletion.namespace, deletion.name, deletion.template) if end != start else before
        users = sorted(name for uid, name in before.items() if uid in after)
        if len(users) < len(before):
            self.inconclusive.append(f"{deletion.namespace}/{deletion.name}: its users in a watch gap are unknown")
        if not users:
            return []
        return self._violation(
            DELETED_UNDER_A_POD,
            end,
            (f"{deletion.namespace}/{deletion.name}", *users),
            f"deletion of {deletion.name} started while {', '.join(users)} referenced it",
        )

    def incarnation(self, view: PodView) -> tuple[str, ...] | None:
        """The group incarnation of a pod of ours, or None while an owner on its way up is not known yet."""
        if view.scope == keys.SCOPE_REPLICA:
            if view.leader:
                return ("replica", view.uid)
            statefulset = view.owner
            leader = self.owners.get(statefulset[1]) if statefulset and statefulset[0] == "StatefulSet" else None
            return ("replica", leader[1]) if leader and leader[0] == "Pod" else None
        if view.scope == keys.SCOPE_SLICE and view.slice_revision is not None:
            owner, hops = view.owner, 0
            while owner is not None and owner[0] != keys.DS_KIND and hops < 5:
                owner, hops = self.owners.get(owner[1]) or self._pod_owner(owner), hops + 1
            return ("slice", owner[1], *view.slice_revision) if owner and owner[0] == keys.DS_KIND else None
        return None

    def _pod_owner(self, owner: tuple[str, str]) -> tuple[str, str] | None:
        """A leader pod's own controller owner (a worker's StatefulSet is owned by its leader pod)."""
        if owner[0] != "Pod" or owner[1] not in self.pods:
            return None
        latest = next((view for _, view in reversed(self.pods[owner[1]]) if view is not None), None)
        return latest.owner if latest is not None else None

    def _group(self, view: PodView) -> list[Violation]:
        if not view.live or not view.recorded:
            return []
        incarnation = self.incarnation(view)
        if incarnation is None:
            return []
        self.checks[ONE_GROUP_ONE_DOMAIN] += 1
        others = sorted(
            f"{other.namespace}/{other.name} ({other.recorded})"
            for other in self._current_pods()
            if other.uid != view.uid
            and other.live
            and other.recorded
            and other.recorded != view.recorded
            and other.namespace == view.namespace
            and self.incarnation(other) == incarnation
        )
        if not others:
            return []
        return self._violation(
            ONE_GROUP_ONE_DOMAIN,
            self.pods_seen_to,
            (f"{view.namespace}/{view.name}", *others),
            f"{view.name} records {view.recorded}, and {', '.join(others)}",
        )

    def _current_pods(self) -> Iterable[PodView]:
        return (history[-1][1] for history in self.pods.values() if history[-1][1] is not None)

    def _record(self, uid: str, moment: int, view: PodView | None) -> None:
        history = self.pods.setdefault(uid, [])
        if history and history[-1][0] > moment:
            return  # an older state, delivered again by a re-list or a resumed watch
        history.append((moment, view))

    def _violation(self, invariant: str, moment: int, objects: tuple[str, ...], detail: str) -> list[Violation]:
        """Recorded once per invariant and set of objects (a pair of pods found again at a later event is one); a
        foreign object's every distinct change counts."""
        if any(
            v.invariant == invariant
            and set(v.objects) == set(objects)
            and (invariant != NOTHING_FOREIGN_WRITTEN or v.detail == detail)
            for v in self.violations
        ):
            return []
        found = Violation(invariant=invariant, moment=moment, objects=objects, detail=detail)
        self.violations.append(found)
        return [found]


def _version(body: Object) -> int:
    return int(body["metadata"].get("resourceVersion") or 0)


def _at(history: list[tuple[int, PodView | None]], moment: int) -> PodView | None:
    """The pod as it was at `moment`: its last write at or before it (None: not there yet, or gone)."""
    then = None
    for written, view in history:
        if written > moment:
            break
        then = view
    return then
