"""The deletion fence across Lease terms and replicas: timed from this replica's first sight of *this* mark during
*this* term, never from an earlier sighting; and the writer's memory of marks and warnings stays bounded.

Two DomainWriters (replicas A and B of one controller) share an in-memory API server and a clock; who leads, and
in which term, is scripted step by step as the issue's interleaving describes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains
from mnnvl_runtime import domain_writer, kube

from .memory_api import MemoryApi, MemoryClient

NS = "serving"
NAME = "dsr1-0-bbbbb"
FENCE = 10.0
WORKLOAD = domain_writer.involved(keys.LWS_API_VERSION, "LeaderWorkerSet", NS, "dsr1", "uid-dsr1")
#: The value a replica of the release before marks carried: the controller's name, the same for every mark.
LEGACY_MARK = keys.LWS_CONTROLLER


def managed(facts: domains.DomainFacts) -> bool:
    return facts.managed


@dataclasses.dataclass
class Replica:
    """One controller replica: its domain writer, whether it leads, and which of its terms this is."""

    writer: domain_writer.DomainWriter
    leading: bool = False
    terms: int = 0

    def lead(self) -> None:
        self.leading, self.terms = True, self.terms + 1

    def step_down(self) -> None:
        self.leading = False

    def fenced_delete(self) -> domain_writer.Deletion:
        return asyncio.run(self.writer.fenced_delete(NS, NAME, belongs=managed, workload=WORKLOAD))


class Cluster:
    def __init__(self) -> None:
        self.api = MemoryApi()
        self.now = 0.0
        self.put_domain(NAME)

    def put_domain(self, name: str) -> None:
        labels = {keys.OWNER_UID_LABEL: "uid-dsr1", keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
        self.api.put(
            keys.COMPUTE_DOMAIN_PLURAL,
            {
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": labels,
                    "finalizers": [keys.PROTECTION_FINALIZER],
                },
                "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
            },
            manager=keys.LWS_CONTROLLER,
        )

    def replica(self, client: MemoryClient | None = None) -> Replica:
        replica = Replica(writer=None)  # type: ignore[arg-type]  # the writer needs the replica's own flags
        replica.writer = domain_writer.DomainWriter(
            client or self.api.client(keys.LWS_CONTROLLER),
            component=keys.LWS_CONTROLLER,
            scope=keys.SCOPE_REPLICA,
            fence_seconds=FENCE,
            clock=lambda: self.now,
            may_write=lambda: replica.leading,
            term=lambda: replica.terms,
        )
        return replica

    def domain(self) -> dict[str, Any] | None:
        return self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)

    def mark(self) -> str | None:
        domain = self.domain()
        return None if domain is None else (domain["metadata"].get("annotations") or {}).get(keys.CONDEMNED_ANNOTATION)

    def admitted_pod(self, name: str) -> dict[str, Any]:
        """A pod whose admission read the domain (not condemned, so admitted onto it); persisted later."""
        return {
            "metadata": {"name": name, "namespace": NS, "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: NAME}},
            "spec": {"containers": []},
            "status": {"phase": "Pending"},
        }

    def persist(self, pod: dict[str, Any]) -> None:
        self.api.put("pods", pod, manager="kube-apiserver")

    def remove_pod(self, name: str) -> None:
        self.api.delete("pods", NS, name)

    def set_mark_by_hand(self, value: str | None) -> None:
        """What a replica of the release before does to the mark (its value the controller's name, no nonce)."""

        def change(body: dict[str, Any]) -> None:
            annotations = body["metadata"].setdefault("annotations", {})
            if value is None:
                annotations.pop(keys.CONDEMNED_ANNOTATION, None)
            else:
                annotations[keys.CONDEMNED_ANNOTATION] = value

        self.api.update(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME, change)

    def deletion_began(self) -> bool:
        return bool(self.api.teardowns)


def test_a_replica_that_led_before_times_the_fence_from_the_new_mark_not_from_its_old_sighting() -> None:
    """The issue's interleaving: A condemns D and loses the Lease; B lifts the mark (a user appeared) and condemns
    D again; a pod's admission read D just before B's mark; A leads again. A's sighting of its own, older mark must
    not make B's mark look fenced: the pod is still being admitted (it may take up to the fence to persist)."""
    cluster = Cluster()
    a, b = cluster.replica(), cluster.replica()

    a.lead()
    assert a.fenced_delete() == domain_writer.Deletion(come_back_after=FENCE)  # condemned at t=0
    assert cluster.mark() is not None

    cluster.now = 1.0
    a.step_down()
    b.lead()
    cluster.persist(cluster.admitted_pod("short-lived"))  # admitted before A's mark: a user, so B lifts the mark
    assert b.fenced_delete() == domain_writer.Deletion()
    assert cluster.mark() is None
    cluster.remove_pod("short-lived")

    cluster.now = 2.0
    in_flight = cluster.admitted_pod("late")  # its webhook reads D now, unmarked: admitted onto D
    assert b.fenced_delete() == domain_writer.Deletion(come_back_after=FENCE)  # B condemns D again at t=2
    assert cluster.mark() is not None

    cluster.now = 3.0
    b.step_down()
    a.lead()
    cluster.now = 11.0  # 11 s after A first saw its own mark, only 9 s after B's
    assert a.fenced_delete().deleted is False
    assert not cluster.deletion_began()

    cluster.now = 11.5
    cluster.persist(in_flight)  # the late admission lands within the fence of B's mark
    cluster.now = 21.0
    assert a.fenced_delete() == domain_writer.Deletion()  # the fresh list finds the pod: the mark is lifted
    assert cluster.domain() is not None
    assert cluster.mark() is None
    assert not cluster.deletion_began()


def test_a_new_term_forgets_sightings_even_of_a_mark_with_the_same_value() -> None:
    """Marks written by the release before all carry the same value, so only the term tells A's old sighting
    from the mark set again while A did not lead."""
    cluster = Cluster()
    a = cluster.replica()

    a.lead()
    cluster.set_mark_by_hand(LEGACY_MARK)  # marked by the previous release's leader
    assert a.fenced_delete() == domain_writer.Deletion(come_back_after=FENCE)  # A first sees the mark at t=0: waits

    cluster.now = 1.0
    a.step_down()  # the other replica (previous release) leads: lifts the mark, marks D again
    cluster.set_mark_by_hand(None)
    cluster.now = 2.0
    in_flight = cluster.admitted_pod("late")
    cluster.set_mark_by_hand(LEGACY_MARK)

    cluster.now = 3.0
    a.lead()
    cluster.now = 11.0
    assert a.fenced_delete().deleted is False
    cluster.now = 11.5
    cluster.persist(in_flight)
    cluster.now = 21.0
    assert a.fenced_delete() == domain_writer.Deletion()
    assert cluster.domain() is not None
    assert not cluster.deletion_began()


def test_a_mark_lifted_and_set_again_within_one_term_gets_a_fence_of_its_own() -> None:
    """B, deposed, still has writes in flight that land while A leads (one term of A throughout): its lift and
    its new mark. A times the fence from its first sight of B's mark, not of its own."""
    cluster = Cluster()
    a, b = cluster.replica(), cluster.replica()

    a.lead()
    assert a.fenced_delete() == domain_writer.Deletion(come_back_after=FENCE)  # A's mark at t=0
    cluster.now = 1.0
    b.leading = True  # B's requests were sent while it led; they reach the API server only now
    cluster.persist(cluster.admitted_pod("short-lived"))
    assert b.fenced_delete() == domain_writer.Deletion()  # lifts A's mark
    cluster.remove_pod("short-lived")
    cluster.now = 2.0
    in_flight = cluster.admitted_pod("late")
    assert b.fenced_delete() == domain_writer.Deletion(come_back_after=FENCE)  # B's own mark
    b.leading = False

    cluster.now = 10.5
    assert a.fenced_delete().deleted is False
    cluster.now = 11.0
    cluster.persist(in_flight)
    cluster.now = 20.5
    assert a.fenced_delete() == domain_writer.Deletion()
    assert cluster.domain() is not None
    assert not cluster.deletion_began()


class SlowList(MemoryClient):
    """Every page of a list takes a second of the cluster's clock."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.api, keys.LWS_CONTROLLER, sender="")
        self.cluster = cluster

    async def alist_page(self, api_version: str, plural: str, **kwargs: Any) -> kube.Page:
        page = await super().alist_page(api_version, plural, **kwargs)
        self.cluster.now += 1.0
        return page


def test_the_fence_is_counted_to_when_the_final_pod_list_began() -> None:
    """A pod persisted while the final list runs may be missing from it, so the time that counts is the list's
    start: a list that ends after the fence but began before it decides nothing yet."""
    cluster = Cluster()
    a = cluster.replica(SlowList(cluster))
    a.lead()
    assert a.fenced_delete().come_back_after == FENCE  # condemned once the list (t=0..1) found no user
    cluster.now = FENCE + 0.5  # the fence started at t=1 (the mark written): 9.5 s ago when the list begins
    assert a.fenced_delete().deleted is False
    assert not cluster.deletion_began()
    assert a.fenced_delete().deleted is True  # began at t=11.5, 10.5 s after the mark: the fence has passed


def test_the_sightings_of_marks_stay_bounded() -> None:
    """A domain deleted by someone else is forgotten on the next pass; one no pass comes back to is forgotten once
    its sighting is older than the fence plus SIGHTING_KEPT_AFTER_FENCE_SECONDS."""
    cluster = Cluster()
    a = cluster.replica()
    a.lead()
    a.fenced_delete()
    assert len(a.writer._condemned_seen) == 1
    cluster.api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    a.fenced_delete()
    assert a.writer._condemned_seen == {}

    many = 50
    for index in range(many):
        cluster.put_domain(f"{NAME}-{index}")
        asyncio.run(a.writer.fenced_delete(NS, f"{NAME}-{index}", belongs=managed, workload=WORKLOAD))
    assert len(a.writer._condemned_seen) == many  # condemned, and never looked at again
    cluster.now = FENCE + domain_writer.SIGHTING_KEPT_AFTER_FENCE_SECONDS + 1.0
    cluster.put_domain(f"{NAME}-last")
    asyncio.run(a.writer.fenced_delete(NS, f"{NAME}-last", belongs=managed, workload=WORKLOAD))
    assert list(a.writer._condemned_seen) == [(NS, f"{NAME}-last")]


def test_the_warnings_remembered_stay_bounded_and_the_oldest_may_warn_again() -> None:
    cluster = Cluster()
    writer = cluster.replica().writer

    def warn(index: int) -> bool:
        return asyncio.run(writer.warn_once(WORKLOAD, "Reason", f"message {index}"))

    assert warn(0)
    assert not warn(0)
    for index in range(1, domain_writer.WARNINGS_REMEMBERED + 1):
        assert warn(index)
    assert len(writer._warned) == domain_writer.WARNINGS_REMEMBERED
    assert warn(0)  # forgotten as the oldest: posted once more
    assert not warn(domain_writer.WARNINGS_REMEMBERED)  # the newest is still remembered
