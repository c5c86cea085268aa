"""Safety of the whole replica-scope protocol over arbitrary interleavings of admission and reconciliation.

The real pod webhook decision (`admission.admit_pod`), stores, planner and executor (with the shared domain
writer) run against an in-memory API server. Hypothesis interleaves: leaders and workers whose admission is
begun and persisted as separate steps (a pod may be persisted any time until its admission deadline, which is
shorter than the deletion fence), group restarts and evictions, stores that lag behind the API (the
controller's and a second replica's, each fed events at its own pace), re-lists, controller restarts that lose
all memory, and time passing. After every step:

- no ComputeDomain is torn down while a non-terminal pod holds its claim or records it;
- no pod is ever bound to a domain whose deletion has begun;
- no worker of the current leader incarnation is bound to another domain than its leader's;
- a foreign domain carrying our labels is never written.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_lws import admission, executor, planner, state

from .harness import GPU, NS, ScopeMachine
from .memory_api import Object

LWS = "dsr1"
GROUPS = (0, 1)
WORKERS = (1, 2)
CPU = {"name": "proxy", "image": "proxy"}


def pod_body(name: str, *, leader: str | None, gpu: bool, owner: dict[str, Any] | None = None) -> Object:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "labels": {keys.LWS_NAME_LABEL: LWS, keys.SCOPE_LABEL: keys.SCOPE_REPLICA},
        "annotations": {keys.LWS_LEADER_NAME_ANNOTATION: leader} if leader else {},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "metadata": meta,
        "spec": {"containers": [copy.deepcopy(GPU if gpu else CPU)]},
        "status": {"phase": "Pending"},
    }


class ReplicaScope(ScopeMachine[state.Stores, executor.Executor]):
    def __init__(self) -> None:
        super().__init__(
            component=keys.LWS_CONTROLLER,
            scope=keys.SCOPE_REPLICA,
            new_stores=state.Stores,
            new_executor=executor.Executor,
        )
        self.tokens = (
            "".join(t)
            for t in itertools.product(names.INCARNATION_TOKEN_ALPHABET, repeat=names.INCARNATION_TOKEN_LENGTH)
        )
        lws = self.api.put(
            "leaderworkersets",
            {
                "metadata": {
                    "name": LWS,
                    "namespace": NS,
                    "annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"},
                }
            },
            manager="kubectl",
        )
        workload = planner.Workload(namespace=NS, name=LWS, uid=lws["metadata"]["uid"])
        self.foreign = self._put_foreign_look_alike(
            names.replica_domain_name(LWS, 0, "zzzzz"), planner.domain_labels(workload, 0)
        )
        self._start_controller()

    # --- pods, as LWS, its StatefulSets and the API server's admission make them -----------------------

    def _admit_pod(self, body: Object) -> None:
        client = self.api.client(keys.LWS_CONTROLLER)
        self._admit(body, admission.admit_pod(client, self.webhook_stores, body, token=next(self.tokens)))

    @rule(group=st.sampled_from(GROUPS), gpu=st.booleans())
    def begin_leader(self, group: int, gpu: bool) -> None:
        name = f"{LWS}-{group}"
        if self._pod(name) is None and not self._is_pending(name):
            self._admit_pod(pod_body(name, leader=None, gpu=gpu))

    @rule(group=st.sampled_from(GROUPS), index=st.sampled_from(WORKERS))
    def begin_worker(self, group: int, index: int) -> None:
        statefulset = self.api.get("statefulsets", NS, f"{LWS}-{group}")
        name = f"{LWS}-{group}-{index}"
        if statefulset is None or self._pod(name) is not None:
            return
        owner = {
            "kind": "StatefulSet",
            "name": f"{LWS}-{group}",
            "uid": statefulset["metadata"]["uid"],
            "controller": True,
        }
        self._admit_pod(pod_body(name, leader=f"{LWS}-{group}", gpu=True, owner=owner))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def persist(self, data: st.DataObject) -> None:
        self._persist(self._take_pending(data))

    def _persist(self, body: Object) -> Object | None:
        """A persisted leader gets its group's StatefulSet, replacing one of an earlier incarnation."""
        created = super()._persist(body)
        name = body["metadata"]["name"]
        if created is not None and keys.LWS_LEADER_NAME_ANNOTATION not in body["metadata"]["annotations"]:
            if self.api.get("statefulsets", NS, name) is not None:
                self.api.delete("statefulsets", NS, name)
            owner = {"kind": "Pod", "name": name, "uid": created["metadata"]["uid"], "controller": True}
            self.api.put(
                "statefulsets", {"metadata": {"name": name, "namespace": NS, "ownerReferences": [owner]}}, manager="lws"
            )
        return created

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def abandon(self, data: st.DataObject) -> None:
        self._take_pending(data)

    @rule(group=st.sampled_from(GROUPS))
    def leader_fails(self, group: int) -> None:
        if self._pod(f"{LWS}-{group}") is not None:
            self._pod_fails(f"{LWS}-{group}")

    @rule(group=st.sampled_from(GROUPS), index=st.sampled_from((0, *WORKERS)))
    def pod_deleted(self, group: int, index: int) -> None:
        self._delete_pod(f"{LWS}-{group}" if index == 0 else f"{LWS}-{group}-{index}")

    @rule(group=st.sampled_from(GROUPS))
    def group_restarted(self, group: int) -> None:
        for name in (f"{LWS}-{group}", *(f"{LWS}-{group}-{i}" for i in WORKERS)):
            self._delete_pod(name)
        if self.api.get("statefulsets", NS, f"{LWS}-{group}") is not None:
            self.api.delete("statefulsets", NS, f"{LWS}-{group}")

    # --- the controller and a second replica's webhook, each behind the API by its own lag ----------------

    @rule(count=st.integers(1, 8))
    def controller_watch_catches_up(self, count: int) -> None:
        super().controller_watch_catches_up(count)

    @rule(count=st.integers(1, 8))
    def webhook_watch_catches_up(self, count: int) -> None:
        super().webhook_watch_catches_up(count)

    @rule()
    def controller_reconciles(self) -> None:
        """Decides from whatever the store holds, synced or not: the writer's fresh reads must keep it safe even
        where the cache-sync barrier (which holds the real reconciler until `synced`) would have waited."""
        snapshot = self.stores.snapshot(NS, LWS, gate_enabled=True)
        self.loop.run_until_complete(self.executor.apply(snapshot, planner.plan(snapshot)))

    # --- what must hold after every step, besides the invariants of every scope ---------------------------

    @invariant()
    def no_pod_is_bound_to_a_deleted_domain(self) -> None:
        for pod in self.api.all("pods"):
            if references.is_non_terminal(pod):
                bound = {references.recorded_domain(pod), *references.referenced_claim_templates(pod)}
                deleted = set(self.api.deleted_domains) | {
                    names.claim_template_name(d) for d in self.api.deleted_domains
                }
                assert not bound & deleted, f"{pod['metadata']['name']} is bound to deleted {bound & deleted}"

    @invariant()
    def a_group_never_spans_two_domains(self) -> None:
        for pod in self.api.all("pods"):
            owner = next(iter(pod["metadata"].get("ownerReferences") or ()), None)
            if owner is None:
                continue  # a leader
            statefulset = self.api.get("statefulsets", NS, owner["name"])
            if statefulset is None or statefulset["metadata"]["uid"] != owner["uid"]:
                continue  # a worker of a StatefulSet already replaced: not part of the current group
            leader_uid = statefulset["metadata"]["ownerReferences"][0]["uid"]
            leader = self._pod(owner["name"])
            if leader is None or leader["metadata"]["uid"] != leader_uid or not references.is_non_terminal(pod):
                continue
            assert references.recorded_domain(pod) == references.recorded_domain(leader)


ReplicaScope.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
test_replica_scope_interleavings = ReplicaScope.TestCase


def check(machine: ReplicaScope) -> None:
    machine.no_domain_is_torn_down_under_a_pod()
    machine.no_pod_is_bound_to_a_deleted_domain()
    machine.a_group_never_spans_two_domains()
    machine.a_foreign_look_alike_is_never_written()


def domains_of_group(machine: ReplicaScope, group: int) -> list[str]:
    return sorted(
        d["metadata"]["name"]
        for d in machine.api.all(keys.COMPUTE_DOMAIN_PLURAL)
        if d["metadata"]["labels"].get(keys.GROUP_INDEX_LABEL) == str(group)
        and d["metadata"]["uid"] != machine.foreign["metadata"]["uid"]
    )


def running_group(machine: ReplicaScope, *, gpu_leader: bool) -> str:
    """Group 0 with its leader persisted and its domain created; returns the domain."""
    machine.begin_leader(group=0, gpu=gpu_leader)
    machine.persist_named(f"{LWS}-0")
    machine.controller_relists()
    machine.controller_reconciles()
    machine.webhook_watch_catches_up(count=1000)
    (domain,) = domains_of_group(machine, 0)
    return domain


def test_a_worker_admitted_before_its_domain_was_condemned_is_seen_before_the_delete() -> None:
    """Scenario 1: a worker is admitted while its leader lives, the leader is evicted, the domain is condemned,
    and the worker is persisted only afterwards (between the controller's list and its delete, without a
    fence). The fence makes the final check see it: the domain is kept, never torn down under it."""
    machine = ReplicaScope()
    domain = running_group(machine, gpu_leader=False)
    machine.begin_worker(group=0, index=1)
    assert [p["metadata"]["name"] for _, p in machine.pending] == [f"{LWS}-0-1"]
    machine.leader_fails(group=0)
    machine.controller_relists()
    machine.controller_reconciles()  # obsolete and unused as far as anyone can see: condemned
    assert machine.is_condemned(domain)
    machine.controller_reconciles()  # within the fence: nothing more
    machine.time_passes(seconds=12.0)  # the worker's admission ends within its deadline, before the fence
    machine.controller_reconciles()  # the final fresh read finds the worker: the mark is lifted
    check(machine)
    assert not machine.is_condemned(domain)  # kept
    machine.teardown()


def test_a_worker_is_not_admitted_onto_a_condemned_domain() -> None:
    machine = ReplicaScope()
    running_group(machine, gpu_leader=True)
    machine.leader_fails(group=0)
    machine.controller_relists()
    machine.controller_reconciles()  # condemned
    machine.begin_worker(group=0, index=1)
    assert machine.pending == []
    machine.teardown()


def test_once_the_fence_has_passed_an_unused_domain_is_deleted() -> None:
    machine = ReplicaScope()
    domain = running_group(machine, gpu_leader=True)
    machine.leader_fails(group=0)
    machine.controller_relists()
    machine.controller_reconciles()
    machine.time_passes(seconds=12.0)
    machine.controller_reconciles()
    assert domain in machine.api.deleted_domains
    assert machine.api.teardowns[-1].users == ()
    check(machine)
    machine.teardown()


def test_a_restarted_group_binds_its_workers_to_the_new_leader_even_when_the_stores_lag() -> None:
    """Scenario 2: the webhook's stores still show the old leader incarnation; the worker of the new
    StatefulSet joins the new leader's domain, never the old one."""
    machine = ReplicaScope()
    old = running_group(machine, gpu_leader=True)
    machine.group_restarted(group=0)
    machine.begin_leader(group=0, gpu=True)
    machine.persist_named(f"{LWS}-0")
    new_leader = machine.api.get("pods", NS, f"{LWS}-0")
    assert new_leader is not None
    machine.begin_worker(group=0, index=1)  # the webhook's stores have not seen the restart
    machine.persist_named(f"{LWS}-0-1")
    worker = machine.api.get("pods", NS, f"{LWS}-0-1")
    assert worker is not None
    assert references.recorded_domain(worker) == references.recorded_domain(new_leader) != old
    check(machine)
    machine.teardown()


def test_a_cpu_only_leader_keeps_its_domain_through_a_controller_restart() -> None:
    """Scenario 3: a restarted controller whose stores hold the domain but not yet the leader that records it
    (without a claim) must not delete it: the fresh read counts recorders as users."""
    machine = ReplicaScope()
    domain = running_group(machine, gpu_leader=False)
    machine.controller_restarts()
    machine.controller_watch_catches_up(count=1000)  # nothing new: the stores are empty
    domain_body = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert domain_body is not None
    machine.stores.domain_mirror.observe(domain_body, deleted=False)  # the domains' list came in first
    machine.controller_reconciles()
    machine.time_passes(seconds=12.0)
    machine.controller_reconciles()
    assert domain not in machine.api.deleted_domains
    check(machine)
    machine.teardown()
