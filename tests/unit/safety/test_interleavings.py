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

import asyncio
import copy
import itertools
from typing import Any

import jsonpatch
import kopf
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_lws import admission, executor, planner, state
from mnnvl_runtime import domains

from . import memory_api
from .memory_api import MemoryApi

NS = "serving"
LWS = "dsr1"
GROUPS = (0, 1)
WORKERS = (1, 2)
FENCE = 10.0
#: Longest time from the webhook's reads to the pod being persisted; must be below the fence.
MAX_ADMISSION = 3.0
GPU = {"name": "vllm", "image": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
CPU = {"name": "proxy", "image": "proxy"}


def pod_body(name: str, *, leader: str | None, gpu: bool, owner: dict[str, Any] | None = None) -> dict[str, Any]:
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


class ReplicaScope(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.user = self.api.client("kubectl")
        self.now = 0.0
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
        # A look-alike: named as we would name it and labelled as ours, but created by someone else.
        workload = planner.Workload(namespace=NS, name=LWS, uid=lws["metadata"]["uid"])
        foreign_name = names.replica_domain_name(LWS, 0, "zzzzz")
        self.foreign = self.api.put(
            keys.COMPUTE_DOMAIN_PLURAL,
            {
                "metadata": {"name": foreign_name, "namespace": NS, "labels": planner.domain_labels(workload, 0)},
                "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(foreign_name)}}},
            },
            manager="kubectl",
        )
        self.pending: list[tuple[float, dict[str, Any]]] = []
        self.webhook_stores, self.webhook_cursor = state.Stores(), 0
        self._start_controller()

    def teardown(self) -> None:
        self.loop.close()

    def _start_controller(self) -> None:
        self.stores = state.Stores()
        self.cursor = len(self.api.events)
        self.synced = False
        writer = domains.DomainWriter(
            self.api.client(keys.LWS_CONTROLLER),
            component=keys.LWS_CONTROLLER,
            scope=keys.SCOPE_REPLICA,
            fence_seconds=FENCE,
            clock=lambda: self.now,
        )
        self.executor = executor.Executor(writer)

    def _mirror(self, stores: state.Stores, plural: str) -> Any:
        return {
            "pods": stores.pod_mirror,
            keys.LWS_PLURAL: stores.workload_mirror,
            keys.COMPUTE_DOMAIN_PLURAL: stores.domain_mirror,
            "resourceclaimtemplates": stores.template_mirror,
        }.get(plural)

    def _deliver(self, stores: state.Stores, cursor: int, count: int) -> int:
        for plural, kind, body in self.api.events[cursor : cursor + count]:
            mirror = self._mirror(stores, plural)
            if mirror is not None:
                mirror.observe(body, deleted=kind == "DELETED")
        return min(cursor + count, len(self.api.events))

    # --- pods, as LWS, its StatefulSets and the API server's admission make them -----------------------

    def _admit(self, body: dict[str, Any]) -> None:
        try:
            admitted = self.loop.run_until_complete(
                admission.admit_pod(
                    self.api.client(keys.LWS_CONTROLLER), self.webhook_stores, body, token=next(self.tokens)
                )
            )
        except kopf.AdmissionError:
            return  # refused or deferred: the creator tries again later
        self.pending.append((self.now + MAX_ADMISSION, jsonpatch.apply_patch(body, admitted.patch)))

    def _pod(self, name: str) -> dict[str, Any] | None:
        return self.api.get("pods", NS, name)

    @rule(group=st.sampled_from(GROUPS), gpu=st.booleans())
    def begin_leader(self, group: int, gpu: bool) -> None:
        name = f"{LWS}-{group}"
        if self._pod(name) is None and not any(p["metadata"]["name"] == name for _, p in self.pending):
            self._admit(pod_body(name, leader=None, gpu=gpu))

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
        self._admit(pod_body(name, leader=f"{LWS}-{group}", gpu=True, owner=owner))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def persist(self, data: st.DataObject) -> None:
        _, body = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self._persist(body)

    def _persist(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if self._pod(name) is not None:
            return  # the name is taken: the API server refuses the create
        created = self.api.put("pods", body, manager="kube-controller-manager")
        if keys.LWS_LEADER_NAME_ANNOTATION not in body["metadata"]["annotations"]:
            if self.api.get("statefulsets", NS, name) is not None:
                self.api.delete("statefulsets", NS, name)
            owner = {"kind": "Pod", "name": name, "uid": created["metadata"]["uid"], "controller": True}
            self.api.put(
                "statefulsets", {"metadata": {"name": name, "namespace": NS, "ownerReferences": [owner]}}, manager="lws"
            )

    def persist_named(self, name: str) -> None:
        """For scripted scenarios: persist the pending admission of pod `name`."""
        (entry,) = [p for p in self.pending if p[1]["metadata"]["name"] == name]
        self.pending.remove(entry)
        self._persist(entry[1])

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def abandon(self, data: st.DataObject) -> None:
        self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))

    @rule(group=st.sampled_from(GROUPS))
    def leader_fails(self, group: int) -> None:
        if self._pod(f"{LWS}-{group}") is not None:
            self.api.update("pods", NS, f"{LWS}-{group}", lambda b: b["status"].__setitem__("phase", "Failed"))

    @rule(group=st.sampled_from(GROUPS), index=st.sampled_from((0, *WORKERS)))
    def pod_deleted(self, group: int, index: int) -> None:
        name = f"{LWS}-{group}" if index == 0 else f"{LWS}-{group}-{index}"
        if self._pod(name) is not None:
            self.api.delete("pods", NS, name)

    @rule(group=st.sampled_from(GROUPS))
    def group_restarted(self, group: int) -> None:
        for name in (f"{LWS}-{group}", *(f"{LWS}-{group}-{i}" for i in WORKERS)):
            if self._pod(name) is not None:
                self.api.delete("pods", NS, name)
        if self.api.get("statefulsets", NS, f"{LWS}-{group}") is not None:
            self.api.delete("statefulsets", NS, f"{LWS}-{group}")

    @rule(seconds=st.sampled_from((0.5, 2.0, 5.0, 12.0)))
    def time_passes(self, seconds: float) -> None:
        """Admissions due meanwhile end first: at the last moment, the worst case for a fence."""
        self.now += seconds
        for due in [p for p in self.pending if p[0] <= self.now]:
            self.pending.remove(due)
            self._persist(due[1])

    # --- the controller and a second replica's webhook, each behind the API by its own lag ----------------

    @rule(count=st.integers(1, 8))
    def controller_watch_catches_up(self, count: int) -> None:
        self.cursor = self._deliver(self.stores, self.cursor, count)

    @rule(count=st.integers(1, 8))
    def webhook_watch_catches_up(self, count: int) -> None:
        self.webhook_cursor = self._deliver(self.webhook_stores, self.webhook_cursor, count)

    @rule()
    def controller_relists(self) -> None:
        version = str(max(int(b["metadata"]["resourceVersion"]) for _, _, b in self.api.events))
        for mirror, plural in (
            (self.stores.pod_mirror, "pods"),
            (self.stores.workload_mirror, keys.LWS_PLURAL),
            (self.stores.domain_mirror, keys.COMPUTE_DOMAIN_PLURAL),
            (self.stores.template_mirror, "resourceclaimtemplates"),
        ):
            mirror.begin_list()
            listed = self.api.all(plural)
            for start in range(0, len(listed), memory_api.PAGE_SIZE):
                mirror.take_page(listed[start : start + memory_api.PAGE_SIZE])
            mirror.finish_list(version)
        self.synced = True

    @rule()
    def controller_restarts(self) -> None:
        self._start_controller()

    @rule()
    def controller_reconciles(self) -> None:
        """Decides from whatever the store holds, synced or not: the writer's fresh reads must keep it safe even
        where the cache-sync barrier (which holds the real reconciler until `synced`) would have waited."""
        snapshot = self.stores.snapshot(NS, LWS, gate_enabled=True)
        self.loop.run_until_complete(self.executor.apply(snapshot, planner.plan(snapshot)))

    # --- what must hold after every step ----------------------------------------------------------------

    @invariant()
    def no_domain_is_torn_down_under_a_pod(self) -> None:
        assert [t for t in self.api.teardowns if t.users] == []

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
            statefulset = self.api.get("statefulsets", NS, owner["name"]) if owner else None
            if statefulset is None or statefulset["metadata"]["uid"] != owner["uid"]:
                continue  # a worker of a StatefulSet already replaced: not part of the current group
            leader_uid = statefulset["metadata"]["ownerReferences"][0]["uid"]
            leader = self._pod(owner["name"])
            if leader is None or leader["metadata"]["uid"] != leader_uid or not references.is_non_terminal(pod):
                continue
            assert references.recorded_domain(pod) == references.recorded_domain(leader)

    @invariant()
    def a_foreign_look_alike_is_never_written(self) -> None:
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, self.foreign["metadata"]["name"])
        assert found is not None
        assert found["metadata"]["resourceVersion"] == self.foreign["metadata"]["resourceVersion"]


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
    condemned = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert condemned is not None
    assert keys.CONDEMNED_ANNOTATION in condemned["metadata"]["annotations"]
    machine.controller_reconciles()  # within the fence: nothing more
    machine.time_passes(seconds=12.0)  # the worker's admission ends within its deadline, before the fence
    machine.controller_reconciles()  # the final fresh read finds the worker: the mark is lifted
    check(machine)
    kept = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert kept is not None
    assert keys.CONDEMNED_ANNOTATION not in kept["metadata"]["annotations"]
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
