"""What raw watches saw of each group incarnation and of the chain that ungates it; the latencies the latency
scenarios (`ungate`, `restart`, `slices`) report from it.

A group incarnation is one leader pod, by uid (a leader is a pod labelled `worker-index: "0"`: LWS's leader
StatefulSet template carries it, so it is there at first sight): a restarted or replaced group is a new
incarnation under the same name. Four watches of the namespace (pods, StatefulSets, ComputeDomains,
ResourceClaimTemplates) stamp each event on arrival (`time.monotonic`, as `common.Watch` does); only the first
sight of each thing counts, DELETED events none:

- leader: the leader pod first seen;
- ungated: the leader first seen without mnnvl's scheduling gate (a leader admitted without one: its first sight);
- worker set: upstream LWS's worker StatefulSet for this incarnation (its controller is the leader pod, by uid)
  first seen;
- domain: the ComputeDomain the leader records (its `compute-domain-name` annotation, which mnnvl's pod webhook
  writes at admission: `references.recorded_domain`) first seen;
- template: the ResourceClaimTemplate that domain names (`spec.channel.resourceClaimTemplate.name`; NVIDIA's
  controller creates it) first seen;
- ready: the domain first seen with `status.status == "Ready"` (which may never come; mnnvl does not wait for it,
  so a measured step keeps watching up to READY_GRACE_SECONDS after both sides are done).

Domains and templates are stamped by name, whichever arrives first, so the chain stays defined whatever the order:
a domain may be seen before its leader (created at admission, or for a slice as soon as its LeaderWorkerSet
exists). Latencies of one incarnation, in seconds (None where a stamp is missing):

- gated (mnnvl) = ungated - leader: how long the leader waited for mnnvl, as a user sees it;
- upstream = worker set - leader: upstream LWS's own reaction to the same leader;
- driver's part = template - domain: the span mnnvl's gate waits for (the driver adds its finalizer and creates
  the template; mnnvl lifts the gate once the template exists);
- mnnvl's share = gated - the part of the driver's span [domain, template] that lies within the gated span
  [leader, ungated]. While mnnvl creates the domain after it sees the leader, the whole driver's part lies within
  and this is gated minus the driver's part; driver's time before the leader was first seen kept no pod waiting, so
  it is not subtracted, and the share never goes below 0;
- to ready = ready - domain (the driver's whole chain, domain created to Ready).

Ratios are of percentiles over the incarnations each side finished: mnnvl p50 / upstream p50 (and p99), and
gated p50 / driver's part p50.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import common

from mnnvl_api import keys
from mnnvl_api.decisions import injection, references
from mnnvl_runtime import kube

TEMPLATE_API = "resource.k8s.io/v1"
READY = "Ready"
#: How long a measured step keeps watching, once both sides are done, for domains to be seen Ready.
READY_GRACE_SECONDS = 10.0


def _span(start: float | None, end: float | None) -> float | None:
    return end - start if start is not None and end is not None else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Group:
    """One incarnation's stamps (time.monotonic on arrival; None: never seen)."""

    name: str
    uid: str
    leader: float
    ungated: float | None
    worker_set: float | None
    domain: float | None
    template: float | None
    ready: float | None

    @property
    def admitted_ungated(self) -> bool:
        """Whether the leader was never seen gated (its domain was ready when it was admitted)."""
        return self.ungated == self.leader

    @property
    def gated(self) -> float | None:
        return _span(self.leader, self.ungated)

    @property
    def upstream(self) -> float | None:
        return _span(self.leader, self.worker_set)

    @property
    def driver(self) -> float | None:
        return _span(self.domain, self.template)

    @property
    def share(self) -> float | None:
        if self.ungated is None or self.domain is None or self.template is None:
            return None
        overlap = min(self.template, self.ungated) - max(self.domain, self.leader)
        return self.ungated - self.leader - max(overlap, 0.0)

    @property
    def to_ready(self) -> float | None:
        return _span(self.domain, self.ready)


@dataclasses.dataclass(kw_only=True)
class _Leader:
    name: str
    seen: float
    ungated: float | None = None
    domain: str | None = None


class Chain:
    """Stamps, from watch events, of the incarnations whose leader uid is not in `ignore` (the leaders that existed
    before the measured step: the watches also see them change or go)."""

    def __init__(self, *, ignore: Collection[str] = ()) -> None:
        self.ignore = frozenset(ignore)
        self._lock = threading.Lock()
        self._leaders: dict[str, _Leader] = {}
        self._worker_sets: dict[str, float] = {}  # by the uid of the leader pod that controls the StatefulSet
        self._domains: dict[str, float] = {}
        self._template_of: dict[str, str] = {}  # domain name -> its claim template's name
        self._ready: dict[str, float] = {}
        self._templates: dict[str, float] = {}

    def on_pod(self, arrived: float, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if kind == "DELETED" or (meta.get("labels") or {}).get(keys.LWS_WORKER_INDEX_LABEL) != "0":
            return
        if meta["uid"] in self.ignore:
            return
        with self._lock:
            leader = self._leaders.setdefault(meta["uid"], _Leader(name=meta["name"], seen=arrived))
            leader.domain = leader.domain or references.recorded_domain(pod)
            if leader.ungated is None and not injection.is_gated(pod["spec"]):
                leader.ungated = arrived

    def on_statefulset(self, arrived: float, kind: str, statefulset: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        for owner in statefulset["metadata"].get("ownerReferences") or ():
            if owner.get("controller") and owner.get("kind") == "Pod":
                with self._lock:
                    self._worker_sets.setdefault(owner["uid"], arrived)

    def on_domain(self, arrived: float, kind: str, domain: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = domain["metadata"]["name"]
        template = (((domain.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
        with self._lock:
            self._domains.setdefault(name, arrived)
            if template:
                self._template_of.setdefault(name, str(template))
            if (domain.get("status") or {}).get("status") == READY:
                self._ready.setdefault(name, arrived)

    def on_template(self, arrived: float, kind: str, template: dict[str, Any]) -> None:
        if kind != "DELETED":
            with self._lock:
                self._templates.setdefault(template["metadata"]["name"], arrived)

    @contextlib.contextmanager
    def watching(self, api: kube.Kube, ns: str) -> Iterator[list[common.Watch]]:
        """The four watches of `ns`, feeding this chain until the block ends."""
        handlers: list[tuple[str, Callable[[float, str, dict[str, Any]], None]]] = [
            (kube.path_of("v1", "pods", namespace=ns), self.on_pod),
            (kube.path_of("apps/v1", "statefulsets", namespace=ns), self.on_statefulset),
            (kube.path_of(common.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns), self.on_domain),
            (kube.path_of(TEMPLATE_API, "resourceclaimtemplates", namespace=ns), self.on_template),
        ]
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(common.Watch(api, path, handler)) for path, handler in handlers]

    def groups(self) -> list[Group]:
        with self._lock:
            found = []
            for uid, leader in self._leaders.items():
                template = self._template_of.get(leader.domain or "")
                found.append(
                    Group(
                        name=leader.name,
                        uid=uid,
                        leader=leader.seen,
                        ungated=leader.ungated,
                        worker_set=self._worker_sets.get(uid),
                        domain=self._domains.get(leader.domain or ""),
                        template=self._templates.get(template or ""),
                        ready=self._ready.get(leader.domain or ""),
                    )
                )
        return sorted(found, key=lambda group: group.leader)

    # The two counts below are polled while the watches run: they read the stamps directly, under the lock, so a
    # poll of a thousand groups does not keep the watch threads from stamping their events.

    def finished(self) -> int:
        """Incarnations both sides have finished: ungated, and with their worker StatefulSet."""
        with self._lock:
            return sum(
                1 for uid, seen in self._leaders.items() if seen.ungated is not None and uid in self._worker_sets
            )

    def unready(self) -> int:
        """Incarnations whose domain has been seen, but not yet Ready."""
        with self._lock:
            return sum(
                1 for seen in self._leaders.values() if seen.domain in self._domains and seen.domain not in self._ready
            )

    def wait(self, expected: int, timeout: float) -> None:
        """Until `expected` incarnations are finished, or `timeout` seconds; then up to READY_GRACE_SECONDS more
        for their domains to be seen Ready (mnnvl does not wait for it, so it can come after both sides are done).
        What is missing is reported, not raised: a benchmark measures what happened."""
        deadline = time.monotonic() + timeout
        while self.finished() < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = min(deadline, time.monotonic() + READY_GRACE_SECONDS)
        while self.unready() and time.monotonic() < deadline:
            time.sleep(0.05)


def measure(
    api: kube.Kube, ns: str, act: Callable[[], None], *, expected: int, timeout: float, ignore: Collection[str] = ()
) -> tuple[list[Group], int]:
    """Watch `ns`, do `act`, wait for `expected` new incarnations to finish (or `timeout`); their stamps and the
    watches' errors."""
    chain = Chain(ignore=ignore)
    with chain.watching(api, ns) as watches:
        act()
        chain.wait(expected, timeout)
    return chain.groups(), sum(len(watch.errors) for watch in watches)


#: Seconds the namespace may take to drain after a burst, per group, beyond 300 s.
DRAIN_SECONDS_PER_GROUP = 3.0


def burst(
    api: kube.Kube, ns: str, *, create: Callable[[], None], delete: Callable[[], None], groups: int, timeout: float
) -> tuple[list[Group], int]:
    """One burst: `create` the workload, wait until its `groups` leaders are ungated and have their worker
    StatefulSets (or `timeout`), `delete` it and wait for `ns` to drain; the stamps and the watches' errors."""
    measured = measure(api, ns, create, expected=groups, timeout=timeout)
    delete()
    common.wait_drained(api, ns, timeout=300 + DRAIN_SECONDS_PER_GROUP * groups)
    return measured


# --- reporting ---------------------------------------------------------------------------------------------

HEADERS = (
    "mnnvl p50 ms",
    "mnnvl p99 ms",
    "upstream p50 ms",
    "upstream p99 ms",
    "ratio p50",
    "ratio p99",
    "driver's part p50 ms",
    "mnnvl share p50 ms",
    "gated / driver p50",
    "domain → Ready p50 ms",
    "never ungated",
)


def _ms(groups: Sequence[Group], latency: Callable[[Group], float | None], q: float) -> float:
    values = [value for group in groups if (value := latency(group)) is not None]
    return common.percentile(values, q) * 1e3


def row(groups: Sequence[Group], expected: int) -> list[object]:
    """The HEADERS columns for `groups`, of which `expected` were meant to be ungated."""
    gated = (_ms(groups, lambda g: g.gated, 50), _ms(groups, lambda g: g.gated, 99))
    upstream = (_ms(groups, lambda g: g.upstream, 50), _ms(groups, lambda g: g.upstream, 99))
    driver = _ms(groups, lambda g: g.driver, 50)
    ungated = sum(1 for g in groups if g.ungated is not None)
    return [
        gated[0],
        gated[1],
        upstream[0],
        upstream[1],
        common.ratio(gated[0], upstream[0]),
        common.ratio(gated[1], upstream[1]),
        driver,
        _ms(groups, lambda g: g.share, 50),
        common.ratio(gated[0], driver),
        _ms(groups, lambda g: g.to_ready, 50),
        max(expected - ungated, 0),
    ]


def save_plots(
    panels: Sequence[tuple[str, Sequence[Group]]], path: pathlib.Path, title: str, *, upstream_label: str
) -> None:
    """One subplot per measured step (its title, its groups), wide enough for `title` above them even when there
    is only one, saved to `path`."""
    figure = common.figure(len(panels), width=max(5.0, 9.0 / len(panels)))
    for axes, (name, groups) in zip(figure.axes, panels, strict=True):
        plot(axes, groups, name, upstream_label=upstream_label)
    common.save(figure, path, title)


def plot(axes: Any, groups: Sequence[Group], title: str, *, upstream_label: str) -> None:
    """Cumulative latencies of one measured step: mnnvl's gate, upstream's reaction, the driver's part."""
    lines: list[tuple[str, Callable[[Group], float | None]]] = [
        ("mnnvl: gate removed", lambda g: g.gated),
        (f"upstream LWS: {upstream_label}", lambda g: g.upstream),
        ("driver's part: domain → claim template", lambda g: g.driver),
    ]
    for label, latency in lines:
        values = [value for group in groups if (value := latency(group)) is not None]
        common.cumulative(axes, values, label, marker=".")
    axes.set_title(title)
    axes.set_xlabel("ms (mnnvl, upstream: after the leader pod is first seen)")
    axes.set_ylabel("fraction of groups")
    axes.set_ylim(0, 1.05)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="lower right")
