"""Safety of the whole slice-scope protocol over arbitrary interleavings of admission and reconciliation.

The real webhook decisions (`admission.child_errors`, `admission.admit_pod`), stores, planner and executor (with
the shared domain writer) run against an in-memory API server. Hypothesis interleaves: LeaderWorkerSets of
(slice, revision)s created (through the LeaderWorkerSet webhook) and deleted with their pods, as rollouts and
`slices` changes do; the DisaggregatedSet deleted and created again (a new uid); pods whose admission is begun
and persisted as separate steps (within an admission deadline shorter than the deletion fence); pods failing or
deleted; stores that lag behind the API (the controller's and a second replica's webhook, each at its own
pace), re-lists, controller restarts that lose all memory, and time passing. After every step:

- no ComputeDomain is torn down while a non-terminal pod holds its claim or records it;
- no pod is ever bound to a domain whose deletion has begun (a pod may wait for a later domain of that name);
- every pod is bound to the domain of its own LeaderWorkerSet's (slice, revision), or to none;
- a foreign domain carrying our labels is never written, and no LeaderWorkerSet of its slice is admitted.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import jsonpatch
import kopf
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_ds import admission, executor, planner, state
from mnnvl_runtime import domains

from .memory_api import MemoryApi

NS = "serving"
DS = "llm"
POSITIONS = ((0, "aaaaaaaa"), (0, "bbbbbbbb"), (1, "aaaaaaaa"), (1, "bbbbbbbb"))
#: The look-alike's (slice, revision): its LeaderWorkerSets must never be admitted.
FOREIGN_POSITION = (1, "bbbbbbbb")
ROLES = ("prefill", "decode")
PODS_PER_CHILD = (0, 1)
FENCE = 10.0
#: Longest time from the webhook's reads to the pod being persisted; must be below the fence.
MAX_ADMISSION = 3.0
GPU = {"name": "vllm", "image": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
CPU = {"name": "router", "image": "router"}


def child_name(position: tuple[int, str], role: str) -> str:
    return f"{DS}-{position[0]}-{position[1]}-{role}"


class SliceScope(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.now = 0.0
        self._create_set()
        foreign = names.slice_domain_name(DS, *FOREIGN_POSITION)
        workload = planner.Workload(namespace=NS, name=DS, uid=self.ds_uid)
        self.foreign = self.api.put(
            keys.COMPUTE_DOMAIN_PLURAL,
            {
                "metadata": {
                    "name": foreign,
                    "namespace": NS,
                    "labels": planner.domain_labels(workload, FOREIGN_POSITION),
                },
                "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(foreign)}}},
            },
            manager="kubectl",
        )
        self.pending: list[tuple[float, dict[str, Any]]] = []
        self.webhook_stores, self.webhook_cursor = state.Stores(), 0
        self._start_controller()
        self.cursor = 0  # the first start watches from the beginning; a restart sees nothing until it re-lists

    def teardown(self) -> None:
        self.loop.close()

    def _create_set(self) -> None:
        body = {
            "metadata": {
                "name": DS,
                "namespace": NS,
                "annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"},
            },
            "spec": {"roles": [{"name": role} for role in ROLES]},
        }
        self.ds_uid = self.api.put(keys.DS_PLURAL, body, manager="kubectl")["metadata"]["uid"]

    def _start_controller(self) -> None:
        self.stores = state.Stores()
        self.cursor = len(self.api.events)
        writer = domains.DomainWriter(
            self.api.client(keys.DS_CONTROLLER),
            component=keys.DS_CONTROLLER,
            scope=keys.SCOPE_SLICE,
            fence_seconds=FENCE,
            clock=lambda: self.now,
        )
        self.executor = executor.Executor(
            writer, executor.UpstreamRetries(self.api.client(keys.DS_CONTROLLER), may_write=lambda: True)
        )

    def _mirror(self, stores: state.Stores, plural: str) -> Any:
        return {
            "pods": stores.pod_mirror,
            keys.DS_PLURAL: stores.workload_mirror,
            keys.LWS_PLURAL: stores.child_mirror,
            keys.COMPUTE_DOMAIN_PLURAL: stores.domain_mirror,
            "resourceclaimtemplates": stores.template_mirror,
        }.get(plural)

    def _deliver(self, stores: state.Stores, cursor: int, count: int) -> int:
        for plural, kind, body in self.api.events[cursor : cursor + count]:
            mirror = self._mirror(stores, plural)
            if mirror is not None:
                mirror.observe(body, deleted=kind == "DELETED")
        return min(cursor + count, len(self.api.events))

    # --- the DisaggregatedSet and its LeaderWorkerSets, as upstream makes them ---------------------------

    @initialize(roles=st.sets(st.sampled_from(ROLES)))
    def slice_0_running(self, roles: set[str]) -> None:
        """Start from slice 0 running at its first revision (its domain created) for some roles, so that runs
        spend their steps on what follows."""
        for role in sorted(roles):
            self.child_created(POSITIONS[0], role)
        self.controller_reconciles(count=1000)

    @rule(position=st.sampled_from(POSITIONS), role=st.sampled_from(ROLES))
    def child_created(self, position: tuple[int, str], role: str) -> None:
        name = child_name(position, role)
        if self.api.get(keys.DS_PLURAL, NS, DS) is None or self.api.get(keys.LWS_PLURAL, NS, name) is not None:
            return
        labels = {
            keys.DS_NAME_LABEL: DS,
            keys.DS_SLICE_LABEL: str(position[0]),
            keys.DS_REVISION_LABEL: position[1],
            keys.DS_ROLE_LABEL: role,
        }
        owner = {"apiVersion": keys.DS_API_VERSION, "kind": keys.DS_KIND, "name": DS, "uid": self.ds_uid}
        body = {
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": labels,
                "ownerReferences": [{**owner, "controller": True}],
            },
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "workerTemplate": {"metadata": {"labels": {**labels, keys.SCOPE_LABEL: keys.SCOPE_SLICE}}}
                },
            },
        }
        refused = self.loop.run_until_complete(
            admission.child_errors(self.api.client(keys.DS_CONTROLLER), body, None, gate_enabled=True)
        )
        if not refused:
            self.api.put(keys.LWS_PLURAL, body, manager="disaggregatedset")

    def _children(self) -> list[str]:
        return sorted(body["metadata"]["name"] for body in self.api.all(keys.LWS_PLURAL))

    @precondition(lambda self: self.api.all(keys.LWS_PLURAL))
    @rule(data=st.data())
    def child_deleted(self, data: st.DataObject) -> None:
        """A rollout drained it, or `slices` shrank: its pods go with it (a pod being admitted may still land)."""
        self.delete_child(data.draw(st.sampled_from(self._children())))

    def delete_child(self, name: str) -> None:
        self.api.delete(keys.LWS_PLURAL, NS, name)
        for index in PODS_PER_CHILD:
            if self.api.get("pods", NS, f"{name}-{index}") is not None:
                self.api.delete("pods", NS, f"{name}-{index}")

    @rule()
    def set_replaced(self) -> None:
        """The DisaggregatedSet is deleted (garbage collection takes its LeaderWorkerSets, not its pods at once),
        or, when it is gone, created again (a new uid)."""
        if self.api.get(keys.DS_PLURAL, NS, DS) is None:
            self._create_set()
            return
        self.api.delete(keys.DS_PLURAL, NS, DS)
        for name in self._children():
            self.api.delete(keys.LWS_PLURAL, NS, name)

    # --- pods, as the StatefulSets and the API server's admission make them ---------------------------------

    @precondition(lambda self: self.api.all(keys.LWS_PLURAL))
    @rule(data=st.data(), index=st.sampled_from(PODS_PER_CHILD))
    def begin_pod(self, data: st.DataObject, index: int) -> None:
        self.begin_pod_of(data.draw(st.sampled_from(self._children())), index)

    def begin_pod_of(self, child: str, index: int) -> None:
        lws = self.api.get(keys.LWS_PLURAL, NS, child)
        name = f"{child}-{index}"
        if lws is None or self.api.get("pods", NS, name) is not None:
            return
        if any(p["metadata"]["name"] == name for _, p in self.pending):
            return
        template_labels = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
        body = {
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {**template_labels, keys.LWS_NAME_LABEL: lws["metadata"]["name"]},
                "annotations": {},
            },
            "spec": {"containers": [copy.deepcopy(GPU if index == 0 else CPU)]},
            "status": {"phase": "Pending"},
        }
        try:
            admitted = self.loop.run_until_complete(
                admission.admit_pod(self.api.client(keys.DS_CONTROLLER), self.webhook_stores, body)
            )
        except kopf.AdmissionError:
            return  # refused or deferred: the StatefulSet tries again later
        self.pending.append((self.now + MAX_ADMISSION, jsonpatch.apply_patch(body, admitted.patch)))

    def _persist(self, body: dict[str, Any]) -> None:
        if self.api.get("pods", NS, body["metadata"]["name"]) is None:
            self.api.put("pods", body, manager="kube-controller-manager")

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), lands=st.booleans())
    def admission_ends(self, data: st.DataObject, lands: bool) -> None:
        """A begun admission ends: the pod is persisted, or the request was abandoned (timed out, retried)."""
        _, body = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        if lands:
            self._persist(body)

    @rule(data=st.data())
    def pod_ends(self, data: st.DataObject) -> None:
        live = sorted(p["metadata"]["name"] for p in self.api.all("pods"))
        if not live:
            return
        name = data.draw(st.sampled_from(live))
        if data.draw(st.booleans()):
            self.api.update("pods", NS, name, lambda b: b["status"].__setitem__("phase", "Failed"))
        else:
            self.api.delete("pods", NS, name)

    @rule(seconds=st.sampled_from((0.5, 2.0, 5.0, 12.0)))
    def time_passes(self, seconds: float) -> None:
        """Admissions due meanwhile end first: at the last moment, the worst case for a fence."""
        self.now += seconds
        for due in [p for p in self.pending if p[0] <= self.now]:
            self.pending.remove(due)
            self._persist(due[1])

    # --- the controller and a second replica's webhook, each behind the API by its own lag ----------------

    def controller_watch_catches_up(self, count: int) -> None:
        self.cursor = self._deliver(self.stores, self.cursor, count)

    @rule(count=st.sampled_from((1, 4, 1000)))
    def webhook_watch_catches_up(self, count: int) -> None:
        self.webhook_cursor = self._deliver(self.webhook_stores, self.webhook_cursor, count)

    @rule()
    def controller_relists(self) -> None:
        version = str(max(int(b["metadata"]["resourceVersion"]) for _, _, b in self.api.events))
        for plural in ("pods", keys.DS_PLURAL, keys.LWS_PLURAL, keys.COMPUTE_DOMAIN_PLURAL, "resourceclaimtemplates"):
            mirror = self._mirror(self.stores, plural)
            mirror.begin_list()
            mirror.take_page(self.api.all(plural))
            mirror.finish_list(version)

    @rule()
    def controller_restarts(self) -> None:
        self._start_controller()

    @rule(count=st.sampled_from((0, 3, 1000)))
    def controller_reconciles(self, count: int = 0) -> None:
        """Takes `count` more watch events, then decides from whatever the store holds, synced or not: the
        writer's fresh reads must keep it safe even where the cache-sync barrier (which holds the real
        reconciler until synced) would have waited."""
        self.controller_watch_catches_up(count)
        for key in self.stores.workload_keys():
            snapshot = self.stores.snapshot(*key, gate_enabled=True)
            self.loop.run_until_complete(self.executor.apply(snapshot, planner.plan(snapshot)))

    # --- what must hold after every step ----------------------------------------------------------------

    @invariant()
    def no_domain_is_torn_down_under_a_pod(self) -> None:
        assert [t for t in self.api.teardowns if t.users] == []

    @invariant()
    def no_pod_is_bound_to_a_domain_being_deleted(self) -> None:
        """A slice domain's name is derived, so a later incarnation may bear a deleted one's name: a pod may wait
        (gated) for it, but never be bound to an incarnation whose deletion has begun."""
        for pod in self.api.all("pods"):
            recorded = references.recorded_domain(pod)
            if references.is_non_terminal(pod) and recorded is not None:
                current = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, recorded)
                assert current is None or not current["metadata"].get("deletionTimestamp"), (
                    f"{pod['metadata']['name']} is bound to {recorded}, which is being deleted"
                )

    @invariant()
    def every_pod_is_bound_to_its_own_slice_and_revision(self) -> None:
        for pod in self.api.all("pods"):
            labels = pod["metadata"]["labels"]
            own = names.slice_domain_name(DS, int(labels[keys.DS_SLICE_LABEL]), labels[keys.DS_REVISION_LABEL])
            assert references.recorded_domain(pod) in (None, own)
            assert references.referenced_claim_templates(pod) <= {names.claim_template_name(own)}

    @invariant()
    def a_foreign_look_alike_is_never_written_nor_its_slice_scaled(self) -> None:
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, self.foreign["metadata"]["name"])
        assert found is not None
        assert found["metadata"]["resourceVersion"] == self.foreign["metadata"]["resourceVersion"]
        assert all(self.api.get(keys.LWS_PLURAL, NS, child_name(FOREIGN_POSITION, role)) is None for role in ROLES)


SliceScope.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
test_slice_scope_interleavings = SliceScope.TestCase


def running_slice(machine: SliceScope) -> str:
    """Slice 0 at revision aaaaaaaa with its prefill LeaderWorkerSet, its domain created; returns the domain."""
    machine.child_created(position=(0, "aaaaaaaa"), role="prefill")
    machine.controller_relists()
    machine.controller_reconciles()
    machine.webhook_watch_catches_up(count=1000)
    domain = names.slice_domain_name(DS, 0, "aaaaaaaa")
    assert machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain) is not None
    return domain


def test_a_slice_domain_is_created_as_soon_as_its_first_leaderworkerset_exists() -> None:
    machine = SliceScope()
    running_slice(machine)
    assert machine.api.all("pods") == []
    machine.teardown()


def test_a_pod_admitted_before_its_slice_was_drained_keeps_the_domain_until_it_ends() -> None:
    """The LeaderWorkerSet is deleted (rollout drained), the domain is condemned, and a pod whose admission began
    before is persisted only afterwards: the final fresh read sees it and the domain is kept."""
    machine = SliceScope()
    domain = running_slice(machine)
    machine.begin_pod_of(child_name((0, "aaaaaaaa"), "prefill"), 1)
    assert len(machine.pending) == 1
    machine.delete_child(child_name((0, "aaaaaaaa"), "prefill"))
    machine.controller_relists()
    machine.controller_reconciles()  # obsolete and unused as far as anyone can see: condemned
    condemned = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert condemned is not None
    assert keys.CONDEMNED_ANNOTATION in condemned["metadata"]["annotations"]
    machine.time_passes(seconds=12.0)  # the pod lands within its deadline, before the fence has passed
    machine.controller_reconciles()  # the final fresh read finds the pod: the mark is lifted
    kept = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert kept is not None
    assert keys.CONDEMNED_ANNOTATION not in kept["metadata"]["annotations"]
    assert domain not in machine.api.deleted_domains
    machine.teardown()


def test_once_its_last_pod_exits_a_drained_slices_domain_is_deleted() -> None:
    machine = SliceScope()
    domain = running_slice(machine)
    machine.delete_child(child_name((0, "aaaaaaaa"), "prefill"))
    machine.controller_relists()
    machine.controller_reconciles()
    machine.time_passes(seconds=12.0)
    machine.controller_reconciles()
    assert domain in machine.api.deleted_domains
    assert machine.api.teardowns[-1].users == ()
    machine.teardown()


def test_the_foreign_look_alikes_slice_is_refused() -> None:
    machine = SliceScope()
    machine.child_created(position=FOREIGN_POSITION, role="prefill")
    assert machine.api.get(keys.LWS_PLURAL, NS, child_name(FOREIGN_POSITION, "prefill")) is None
    machine.teardown()
