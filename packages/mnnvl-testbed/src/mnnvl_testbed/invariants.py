"""The chaos run's invariant watcher, its decisions: plain objects from the watcher's own watches in, violations out.

Independent of the controllers' code on purpose: it reads pods and ComputeDomains as the API server returns them and
decides with rules written here from the user contract (annotation, label and claim names), never with the
controllers' decision functions, so that a defect in those cannot hide itself from the watcher. Each event updates the
watcher's own view; the checks it makes then:

- a domain whose deletion starts (its first event carrying `deletionTimestamp`, or its DELETED event when it never
  carried one) while a non-terminal pod in the view references it (records its name or holds its claim template);
- a pod of an opted-in workload bound to a node while a GPU container of it lacks the channel claim;
- two non-terminal pods of one replica group (LeaderWorkerSet name and group index) recording two domains;
- a write (a new resourceVersion) to an object that is not ours, watched throughout (a foreign look-alike).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from mnnvl_api import keys

Object = Mapping[str, Any]
TERMINAL = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Violation:
    invariant: str
    #: The event count at which the watcher saw it, and the objects involved (namespace/name).
    moment: int
    objects: tuple[str, ...]
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodView:
    namespace: str
    name: str
    terminal: bool
    bound: bool
    recorded: str | None
    claim_templates: frozenset[str]
    #: GPU containers (and restartable init containers) without a reference to the channel claim.
    unclaimed_gpu_containers: tuple[str, ...]
    #: (LeaderWorkerSet name, group index) for a replica-scope pod.
    group: tuple[str, str] | None
    opted_in: bool


def _gpu(container: Object) -> bool:
    resources = container.get("resources") or {}
    return any(
        str((resources.get(kind) or {}).get(keys.GPU_RESOURCE, "0")).strip() not in ("", "0")
        for kind in ("limits", "requests")
    )


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
    group_index = labels.get(keys.LWS_GROUP_INDEX_LABEL)
    lws = labels.get(keys.LWS_NAME_LABEL)
    scope = labels.get(keys.SCOPE_LABEL)
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta["name"]),
        terminal=(pod.get("status") or {}).get("phase") in TERMINAL,
        bound=bool(spec.get("nodeName")),
        recorded=annotations.get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION),
        claim_templates=frozenset(
            str(claim["resourceClaimTemplateName"]) for claim in claims if claim.get("resourceClaimTemplateName")
        ),
        unclaimed_gpu_containers=unclaimed,
        group=(str(lws), str(group_index)) if scope == keys.SCOPE_REPLICA and lws and group_index else None,
        opted_in=scope in (keys.SCOPE_REPLICA, keys.SCOPE_SLICE),
    )


def _template_of(domain: Object) -> str:
    return str((((domain.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name", ""))


@dataclasses.dataclass
class Watcher:
    """The watcher's view: every pod and ComputeDomain as last seen, keyed by uid, and the foreign objects watched."""

    pods: dict[str, PodView] = dataclasses.field(default_factory=dict)
    #: domain uid → (namespace, name, claim template, deleting)
    domains: dict[str, tuple[str, str, str, bool]] = dataclasses.field(default_factory=dict)
    #: (plural, uid) → the resourceVersion of a foreign object when the run began
    foreign: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    events: int = 0
    violations: list[Violation] = dataclasses.field(default_factory=list)

    def watch_foreign(self, plural: str, body: Object) -> None:
        meta = body["metadata"]
        self.foreign[(plural, str(meta["uid"]))] = str(meta["resourceVersion"])

    def on_pod(self, kind: str, pod: Object) -> list[Violation]:
        self.events += 1
        uid = str(pod["metadata"]["uid"])
        if kind == "DELETED":
            self.pods.pop(uid, None)
            return []
        view = pod_view(pod)
        self.pods[uid] = view
        found: list[Violation] = []
        if view.opted_in and view.bound and not view.terminal and view.unclaimed_gpu_containers:
            found.append(
                self._violation(
                    "opted-in pod runs without its claim",
                    (f"{view.namespace}/{view.name}",),
                    f"GPU containers {list(view.unclaimed_gpu_containers)} lack {keys.CHANNEL_CLAIM_NAME}",
                )
            )
        if view.group is not None and view.recorded and not view.terminal:
            others = sorted(
                f"{other.namespace}/{other.name} ({other.recorded})"
                for other in self.pods.values()
                if other.group == view.group
                and other.namespace == view.namespace
                and not other.terminal
                and other.recorded
                and other.recorded != view.recorded
            )
            if others:
                found.append(
                    self._violation(
                        "one group, one domain",
                        (f"{view.namespace}/{view.name}", *others),
                        f"group {view.group[1]} of {view.group[0]}: {view.recorded} and {', '.join(others)}",
                    )
                )
        return found

    def on_domain(self, kind: str, domain: Object) -> list[Violation]:
        self.events += 1
        meta = domain["metadata"]
        uid = str(meta["uid"])
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        was = self.domains.get(uid)
        deleting = bool(meta.get("deletionTimestamp")) or kind == "DELETED"
        found: list[Violation] = []
        key = (keys.COMPUTE_DOMAIN_PLURAL, uid)
        if key in self.foreign and str(meta.get("resourceVersion")) != self.foreign[key]:
            found.append(
                self._violation("nothing foreign written", (f"{namespace}/{name}",), "a foreign domain changed")
            )
        if deleting and not (was is not None and was[3]):
            users = sorted(self.users(namespace, name, _template_of(domain)))
            if users:
                found.append(
                    self._violation(
                        "no domain deleted under a pod",
                        (f"{namespace}/{name}", *users),
                        f"deletion of {name} started while {', '.join(users)} referenced it",
                    )
                )
        if kind == "DELETED":
            self.domains.pop(uid, None)
        else:
            self.domains[uid] = (namespace, name, _template_of(domain), deleting)
        return found

    def users(self, namespace: str, domain: str, template: str) -> Iterable[str]:
        return (
            f"{pod.namespace}/{pod.name}"
            for pod in self.pods.values()
            if pod.namespace == namespace
            and not pod.terminal
            and (pod.recorded == domain or (template and template in pod.claim_templates))
        )

    def _violation(self, invariant: str, objects: tuple[str, ...], detail: str) -> Violation:
        found = Violation(invariant=invariant, moment=self.events, objects=objects, detail=detail)
        self.violations.append(found)
        return found
