"""Safety of the whole slice-scope protocol (mnnvl-ds) over adversarial interleavings (`harness`).

The real webhooks (`rules.ds_patch` and `rules.ds_errors` for every DisaggregatedSet write,
`slice_admission.child_errors` for every child LeaderWorkerSet, `slice_admission.admit_pod` for every stamped pod),
stores, planner and executor (with the shared domain writer and the upstream retries), run in two replicas
against an in-memory API server. Besides what `harness` interleaves, this model has, as upstream and Kubernetes make them:

- the DisaggregatedSet `llm` (two slices, roles prefill and decode), opted in; its opt-in removed and given again,
  and its templates edited: each a new revision (upstream hashes the stamped templates), whose child
  LeaderWorkerSets upstream creates one (slice, role) at a time while those of earlier revisions drain; `llm`
  deleted (garbage collection takes its LeaderWorkerSets one step at a time, not its pods at once) and created
  again under its name (a new uid, the same child names); a plain DisaggregatedSet whose children must never be
  refused;
- pods of every child, whose admission is begun and persisted as separate steps, under names every new
  incarnation of their LeaderWorkerSet reuses; pods failing or deleted.

After every step, besides the invariants of every scope: every pod holds or records nothing but the domain of its
own LeaderWorkerSet's (slice, revision) (one slice, one domain); no LeaderWorkerSet of the foreign look-alike's
slice is ever admitted.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import references
from mnnvl_ds import planner, rules, scope, slice_admission, state
from mnnvl_ds.retries import UpstreamRetries
from mnnvl_runtime import scopes

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
    ScopeMachine,
    accepted_fences,
    campaign,
)

DS = "llm"
PLAIN = "plain"
SLICES = (0, 1)
ROLES = ("prefill", "decode")
CPU = {"name": "router", "image": "router"}
LATENCIES = (1.0, ADMISSION_BOUND)
#: Upstream's revision hash of the roles' templates, as (template edits, stamped) name it.
REVISIONS = {(0, True): "aaaaaaaa", (1, True): "bbbbbbbb", (0, False): "cccccccc", (1, False): "dddddddd"}
#: The look-alike's (slice, revision): its LeaderWorkerSets must never be admitted.
FOREIGN_POSITION = (1, "bbbbbbbb")


def ds_body(name: str, *, opted_in: bool, edits: int = 0) -> Object:
    template: Object = {"metadata": {}, "spec": {"containers": [copy.deepcopy(GPU)]}}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"} if opted_in else {},
        },
        "spec": {
            "slices": len(SLICES),
            "roles": [
                {"name": role, "spec": {"leaderWorkerTemplate": {"leaderTemplate": copy.deepcopy(template)}}}
                for role in ROLES
            ],
        },
        "edits": edits,  # the model's own count of template edits (stripped before storing)
    }


def child_name(ds: str, position: tuple[int, str], role: str) -> str:
    return f"{ds}-{position[0]}-{position[1]}-{role}"


class SliceScope(ScopeMachine[state.Stores, scopes.ScopeExecutor[planner.Snapshot]]):
    def __init__(self) -> None:
        super().__init__(
            descriptor=scope.SCOPE,
            new_executor=lambda writer, client, may_write, stores: self.scope_executor(
                writer, client, self.version_of(client.sender).counterpart(UpstreamRetries)(client, may_write=may_write)
            ),
        )
        #: Per DisaggregatedSet name: its template edits (for its revision).
        self.edits: dict[str, int] = {}
        found = self.write_ds(ds_body(DS, opted_in=True))
        assert found is not None
        workload = planner.DisaggregatedSetFacts(namespace=NS, name=DS, uid=found["metadata"]["uid"])
        self.foreign = self.put_foreign_look_alike(
            names.slice_domain_name(DS, *FOREIGN_POSITION), planner.domain_labels(workload, FOREIGN_POSITION)
        )
        self._start_replicas()

    def on_lease_change(self, replica: Any, leading: bool) -> None:
        super().on_lease_change(replica, leading)
        follow_up = replica.executor.follow_up
        assert follow_up is not None
        follow_up.on_lease_change(leading)

    # --- DisaggregatedSets, through the real webhooks --------------------------------------------------------

    def write_ds(self, body: Object) -> Object | None:
        """Create or update a DisaggregatedSet as the API server does (`write_workload`)."""
        self.edits[body["metadata"]["name"]] = body.pop("edits")
        stored, _ = self.write_workload(body, plain=PLAIN)
        return stored

    def revision(self, ds: Object) -> str:
        stamped = rules.in_slice_scope({"spec": ds["spec"]["roles"][0]["spec"]})
        return REVISIONS[(self.edits[ds["metadata"]["name"]] % 2, stamped)]

    @precondition(lambda self: self.may_disrupt("workload"))
    @rule(change=st.sampled_from(("opt-in toggled", "templates edited", "replaced", "plain one replaced")))
    def workload_changes(self, change: str) -> None:
        """The user removes the opt-in of `llm` or gives it again, or edits its templates: a new revision; or
        `llm` is deleted (garbage collection takes its LeaderWorkerSets later, not its pods), or created again
        under its name (a new uid); or a plain DisaggregatedSet is deleted or created."""
        self.disrupted("workload")
        name = PLAIN if change == "plain one replaced" else DS
        current = self.api.get(keys.DS_PLURAL, NS, name)
        if change in ("replaced", "plain one replaced"):
            if current is None:
                self.write_ds(ds_body(name, opted_in=name == DS))
            else:
                self.api.delete(keys.DS_PLURAL, NS, name)
            return
        if current is None:
            return
        annotations = current["metadata"].setdefault("annotations", {})
        edits = self.edits[DS]
        if change == "templates edited":
            edits += 1
        elif annotations.pop(keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, None) is None:
            annotations[keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "enabled"
        self.write_ds({**current, "edits": edits})

    # --- child LeaderWorkerSets, as upstream makes them and the real webhook admits them ---------------------

    def _missing_children(self) -> list[tuple[str, int, str]]:
        found = []
        for ds_name in (DS, PLAIN):
            ds = self.api.get(keys.DS_PLURAL, NS, ds_name)
            if ds is None:
                continue
            revision = self.revision(ds)
            found += [
                (ds_name, s, role)
                for s in SLICES
                for role in ROLES
                if self.api.peek(keys.LWS_PLURAL, NS, child_name(ds_name, (s, revision), role)) is None
            ]
        return found

    @precondition(lambda self: self._missing_children())
    @rule(data=st.data())
    def child_created(self, data: st.DataObject) -> None:
        """Upstream creates one child LeaderWorkerSet of the current revision, through our webhook."""
        ds_name, slice_index, role = data.draw(st.sampled_from(self._missing_children()))
        self.create_child(ds_name, slice_index, role)

    def create_child(self, ds_name: str, slice_index: int, role: str) -> None:
        ds = self.api.get(keys.DS_PLURAL, NS, ds_name)
        assert ds is not None
        revision = self.revision(ds)
        labels = {
            keys.DS_NAME_LABEL: ds_name,
            keys.DS_SLICE_LABEL: str(slice_index),
            keys.DS_REVISION_LABEL: revision,
            keys.DS_ROLE_LABEL: role,
        }
        (role_spec,) = [r["spec"] for r in ds["spec"]["roles"] if r["name"] == role]
        template = copy.deepcopy(role_spec["leaderWorkerTemplate"])
        for pod_template in template.values():
            pod_template["metadata"]["labels"] = {**(pod_template["metadata"].get("labels") or {}), **labels}
        owner = {
            "apiVersion": keys.DS_API_VERSION,
            "kind": keys.DS_KIND,
            "name": ds_name,
            "uid": ds["metadata"]["uid"],
            "controller": True,
        }
        body = {
            "metadata": {
                "name": child_name(ds_name, (slice_index, revision), role),
                "namespace": NS,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {"replicas": 1, "leaderWorkerTemplate": template},
        }
        child_errors = self.serving("child").counterpart(slice_admission.child_errors)
        refused = self.loop.run_until_complete(
            child_errors(self.api.client(keys.DS_CONTROLLER), body, None, gate_enabled=True)
        )
        if ds_name == PLAIN:
            self.note_plain_answer(f"LeaderWorkerSet {body['metadata']['name']}", refused=bool(refused), patch=[])
        if not refused:
            self.api.put(keys.LWS_PLURAL, body, manager="disaggregatedset")

    def _children(self) -> list[str]:
        return sorted(body["metadata"]["name"] for body in self.api.view(keys.LWS_PLURAL))

    @precondition(lambda self: self._children())
    @rule(data=st.data())
    def child_deleted(self, data: st.DataObject) -> None:
        """A rollout drained it, or `slices` shrank, or the garbage collector took it after its set went: its pods
        go with it (a pod being admitted may still land)."""
        self.delete_child(data.draw(st.sampled_from(self._children())))

    def delete_child(self, name: str) -> None:
        self.api.delete(keys.LWS_PLURAL, NS, name)
        self._delete_pod(f"{name}-0")

    # --- pods, as the StatefulSets and the API server's admission make them ---------------------------------

    def _podless(self) -> list[str]:
        return [c for c in self._children() if self._pod(f"{c}-0") is None and not self._is_pending(f"{c}-0")]

    @precondition(lambda self: self._podless())
    @rule(data=st.data(), gpu=st.booleans(), via=st.integers(0, len(REPLICAS) - 1), latency=st.sampled_from(LATENCIES))
    def begin_pod(self, data: st.DataObject, gpu: bool, via: int, latency: float) -> None:
        self.begin_pod_of(data.draw(st.sampled_from(self._podless())), gpu=gpu, via=via, latency=latency)

    def begin_pod_of(self, child: str, *, gpu: bool, via: int, latency: float) -> None:
        lws = self.api.get(keys.LWS_PLURAL, NS, child)
        assert lws is not None
        template = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        body = {
            "metadata": {
                "name": f"{child}-0",
                "namespace": NS,
                "labels": {**template["metadata"]["labels"], keys.LWS_NAME_LABEL: child},
                "annotations": {},
            },
            "spec": {"containers": [copy.deepcopy(GPU if gpu else CPU)]},
            "status": {"phase": "Pending"},
        }
        if not self.enrolled(body):  # our pod webhook's objectSelector does not match it
            self.pending.append((self.now + latency, body))
            return
        replica = self._replica(via)
        admit_pod = replica.version.counterpart(slice_admission.admit_pod)
        self._admit(body, admit_pod(replica.client, replica.stores, body), latency=latency)

    def _pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.api.view("pods"))

    @precondition(lambda self: self._pods())
    @rule(data=st.data(), fails=st.booleans())
    def pod_ends(self, data: st.DataObject, fails: bool) -> None:
        name = data.draw(st.sampled_from(self._pods()))
        if fails:
            self._pod_fails(name)
        else:
            self.api.delete("pods", NS, name)

    # --- where a run starts -------------------------------------------------------------------------------

    @initialize(running=st.integers(0, len(SLICES)), with_pods=st.booleans())
    def slices_running(self, running: int, with_pods: bool) -> None:
        """The run starts from a quiet cluster, or with the first `running` slices running (made by the model's
        own steps, `slice_runs`), their pods admitted or not: the search then spends its steps on what happens to
        running slices."""
        for slice_index in SLICES[:running]:
            self.slice_runs(slice_index, with_pods=with_pods)

    def slice_runs(self, slice_index: int, *, with_pods: bool) -> None:
        """Every role's child LeaderWorkerSet of the slice at the current revision, the slice's domain created by
        replica a (leading), its GPU pods (if `with_pods`) admitted and landed, every store caught up."""
        assert self.api.leader == REPLICAS[0]
        for role in ROLES:
            self.create_child(DS, slice_index, role)
        self.catch_up(REPLICAS[0])
        self.reconcile_fully(REPLICAS[0])
        if with_pods:
            ds = self.api.get(keys.DS_PLURAL, NS, DS)
            assert ds is not None
            for role in ROLES:
                child = child_name(DS, (slice_index, self.revision(ds)), role)
                self.begin_pod_of(child, gpu=True, via=0, latency=1.0)
                self.persist_named(f"{child}-0")
            self.catch_up(REPLICAS[0])
            self.reconcile_fully(REPLICAS[0])
        for name in REPLICAS:
            self.catch_up(name)

    # --- what must hold after every step, besides the invariants of every scope ---------------------------

    @invariant()
    def every_pod_is_bound_to_its_own_slice_and_revision(self) -> None:
        for pod in self.api.view("pods"):
            labels = pod["metadata"]["labels"]
            own = names.slice_domain_name(
                labels[keys.DS_NAME_LABEL], int(labels[keys.DS_SLICE_LABEL]), labels[keys.DS_REVISION_LABEL]
            )
            assert references.recorded_domain(pod) in (None, own)
            assert references.referenced_claim_templates(pod) <= {names.claim_template_name(own)}

    @invariant()
    def the_foreign_look_alikes_slice_is_never_scaled(self) -> None:
        assert all(self.api.get(keys.LWS_PLURAL, NS, child_name(DS, FOREIGN_POSITION, r)) is None for r in ROLES)

    def check_scope(self) -> None:
        self.every_pod_is_bound_to_its_own_slice_and_revision()
        self.the_foreign_look_alikes_slice_is_never_scaled()


SliceScope.TestCase.settings = settings.for_model(max_examples=150, steps=80)
test_slice_scope_interleavings = SliceScope.TestCase

#: How a slice's pods come and go: its children created and deleted, their pods begun.
POD_RULES = ("child_created", "child_deleted", "begin_pod")

#: Pods admitted while their slice's domain is retired (its children drained), with the Lease holder settling in
#: between and admissions landing as late as they may (`harness.campaign`).
AdmissionRaces = campaign(SliceScope, "AdmissionRaces", rules=(*POD_RULES, *ADMISSION_RACE_RULES))
test_slice_scope_admission_races = AdmissionRaces.TestCase

#: Lease hand-overs while passes and their writes are in flight, with children and pods coming and going.
HandOvers = campaign(SliceScope, "HandOvers", rules=(*POD_RULES, *HAND_OVER_RULES))
test_slice_scope_hand_overs = HandOvers.TestCase

#: Watch streams that lag, drop events and relist while the DisaggregatedSet is rewritten (opt-in toggled,
#: templates edited, deleted and created again) and its children come and go.
StaleStores = campaign(SliceScope, "StaleStores", rules=(*POD_RULES, *STALE_STORE_RULES))
test_slice_scope_stale_stores = StaleStores.TestCase


# --- scripted scenarios: the model's own steps, in an order that matters --------------------------------------

PREFILL = child_name(DS, (0, "aaaaaaaa"), "prefill")
DOMAIN = names.slice_domain_name(DS, 0, "aaaaaaaa")


def running_slice(machine: SliceScope) -> None:
    """Slice 0 at revision aaaaaaaa with its prefill LeaderWorkerSet, its domain created by replica a, every store
    caught up."""
    machine.create_child(DS, 0, "prefill")
    machine.catch_up("a")
    machine.reconcile_fully("a")
    machine.catch_up("a")
    machine.catch_up("b")
    assert machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, DOMAIN) is not None


def a_prefill_pod_lands_through_replica_b(machine: SliceScope) -> None:
    """A GPU pod of the prefill child admitted by replica b's webhook lands at once (unless refused), then every
    invariant is checked."""
    machine.begin_pod_of(PREFILL, gpu=True, via=1, latency=1.0)
    if machine.pending:
        machine.persist_named(f"{PREFILL}-0")
    machine.check()
    machine.teardown()


def drained(machine: SliceScope, name: str) -> None:
    """The slice's LeaderWorkerSet is drained; replica `name`, leading, sees it and condemns the domain."""
    machine.delete_child(PREFILL)
    machine.catch_up(name)
    machine.reconcile_fully(name)
    assert machine.is_condemned(DOMAIN)


def test_a_pod_admitted_before_its_slice_was_drained_keeps_the_domain_until_it_ends() -> None:
    machine = SliceScope()
    machine.configured(max(accepted_fences()))
    running_slice(machine)
    machine.begin_pod_of(PREFILL, gpu=True, via=1, latency=ADMISSION_BOUND)
    assert len(machine.pending) == 1
    drained(machine, "a")
    machine.time_passes(seconds=machine.fence)  # the pod lands within its deadline, before the fence has passed
    machine.catch_up("a")
    machine.reconcile_fully("a")  # the final fresh read finds the pod: the mark is lifted
    machine.check()
    assert not machine.is_condemned(DOMAIN)
    machine.teardown()


def test_once_its_last_pod_exits_a_drained_slices_domain_is_deleted() -> None:
    machine = SliceScope()
    running_slice(machine)
    drained(machine, "a")
    machine.time_passes(seconds=machine.fence)
    machine.reconcile_fully("a")
    assert DOMAIN in machine.api.deleted_domains
    machine.check()
    machine.teardown()


def test_the_foreign_look_alikes_slice_is_refused() -> None:
    machine = SliceScope()
    machine.workload_changes("templates edited")  # revision bbbbbbbb
    machine.create_child(DS, FOREIGN_POSITION[0], "prefill")
    assert machine.api.get(keys.LWS_PLURAL, NS, child_name(DS, FOREIGN_POSITION, "prefill")) is None
    machine.check()
    machine.teardown()


def test_a_replica_that_led_before_times_the_fence_from_its_own_sight_of_this_mark() -> None:
    """Hole 1 of issue 19. Replica a condemns the domain and loses the Lease; b lifts the mark (the slice is back)
    and condemns the domain again; a pod's webhook read the domain just before b's mark; a leads again. Its
    first sight of the earlier mark must not make the fence look elapsed."""
    machine = SliceScope()
    machine.configured(max(accepted_fences()))
    running_slice(machine)
    drained(machine, "a")
    machine.lease_moves(to="b", deposed="cancelled at once")
    machine.time_passes(seconds=machine.fence)
    machine.create_child(DS, 0, "prefill")  # the slice is back under the same name
    machine.catch_up("b")
    machine.reconcile_fully("b")
    assert not machine.is_condemned(DOMAIN)
    machine.begin_pod_of(PREFILL, gpu=True, via=1, latency=ADMISSION_BOUND)  # reads the domain ready
    drained(machine, "b")
    machine.lease_moves(to="a", deposed="cancelled at once")
    machine.catch_up("a")
    machine.reconcile_fully("a")
    machine.time_passes(seconds=ADMISSION_BOUND)  # the pod lands
    machine.check()
    machine.teardown()


def test_a_stale_child_in_the_webhooks_store_does_not_let_a_pod_skip_its_claim() -> None:
    """Hole 3 of issue 19. The DisaggregatedSet is deleted and created again; the old child LeaderWorkerSet's
    DELETED event is lost by the webhook replica's watch (a 410), so its store holds the stale child beside the
    new one of the same name. The new child's pod must still get its claim, or be gated."""
    machine = SliceScope()
    running_slice(machine)
    machine.workload_changes("replaced")  # deleted
    drained(machine, "a")
    machine.time_passes(seconds=machine.fence)
    machine.reconcile_fully("a")  # the old domain is deleted...
    machine.catch_up("a")
    machine.reconcile_fully("a")  # ...and let go
    assert machine.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, DOMAIN) is None
    machine.workload_changes("replaced")  # created again: a new uid
    machine.create_child(DS, 0, "prefill")
    webhook = machine.replicas["b"]
    children = webhook.mirror(keys.LWS_PLURAL)
    machine.drop(webhook, children, 1, redelivered=False)  # the old child's DELETED event is lost
    machine.catch_up("b")
    a_prefill_pod_lands_through_replica_b(machine)


def test_a_pod_of_a_revision_that_opted_in_keeps_its_claim_after_opt_out() -> None:
    """Hole 8 of issue 19, for slices: the opt-in is removed (a new revision); a pod of a child LeaderWorkerSet of
    the old, stamped revision is made again before the rollout drains it. It must not run without its claim."""
    machine = SliceScope()
    running_slice(machine)
    machine.workload_changes("opt-in toggled")
    machine.catch_up("b")
    a_prefill_pod_lands_through_replica_b(machine)


def test_no_configurable_fence_lets_a_slice_domain_go_before_a_pod_admitted_onto_it_lands() -> None:
    """Hole 4 of issue 19, for slices: the shortest fence the configuration accepts must outlast the slowest
    admission."""
    machine = SliceScope()
    machine.configured(min(accepted_fences()))
    running_slice(machine)
    machine.begin_pod_of(PREFILL, gpu=True, via=1, latency=ADMISSION_BOUND)
    drained(machine, "a")
    machine.time_passes(seconds=min(machine.fence, ADMISSION_BOUND - 1.0))
    machine.reconcile_fully("a")
    machine.time_passes(seconds=ADMISSION_BOUND)  # the pod lands
    machine.check()
    machine.teardown()
