"""Safety of the whole replica-scope protocol (mnnvl-lws) over adversarial interleavings (`harness`).

The real webhooks (`rules.template_patch` and `rules.lws_errors` for every LeaderWorkerSet write,
`pod_admission.admit_pod` for every stamped pod), stores, planner and executor, with the shared domain writer, run in
two replicas against an in-memory API server. Besides what `harness` interleaves, this model has, as upstream LWS
and Kubernetes make them:

- the LeaderWorkerSet `dsr1`, opted in, whose opt-in is removed and given again (each a new template revision,
  stamped or not by the real webhook); every group keeps the revision it was made from until the rollout reaches
  it, and a group restarted before that is made again from its old template; `dsr1` deleted and created again
  under the same name (a new uid); a plain LeaderWorkerSet whose writes must never be refused or changed;
- leaders (GPU or CPU only) and workers whose admission is begun and persisted as separate steps, under names
  every new incarnation reuses; leaders failing, pods deleted, groups restarted;
- StatefulSets replaced in steps, not at once: a persisted leader gets its worker StatefulSet only at a later
  step, and the garbage collector removes a StatefulSet whose leader incarnation is gone, and pods whose owner is
  gone, one object per step.

After every step, besides the invariants of every scope: every worker holds, or records, nothing but the domain
its own leader incarnation (the one its StatefulSet names) recorded: a group never spans two domains.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_lws import planner, pod_admission, rules, scope, state
from mnnvl_runtime import scopes

from ..mnnvl_runtime import memory_api
from ..mnnvl_runtime.memory_api import Object
from . import settings
from .harness import (
    ADMISSION_BOUND,
    ADMISSION_RACE_RULES,
    GPU,
    HAND_OVER_RULES,
    NS,
    REPLICAS,
    STALE_STORE_RULES,
    WEBHOOK,
    CutPasses,
    ScopeMachine,
    accepted_fences,
    campaign,
    with_rules,
)

LWS = "dsr1"
PLAIN = "plain"
GROUPS = (0, 1)
CPU = {"name": "proxy", "image": "proxy"}
LATENCIES = (1.0, ADMISSION_BOUND)


def lws_body(name: str, *, opted_in: bool) -> Object:
    template: Object = {"metadata": {}, "spec": {"containers": [copy.deepcopy(GPU)]}}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"} if opted_in else {},
        },
        "spec": {
            "replicas": len(GROUPS),
            "leaderWorkerTemplate": {"leaderTemplate": template, "workerTemplate": copy.deepcopy(template)},
        },
    }


def controller(meta: Object) -> dict[str, Any] | None:
    return next(iter(meta.get("ownerReferences") or ()), None)


def template_hash(template: Object) -> str:
    """A template revision's hash, as upstream labels its pods and ControllerRevisions with it."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class ReplicaScope(ScopeMachine[state.Stores, scopes.ScopeExecutor[planner.Snapshot]]):
    def __init__(self) -> None:
        super().__init__(
            descriptor=scope.SCOPE,
            new_executor=lambda writer, client, may_write, stores: self.scope_executor(writer, client, None),
        )
        #: The webhook's creates begun (`start_domain`) and not ended yet.
        self.starts: list[asyncio.Task[bool]] = []
        self.tokens = (
            "".join(t)
            for t in itertools.product(names.INCARNATION_TOKEN_ALPHABET, repeat=names.INCARNATION_TOKEN_LENGTH)
        )
        #: Per group: the leaderWorkerTemplate its pods are made from (the revision the rollout left it at).
        self.group_templates: dict[int, Object] = {}
        #: Every leader incarnation (uid) persisted → the domain it recorded; every StatefulSet (uid) → its leader.
        self.leader_domains: dict[str, str | None] = {}
        #: The leaderWorkerTemplate each leader (by name while being admitted, then by uid) and each StatefulSet
        #: (by uid) was made from: a worker is made from its StatefulSet's.
        self.made_from: dict[str, Object] = {}
        self.statefulset_leaders: dict[str, str] = {}
        #: ComputeDomain creates sent for another LWS than the live one, as judged when sent (`_judge_create`).
        self.creates_for_another_lws: list[str] = []
        self.api.on_send = self._judge_create
        lws = self.write_lws(lws_body(LWS, opted_in=True))
        assert lws is not None
        workload = planner.LeaderWorkerSetFacts(namespace=NS, name=LWS, uid=lws["metadata"]["uid"])
        self.foreign = self.put_foreign_look_alike(
            names.replica_domain_name(LWS, 0, "zzzzz"), planner.domain_labels(workload, 0)
        )
        self._start_replicas()

    # --- LeaderWorkerSets, through the real LeaderWorkerSet webhooks ---------------------------------------

    def write_lws(self, body: Object) -> Object | None:
        """Create or update a LeaderWorkerSet as the API server does (`write_workload`), and record its template
        revision as upstream does. Returns the stored object, or None when refused."""
        stored, created = self.write_workload(body, plain=PLAIN)
        if stored is None:
            return None
        if created and stored["metadata"]["name"] == LWS:
            self.group_templates = {g: copy.deepcopy(stored["spec"]["leaderWorkerTemplate"]) for g in GROUPS}
        self._record_revision(stored)
        return stored

    def _record_revision(self, lws: Object) -> None:
        """What upstream's controller does on a new template: a ControllerRevision controlled by the
        LeaderWorkerSet, labelled with the template's hash, holding the template (never changed afterwards)."""
        meta, template = lws["metadata"], lws["spec"]["leaderWorkerTemplate"]
        revision_hash = template_hash(template)
        known = (
            r
            for r in self.api.view("controllerrevisions")
            if r["metadata"]["labels"][keys.LWS_TEMPLATE_REVISION_HASH_LABEL] == revision_hash
            and r["metadata"]["ownerReferences"][0]["uid"] == meta["uid"]
        )
        if next(known, None) is not None:
            return
        owner = {
            "apiVersion": keys.LWS_API_VERSION,
            "kind": "LeaderWorkerSet",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
        revision = {
            "metadata": {
                "name": f"{meta['name']}-{revision_hash}-{meta['resourceVersion']}",
                "namespace": NS,
                "labels": {keys.LWS_NAME_LABEL: meta["name"], keys.LWS_TEMPLATE_REVISION_HASH_LABEL: revision_hash},
                "ownerReferences": [owner],
            },
            "data": {"spec": {"leaderWorkerTemplate": copy.deepcopy(template)}},
        }
        self.api.put("controllerrevisions", revision, manager="lws-manager")

    @precondition(lambda self: self.may_disrupt("workload"))
    @rule(
        change=st.sampled_from(
            ("opt-in toggled", "rollout reaches group 0", "rollout reaches group 1", "replaced", "plain one written")
        )
    )
    def workload_changes(self, change: str) -> None:
        """- the user removes the opt-in of `dsr1`, or gives it again: a new template revision, rolled out group
          by group (a group the rollout has not reached is made again from its old template);
        - the rolling update reaches a group: it is made again from the current template;
        - `dsr1` is deleted (its pods and StatefulSets are left to the garbage collector), or, when gone, created
          again under its name: a new uid, every group at the new revision;
        - a LeaderWorkerSet that never opted in is created, changed or deleted."""
        self.disrupted("workload")
        current = self.api.get(keys.LWS_PLURAL, NS, LWS)
        if change == "opt-in toggled" and current is not None:
            annotations = current["metadata"].setdefault("annotations", {})
            if annotations.pop(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION, None) is None:
                annotations[keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "enabled"
            self.write_lws(current)
        elif change.startswith("rollout reaches") and current is not None:
            group = int(change[-1])
            self.group_templates[group] = copy.deepcopy(current["spec"]["leaderWorkerTemplate"])
            self._delete_pod(f"{LWS}-{group}")
        elif change == "replaced":
            if current is None:
                self.write_lws(lws_body(LWS, opted_in=True))
            else:
                self.api.delete(keys.LWS_PLURAL, NS, LWS)
        elif change == "plain one written":
            plain = self.api.get(keys.LWS_PLURAL, NS, PLAIN)
            if plain is not None and plain["spec"]["replicas"] == len(GROUPS):
                self.api.delete(keys.LWS_PLURAL, NS, PLAIN)
                return
            body = plain or lws_body(PLAIN, opted_in=False)
            body["spec"]["replicas"] = 1 if plain is None else len(GROUPS)
            self.write_lws(body)

    # --- pods, as LWS, its StatefulSets and the API server's admission make them -----------------------

    def _make(
        self,
        name: str,
        template: Object,
        *,
        revision: str,
        extra: Object,
        owner: Object,
        gpu: bool,
        via: int,
        latency: float,
    ) -> None:
        """A pod made from `template` of the template revision `revision`: our pod webhook (of replica `via`)
        sees it only when the template was stamped (its objectSelector); any other is created as it is."""
        meta = template.get("metadata") or {}
        body: Object = {
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {
                    **(meta.get("labels") or {}),
                    keys.LWS_NAME_LABEL: LWS,
                    keys.LWS_TEMPLATE_REVISION_HASH_LABEL: revision,
                },
                "annotations": {**(meta.get("annotations") or {}), **extra},
                "ownerReferences": [owner],
            },
            "spec": {"containers": [copy.deepcopy(GPU if gpu else CPU)]},
            "status": {"phase": "Pending"},
        }
        if keys.SCOPE_LABEL not in body["metadata"]["labels"]:
            self.pending.append((self.now + latency, body))
            return
        replica = self._replica(via)
        admit_pod = replica.version.counterpart(pod_admission.admit_pod)
        admitted = self._admit(
            body, admit_pod(replica.client, replica.stores, body, token=next(self.tokens)), latency=latency
        )
        start = None if admitted is None else replica.version.counterpart(rules.domain_to_start)(body, admitted)
        if start is not None:
            self.start_domain(replica.name, replica.stores, start)

    def start_domain(self, name: str, stores: state.Stores, start: rules.DomainStart) -> None:
        """The webhook's background create (`pod_admission.start_domain`): its fresh read now, its create sent from
        the webhook's own client (no Lease: any replica serves the webhook), landing at any later step or never."""
        client = self.api.client(self.component, sender=name + WEBHOOK)
        create_for_leader = self.replicas[name].version.counterpart(pod_admission.create_for_leader)
        self.starts.append(self.loop.create_task(create_for_leader(client, stores, start, component=self.component)))
        self.settle()

    def settle(self) -> None:
        super().settle()
        for task in [t for t in self.starts if t.done()]:
            self.starts.remove(task)
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # create_for_leader handles every API error

    def teardown(self) -> None:
        for task in self.starts:
            task.cancel()
        super().teardown()

    def _leaderless(self) -> list[int]:
        if self.api.peek(keys.LWS_PLURAL, NS, LWS) is None:
            return []
        return [g for g in GROUPS if self._pod(f"{LWS}-{g}") is None and not self._is_pending(f"{LWS}-{g}")]

    @precondition(lambda self: self._leaderless())
    @rule(data=st.data(), gpu=st.booleans(), via=st.integers(0, len(REPLICAS) - 1), latency=st.sampled_from(LATENCIES))
    def begin_leader(self, data: st.DataObject, gpu: bool, via: int, latency: float) -> None:
        self.begin_leader_of(data.draw(st.sampled_from(self._leaderless())), gpu=gpu, via=via, latency=latency)

    def begin_leader_of(self, group: int, *, gpu: bool, via: int, latency: float) -> None:
        lws = self.api.get(keys.LWS_PLURAL, NS, LWS)
        assert lws is not None
        owner = {"kind": "LeaderWorkerSet", "name": LWS, "uid": lws["metadata"]["uid"], "controller": True}
        self.made_from[f"{LWS}-{group}"] = self.group_templates[group]
        self._make(
            f"{LWS}-{group}",
            self.group_templates[group]["leaderTemplate"],
            revision=template_hash(self.group_templates[group]),
            extra={},
            owner=owner,
            gpu=gpu,
            via=via,
            latency=latency,
        )

    def _workerless(self) -> list[int]:
        return [
            g
            for g in GROUPS
            if self.api.peek("statefulsets", NS, f"{LWS}-{g}") is not None
            and self._pod(f"{LWS}-{g}-1") is None
            and not self._is_pending(f"{LWS}-{g}-1")
        ]

    @precondition(lambda self: self._workerless())
    @rule(data=st.data(), via=st.integers(0, len(REPLICAS) - 1), latency=st.sampled_from(LATENCIES))
    def begin_worker(self, data: st.DataObject, via: int, latency: float) -> None:
        self.begin_worker_of(data.draw(st.sampled_from(self._workerless())), via=via, latency=latency)

    def begin_worker_of(self, group: int, *, via: int, latency: float) -> None:
        """The worker StatefulSet of the group (whichever incarnation exists) makes its pod."""
        statefulset = self.api.get("statefulsets", NS, f"{LWS}-{group}")
        assert statefulset is not None
        owner = {
            "kind": "StatefulSet",
            "name": f"{LWS}-{group}",
            "uid": statefulset["metadata"]["uid"],
            "controller": True,
        }
        self._make(
            f"{LWS}-{group}-1",
            self.made_from[statefulset["metadata"]["uid"]]["workerTemplate"],
            revision=template_hash(self.made_from[statefulset["metadata"]["uid"]]),
            extra={keys.LWS_LEADER_NAME_ANNOTATION: f"{LWS}-{group}"},
            owner=owner,
            gpu=True,
            via=via,
            latency=latency,
        )

    def _persist(self, body: Object) -> Object | None:
        created = super()._persist(body)
        if created is not None and keys.LWS_LEADER_NAME_ANNOTATION not in created["metadata"]["annotations"]:
            self.leader_domains[created["metadata"]["uid"]] = references.recorded_domain(created)
            self.made_from[created["metadata"]["uid"]] = self.made_from[created["metadata"]["name"]]
        return created

    def _without_statefulset(self) -> list[int]:
        return [
            g
            for g in GROUPS
            if (leader := self._pod(f"{LWS}-{g}")) is not None
            and references.is_non_terminal(leader)
            and self.api.peek("statefulsets", NS, f"{LWS}-{g}") is None
        ]

    @precondition(lambda self: self._without_statefulset())
    @rule(data=st.data())
    def statefulset_created(self, data: st.DataObject) -> None:
        """LWS gives a live leader its worker StatefulSet, once no StatefulSet of that name is left."""
        self.statefulset_of(data.draw(st.sampled_from(self._without_statefulset())))

    def statefulset_of(self, group: int) -> None:
        name = f"{LWS}-{group}"
        leader = self._pod(name)
        assert leader is not None
        owner = {"kind": "Pod", "name": name, "uid": leader["metadata"]["uid"], "controller": True}
        created = self.api.put(
            "statefulsets", {"metadata": {"name": name, "namespace": NS, "ownerReferences": [owner]}}, manager="lws"
        )
        self.statefulset_leaders[created["metadata"]["uid"]] = leader["metadata"]["uid"]
        self.made_from[created["metadata"]["uid"]] = self.made_from[leader["metadata"]["uid"]]

    def _orphans(self) -> list[tuple[str, str]]:
        live = {body["metadata"]["uid"] for body in self.api.objects.values()}
        return [
            (plural, body["metadata"]["name"])
            for (plural, _, _), body in self.api.objects.items()
            if plural in ("statefulsets", "pods")
            and (owner := controller(body["metadata"])) is not None
            and owner["uid"] not in live
        ]

    @precondition(lambda self: self._orphans())
    @rule(data=st.data())
    def garbage_collected(self, data: st.DataObject) -> None:
        """The garbage collector removes one object whose owner incarnation is gone."""
        plural, name = data.draw(st.sampled_from(self._orphans()))
        self.api.delete(plural, NS, name)

    def _pods(self) -> list[str]:
        return sorted(body["metadata"]["name"] for body in self.api.view("pods"))

    @precondition(lambda self: self._pods())
    @rule(data=st.data(), fails=st.booleans())
    def pod_ends(self, data: st.DataObject, fails: bool) -> None:
        """A pod fails, or is deleted (evicted; a deleted leader restarts its group)."""
        self.pod_ends_named(data.draw(st.sampled_from(self._pods())), fails=fails)

    def pod_ends_named(self, name: str, *, fails: bool) -> None:
        if fails:
            self._pod_fails(name)
        else:
            self._delete_pod(name)

    # --- where a run starts -------------------------------------------------------------------------------

    @initialize(running=st.integers(0, len(GROUPS)), gpu_leader=st.booleans())
    def groups_running(self, running: int, gpu_leader: bool) -> None:
        """The run starts from a quiet cluster, or with the first `running` groups running (made by the model's
        own steps, `group_runs`): the search then spends its steps on what happens to running groups."""
        for group in GROUPS[:running]:
            self.group_runs(group, gpu_leader=gpu_leader)

    def group_runs(self, group: int, *, gpu_leader: bool) -> str:
        """The group's leader persisted, its StatefulSet and its domain created by replica a (leading), every
        store caught up; returns the domain."""
        assert self.api.leader == REPLICAS[0]
        self.begin_leader_of(group, gpu=gpu_leader, via=0, latency=1.0)
        self.persist_named(f"{LWS}-{group}")
        self.statefulset_of(group)
        self.catch_up(REPLICAS[0])
        self.reconcile_fully(REPLICAS[0])
        for name in REPLICAS:
            self.catch_up(name)
        made = domains_of_group(self, group)
        assert len(made) == 1, f"group {group} runs with domains {made}, not one"
        return made[0]

    # --- what must hold after every step, besides the invariants of every scope ---------------------------

    @invariant()
    def a_group_never_spans_two_domains(self) -> None:
        for pod in self.api.view("pods"):
            if not references.is_non_terminal(pod):
                continue
            meta = pod["metadata"]
            own = references.recorded_domain(pod)
            owner = controller(meta)
            if owner is not None and owner["kind"] == "StatefulSet":
                own = self.leader_domains.get(self.statefulset_leaders[owner["uid"]])
                assert references.recorded_domain(pod) == own, (
                    f"worker {meta['name']} records {references.recorded_domain(pod)}, its leader {own}"
                )
            claims = references.referenced_claim_templates(pod)
            assert claims <= ({names.claim_template_name(own)} if own else set()), (
                f"{meta['name']} holds {set(claims)}, its group's domain is {own}"
            )

    def _judge_create(self, request: memory_api.Request) -> None:
        """Records a ComputeDomain create that names another LeaderWorkerSet than the one live as it is sent."""
        if request.created is None or not request.what.startswith(f"create {keys.COMPUTE_DOMAIN_PLURAL}/"):
            return
        live = self.api.peek(keys.LWS_PLURAL, NS, LWS)
        owner = request.created["metadata"].get("labels", {}).get(keys.OWNER_UID_LABEL)
        if live is None or owner != live["metadata"]["uid"]:
            lws = "gone" if live is None else live["metadata"]["uid"]
            self.creates_for_another_lws.append(
                f"{request.sender} sent {request.what} for {owner}, while {LWS} is {lws}"
            )

    @invariant()
    def creates_name_the_live_lws(self) -> None:
        """A domain is created, by the Lease holder or a webhook, only for the LeaderWorkerSet of its name as it
        is when the create is sent: never for an earlier one the stores still hold (its uid would make the domain
        no domain of the new one, and the group would stay gated)."""
        assert not self.creates_for_another_lws, self.creates_for_another_lws

    def check_scope(self) -> None:
        self.a_group_never_spans_two_domains()
        self.creates_name_the_live_lws()


ReplicaScope.TestCase.settings = settings.for_model(max_examples=150, steps=80)
test_replica_scope_interleavings = ReplicaScope.TestCase

#: How a group's pods come: a leader begun, its workers' StatefulSet created, a worker begun.
POD_RULES = ("begin_leader", "begin_worker", "statefulset_created")
#: How a group restarts: its leader's StatefulSet collected (after the leader is deleted or fails).
GROUP_RESTART_RULES = ("garbage_collected",)

#: Pods admitted while their group's domain is retired (its leader failing or deleted, its group restarted), with
#: the Lease holder settling in between and admissions landing as late as they may.
AdmissionRaces = campaign(
    ReplicaScope, "AdmissionRaces", rules=(*POD_RULES, *GROUP_RESTART_RULES, *ADMISSION_RACE_RULES)
)
test_replica_scope_admission_races = AdmissionRaces.TestCase

#: Lease hand-overs while passes and their writes are in flight, with pods admitted and ending meanwhile.
HandOvers = campaign(ReplicaScope, "HandOvers", rules=(*POD_RULES, *HAND_OVER_RULES))
test_replica_scope_hand_overs = HandOvers.TestCase

#: Watch streams that lag, drop events and relist while the LeaderWorkerSet is rewritten (opt-in toggled, rolled
#: out, deleted and created again) and its groups restart.
StaleStores = campaign(ReplicaScope, "StaleStores", rules=(*POD_RULES, *GROUP_RESTART_RULES, *STALE_STORE_RULES))
test_replica_scope_stale_stores = StaleStores.TestCase


class OptInToggles(ReplicaScope):
    """A rule for the `OptOuts` campaign: the opt-in removed or given again, on its own (among `workload_changes`'
    five kinds, and with the stores to catch up after it, a leader made again after an opt-out is rare)."""

    @precondition(lambda self: self.may_disrupt("workload") and self.api.peek(keys.LWS_PLURAL, NS, LWS) is not None)
    @rule()
    def opt_in_toggled(self) -> None:
        self.workload_changes("opt-in toggled")


class Replacements(ReplicaScope):
    """A rule for the `Reincarnations` campaign: the LeaderWorkerSet deleted, or created again under its name, on
    its own (one of `workload_changes`' five kinds otherwise)."""

    @precondition(lambda self: self.may_disrupt("workload"))
    @rule()
    def lws_replaced(self) -> None:
        self.workload_changes("replaced")


#: The LeaderWorkerSet deleted and created again while the watches lag and the webhook's creates are lost: no domain
#: is created for an incarnation the stores still hold.
Reincarnations = campaign(
    Replacements,
    "Reincarnations",
    rules=("begin_leader", "lws_replaced", "watches", "request_ends", "leader_reconciles", "admission_ends"),
)
test_replica_scope_reincarnations = Reincarnations.TestCase

#: The opt-in removed (or given again) while groups run and restart, the replicas' stores catching up: a leader made
#: again from a template revision stamped before the opt-out must still get its claim and its domain.
OptOuts = campaign(
    OptInToggles,
    "OptOuts",
    rules=(*POD_RULES, "opt_in_toggled", "pod_ends", "replica_catches_up", "leader_settles", "admission_ends"),
    max_examples=300,  # at 100, 2 random seeds in 10 missed the stamped revision's guard
)
test_replica_scope_opt_outs = OptOuts.TestCase

#: Passes cut by a hand-over, whose deposed leader goes on (`harness.CutPasses`), while groups restart: a domain
#: created and the obsolete one condemned or deleted in one pass, the fence passing meanwhile.
LateWrites = campaign(
    with_rules(ReplicaScope, CutPasses),
    "LateWrites",
    rules=(
        "begin_leader",
        "pod_ends",
        "garbage_collected",
        "admission_ends",
        "replica_catches_up",
        "leader_reconciles",
        "lease_moves",
        "pass_cut_by_hand_over",
        "request_ends",
        "time_passes",
    ),
    max_examples=300,
)
LateWrites.disruption_budget = {"lease": 12, "workload": 4}
test_replica_scope_late_writes = LateWrites.TestCase


# --- scripted scenarios: the model's own steps, in an order that matters --------------------------------------


def domains_of_group(machine: ReplicaScope, group: int) -> list[str]:
    return sorted(
        d["metadata"]["name"]
        for d in machine.api.view(keys.COMPUTE_DOMAIN_PLURAL)
        if d["metadata"]["labels"].get(keys.GROUP_INDEX_LABEL) == str(group)
        and d["metadata"]["uid"] != machine.foreign["metadata"]["uid"]
    )


def leader_fails_while_a_worker_is_admitted(fence: float, *, gpu_leader: bool) -> tuple[ReplicaScope, str]:
    """Group 0 runs; a worker's admission begins (landing `ADMISSION_BOUND` later), its leader fails, and the
    leader reconciles: the domain is obsolete and unused as far as anyone can see, so it is condemned."""
    machine = ReplicaScope()
    machine.configured(fence)
    domain = machine.group_runs(0, gpu_leader=gpu_leader)
    machine.begin_worker_of(0, via=1, latency=ADMISSION_BOUND)
    machine.pod_ends_named(f"{LWS}-0", fails=True)
    machine.catch_up("a")
    machine.reconcile_fully("a")
    return machine, domain


def test_a_worker_admitted_before_its_domain_was_condemned_is_seen_before_the_delete() -> None:
    """A worker is admitted while its leader lives, the leader fails, the domain is condemned, and the worker is
    persisted only afterwards, as late as admission allows: with the longest fence the configuration accepts, the
    final fresh read sees it and the mark is lifted."""
    machine, domain = leader_fails_while_a_worker_is_admitted(max(accepted_fences()), gpu_leader=False)
    assert machine.is_condemned(domain)
    machine.time_passes(seconds=machine.fence)  # the worker lands within its deadline, before the fence passed
    machine.catch_up("a")
    machine.reconcile_fully("a")  # the final fresh read finds the worker: the mark is lifted
    machine.check()
    assert not machine.is_condemned(domain)
    machine.teardown()


def test_no_configurable_fence_lets_a_domain_go_before_a_pod_admitted_onto_it_lands() -> None:
    """Hole 4 of issue 19: the shortest fence the configuration accepts must still outlast the slowest admission.
    A worker read its domain as ready just before the mark; its creation lands `ADMISSION_BOUND` later."""
    machine, domain = leader_fails_while_a_worker_is_admitted(min(accepted_fences()), gpu_leader=True)
    machine.time_passes(seconds=min(machine.fence, ADMISSION_BOUND - 1.0))
    machine.reconcile_fully("a")  # deleted if the fence has passed
    machine.time_passes(seconds=ADMISSION_BOUND)  # the worker lands
    machine.check()
    assert domain not in machine.api.deleted_domains or machine.fence >= ADMISSION_BOUND
    machine.teardown()


def test_a_group_restarted_after_opt_out_keeps_its_claim_until_the_rollout_replaces_it() -> None:
    """Hole 8 of issue 19: the opt-in is removed (a new revision, rolling slowly); a leader of a group the rollout
    has not reached is deleted and made again from the old, stamped template. It must not run without its
    claim."""
    machine = ReplicaScope()
    machine.group_runs(0, gpu_leader=True)
    machine.workload_changes("opt-in toggled")
    machine.catch_up("a")
    machine.catch_up("b")
    machine.pod_ends_named(f"{LWS}-0", fails=False)
    machine.begin_leader_of(0, gpu=True, via=1, latency=1.0)
    if machine.pending:
        machine.persist_named(f"{LWS}-0")
    machine.check()
    machine.teardown()


def test_a_restarted_group_binds_its_worker_to_the_new_leader_even_when_the_stores_lag() -> None:
    """The webhook's stores still show the old leader incarnation, and the old StatefulSet is gone only at a later
    step: the worker of the new StatefulSet joins the new leader's domain, never the old one."""
    machine = ReplicaScope()
    old = machine.group_runs(0, gpu_leader=True)
    machine.pod_ends_named(f"{LWS}-0", fails=False)
    machine.begin_leader_of(0, gpu=True, via=1, latency=1.0)
    machine.persist_named(f"{LWS}-0")
    machine.begin_worker_of(0, via=1, latency=1.0)  # the old StatefulSet, not collected yet: refused
    assert machine.pending == []
    machine.api.delete("statefulsets", NS, f"{LWS}-0")  # collected
    machine.statefulset_of(0)
    machine.begin_worker_of(0, via=1, latency=1.0)
    machine.persist_named(f"{LWS}-0-1")
    worker = machine.api.get("pods", NS, f"{LWS}-0-1")
    new_leader = machine.api.get("pods", NS, f"{LWS}-0")
    assert worker is not None
    assert new_leader is not None
    assert references.recorded_domain(worker) == references.recorded_domain(new_leader) != old
    machine.check()
    machine.teardown()


def test_a_deposed_leaders_condemn_landing_after_the_hand_over_changes_nothing_unsafe() -> None:
    """Replica a sends the condemn of an obsolete domain and loses the Lease before it lands; b leads, a worker
    admitted before the mark lands, the condemn lands late: b sees the mark, times the fence from its own sight,
    and finds the worker."""
    machine = ReplicaScope()
    machine.configured(max(accepted_fences()))
    domain = machine.group_runs(0, gpu_leader=False)
    machine.begin_worker_of(0, via=1, latency=ADMISSION_BOUND)
    machine.pod_ends_named(f"{LWS}-0", fails=True)
    machine.catch_up("a")
    replica = machine.replicas["a"]
    snapshot, plan = machine.plan_of(replica.stores, (NS, LWS))
    replica.passing = machine.loop.create_task(replica.executor.apply(snapshot, plan))
    machine.settle()
    assert [r.what for r in machine.api.in_flight] == [f"patch computedomains/{domain}"]
    machine.lease_moves(to="b", deposed="cancelled at once")
    machine.land_everything()  # the condemn lands after the hand-over
    assert machine.is_condemned(domain)
    machine.time_passes(seconds=ADMISSION_BOUND)  # the worker lands
    machine.catch_up("b")
    machine.reconcile_fully("b")
    machine.time_passes(seconds=machine.fence)
    machine.reconcile_fully("b")
    machine.check()
    assert not machine.is_condemned(domain)
    machine.teardown()


def test_a_domain_created_at_admission_and_seen_before_its_leader_is_kept_by_the_fence() -> None:
    """The webhook's create lands and the leading replica sees the domain before the leader it was made for, whose
    pod lands as late as admission allows: the domain is condemned (nothing records it yet), the fence outlasts the
    admission, the final fresh read finds the leader, and the mark is lifted; the leader is then let go."""
    machine = ReplicaScope()
    machine.configured(max(accepted_fences()))
    machine.begin_leader_of(0, gpu=True, via=1, latency=ADMISSION_BOUND)
    machine.land_everything()  # the webhook's create (replica b's: no Lease needed)
    (domain,) = domains_of_group(machine, 0)
    machine.settle_leader(catch_up=True)
    assert machine.is_condemned(domain)
    machine.time_passes(seconds=ADMISSION_BOUND)  # the leader lands
    machine.time_passes(seconds=machine.fence)
    machine.settle_leader(catch_up=True)
    machine.check()
    assert not machine.is_condemned(domain)
    assert domain not in machine.api.deleted_domains
    leader = machine.api.get("pods", NS, f"{LWS}-0")
    assert leader is not None
    assert references.recorded_domain(leader) == domain
    machine.teardown()


def test_a_domain_created_for_a_leader_the_api_server_refused_goes_by_the_fenced_deletion() -> None:
    """The webhook created a leader's domain, then the API server refused the pod (a later webhook, a quota): no
    pod records the domain. It is condemned, and deleted only after the fence; the group's next leader gets its
    own."""
    machine = ReplicaScope()
    machine.begin_leader_of(0, gpu=True, via=1, latency=1.0)
    machine.land_everything()
    (refused,) = domains_of_group(machine, 0)
    machine.pending.clear()  # the pod is never persisted
    machine.begin_leader_of(0, gpu=True, via=0, latency=1.0)
    machine.persist_named(f"{LWS}-0")
    machine.settle_leader(catch_up=True)
    assert machine.is_condemned(refused)
    machine.time_passes(seconds=machine.fence)
    machine.settle_leader(catch_up=True)
    machine.check()
    assert refused in machine.api.deleted_domains
    leader = machine.api.get("pods", NS, f"{LWS}-0")
    assert leader is not None
    assert domains_of_group(machine, 0) == [references.recorded_domain(leader)]
    machine.teardown()


def test_a_leader_of_a_recreated_lws_gets_its_domain_even_while_the_stores_hold_the_old_one() -> None:
    """The LeaderWorkerSet is deleted and created again under its name while the leading replica's watch of it
    lags; the webhook's create of the new leader's domain is lost. The planner must not create the domain for the
    incarnation its stores still hold: the domain would name the old uid and the group would stay gated. Once the
    watch delivers the new LeaderWorkerSet, the domain is created for it."""
    machine = ReplicaScope()
    machine.catch_up("a")
    machine.workload_changes("replaced")  # deleted
    machine.workload_changes("replaced")  # created again: a new uid
    live = machine.api.get(keys.LWS_PLURAL, NS, LWS)
    assert live is not None
    machine.begin_leader_of(0, gpu=True, via=1, latency=1.0)
    (lost,) = machine.api.in_flight  # the webhook's create, lost on the way
    lost.answer.set_exception(memory_api.timed_out())
    machine.api.in_flight.remove(lost)
    machine.settle()
    machine.persist_named(f"{LWS}-0")
    replica = machine.replicas["a"]
    machine.deliver(replica, replica.mirror("pods"), 1000)
    held = replica.stores.workload(NS, LWS)
    assert held is not None
    assert held.uid != live["metadata"]["uid"]  # the stores still hold the deleted one
    machine.reconcile_fully("a")
    machine.check()
    assert domains_of_group(machine, 0) == []
    machine.catch_up("a")
    machine.reconcile_fully("a")
    machine.check()
    (domain,) = domains_of_group(machine, 0)
    created = machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
    assert created is not None
    assert created["metadata"]["labels"][keys.OWNER_UID_LABEL] == live["metadata"]["uid"]
    machine.teardown()
