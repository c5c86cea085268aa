"""Safety of mnnvl-guardian over adversarial interleavings (`harness`).

The real guardian runs in two replicas against the in-memory API server: its stores (`state.Stores`), fed by its
watches of managed ComputeDomains and scoped pods; `handlers.Guardian.guard` (stores, `planner.decide`,
`executor.apply` with the shared domain writer) as the Lease holder's pass over one domain, taken from its work
queue as watch events touch domains (`handlers.on_domain`, `on_pod`), or drawn at any time (the periodic resync);
and, in Deny mode, `admission.refuse_in_use_deletion`, the webhook's answer to a user's DELETE, served by either
replica. Besides what `harness` interleaves (watch streams lagging, delivering one event at a time, losing events;
resyncs; Lease hand-overs; writes in flight, late or lost), the world around the guardian does, one step at a time:

- mnnvl-lws and mnnvl-ds create domains, with the protection finalizer or without it, under two names that every
  new incarnation reuses; someone else creates a look-alike labelled as theirs (as `kubectl`, or writing as the
  other controller), our finalizer copied into it or not; someone takes one of ours over, live or being deleted,
  by applying its identity labels under their own field manager;
- pods that hold a domain's claim, record it (as a CPU-only leader does), or both, carrying our scope label or
  made by hand without it (then in no watch of the guardian), under names every new incarnation reuses; each made
  while its domain is absent or live, never onto one being deleted (our pod webhooks refuse those; the release
  cannot be atomic with a pod's creation, and is not asked to be); then failing, succeeding, terminating (past its
  grace period or not) and gone;
- users deleting domains: in Deny mode the webhook answers first, its reads answered, or failing from the first
  read or a later one as when its deadline passes or the API server is unreachable; otherwise, or once the
  webhook allows it, the DELETE proceeds and the finalizers hold the domain;
- another controller adding its own finalizer to a domain and removing it later; someone removing ours by hand;
- the AutoComputeDomain gate changed in the configuration, which a replica's process takes up when it starts
  again (a rollout restarts a follower; a deposed leader may restart at a hand-over), so the two replicas may
  disagree, as they may from the start of a run (a rollout under way).

A run starts from a world already there (domains live or being deleted, pods), which both replicas have listed,
and from what the world did since, which no watch has delivered yet: the guardian's first passes already decide on
stale stores. One rule draws every step, each kind as often as its weight says (`GUARDIAN_WEIGHTS`,
`WORLD_WEIGHTS`, `WATCH_WEIGHTS`), so that the guardian's moves keep their share of every run whatever the world
does, and Hypothesis' swarm testing (which leaves whole rules out of a run) leaves nothing out.

The oracle is the model's own record of who made what, never the product's decisions: which domain incarnations
mnnvl-lws or mnnvl-ds created with their own labels and nobody took over since (ours), which pods reference which
domain name and whether they still run, each domain as the model itself last wrote it, and the configuration
each guardian process started with. Any other change of a domain is the guardian's: a request of its that landed
(`Write`). After every step, besides the harness's `nothing_is_written_by_a_replica_that_does_not_lead`:

- `a_foreign_domain_is_never_written`: the guardian writes no domain mnnvl did not create, nor one taken over;
- `the_guardian_changes_nothing_but_its_finalizer`;
- `another_controllers_finalizer_is_never_removed`;
- `a_finalizer_is_released_only_from_a_deleted_unused_domain`: the protection finalizer leaves a domain only once
  its deletion has begun, and never while a non-terminal pod references it;
- `with_the_gate_off_nothing_is_released`: no process that started with the gate off releases a finalizer;
- `in_deny_mode_no_used_domain_is_let_go`: the webhook never allows the DELETE of one of ours while a
  non-terminal pod references it.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, cast

import kopf
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

from mnnvl_api import keys, models, names
from mnnvl_api.models import configuration
from mnnvl_guardian import admission, handlers, state
from mnnvl_runtime import controller, domain_writer, identity, kube, leases
from mnnvl_runtime import settings as process_settings
from mnnvl_runtime.stores import NamespacedName

from ..mnnvl_runtime.memory_api import MemoryClient, Object
from . import settings
from .harness import (
    DEPOSED,
    GPU,
    LEASE_TARGETS,
    NS,
    REPLICAS,
    REQUEST_OUTCOMES,
    ControllerMachine,
    Replica,
    domain_manifest,
)

CD = keys.COMPUTE_DOMAIN_PLURAL
PROTECTION = keys.PROTECTION_FINALIZER
#: Another controller's finalizer: never the guardian's to remove.
THEIRS = "backup.example.com/keep"
#: The names every new domain incarnation takes.
DOMAINS = ("dsr1-0-x7k2b", "dsr1-1-x7k2b")
#: The names every new pod incarnation takes.
PODS = ("dsr1-0", "dsr1-0-1", "by-hand")
#: Who creates a domain, by the model's account: (field manager, the managed-by label it writes). Only mnnvl-lws
#: and mnnvl-ds writing their own label make a domain ours.
MAKERS = {
    "mnnvl-lws": (keys.LWS_CONTROLLER, keys.LWS_CONTROLLER),
    "mnnvl-ds": (keys.DS_CONTROLLER, keys.DS_CONTROLLER),
    "a look-alike": ("kubectl", keys.LWS_CONTROLLER),
    "one posing as the other controller": (keys.DS_CONTROLLER, keys.LWS_CONTROLLER),
}
OURS = frozenset({"mnnvl-lws", "mnnvl-ds"})
#: How often, relatively, each maker creates a domain.
MAKER_WEIGHTS = {"mnnvl-lws": 2, "mnnvl-ds": 2, "a look-alike": 1, "one posing as the other controller": 1}
MAKER = st.sampled_from([maker for maker, weight in MAKER_WEIGHTS.items() for _ in range(weight)])
#: What the world around the guardian may do in one step, and how often, relatively (of what is possible then).
WORLD_WEIGHTS = {
    "a domain is created": 3,
    "a user deletes a domain": 3,
    "a live domain is taken over": 5,
    "a domain being deleted is taken over": 4,
    "another controller finalizes a domain": 2,
    "our finalizer is removed by hand": 1,
    "a pod is created": 4,
    "a pod ends": 3,
    "the configuration is rolled out": 1,
}
POD_ENDS = ("fails", "succeeds", "starts terminating", "is stuck terminating", "is gone")
#: What each watch stream does when they move (`harness.WATCH_ACTIONS`), and how often, relatively: events mostly
#: arrive one at a time. The four streams' actions (two replicas, each watching domains and pods) are drawn at once,
#: one plan (a strategy made once: its label is computed over every plan).
WATCH_WEIGHTS = {"waits": 2, "delivers one": 4, "delivers all": 1, "drops": 1, "resyncs": 1}
WATCH_PLANS = st.sampled_from(
    list(itertools.product([a for a, weight in WATCH_WEIGHTS.items() for _ in range(weight)], repeat=4))
)
#: What the guardian's replicas go through in one step (`harness.ControllerMachine`), and how often, relatively (of
#: what is possible then): its watch streams move more often than anything else, as events do; a write in flight
#: ends sooner than the Lease moves. A quiet spell (`harness.ControllerMachine.settle_leader`) makes whatever the
#: Lease holder decides land at once: every decision on the world as it stands is judged in that step, not only
#: those that a lucky order of fine-grained moves carries through.
GUARDIAN_WEIGHTS = {
    "its watch streams move": 12,
    "the Lease holder starts a pass": 6,
    "a write in flight ends": 9,
    "the Lease moves": 3,
    "a quiet spell": 2,
}
#: How a pod references its domain.
REFERENCES = ("holds its claim", "records it", "both")
#: How the Deny webhook's in-use check goes: its reads answered; or failing from the first read (or after one) as
#: when the check's deadline passes (`asyncio.wait_for` raises TimeoutError) or the API server is unreachable.
CHECKS: dict[str, tuple[Exception, int] | None] = {
    "answered": None,
    "times out": (TimeoutError(), 0),
    "times out after a read": (TimeoutError(), 1),
    "finds the API server unreachable": (kube.UnreachableError("GET", "/api/v1/pods", ConnectionError()), 0),
}
CHECK = st.sampled_from(sorted(CHECKS))
#: The Deny webhook's handler, called as kopf calls it (with the keyword arguments it reads).
DENY_WEBHOOK = cast(Callable[..., Coroutine[Any, Any, None]], admission.refuse_in_use_deletion)
#: When a terminating pod's grace period ends: already (stuck, for the webhook's message), or much later.
GRACE_ENDS = {"is stuck terminating": "2000-01-01T00:00:00Z", "starts terminating": "2999-01-01T00:00:00Z"}


@dataclasses.dataclass(kw_only=True)
class Made:
    """One domain incarnation, as the model made it."""

    name: str
    uid: str
    #: Created by mnnvl-lws or mnnvl-ds under its own label, and nobody has taken it over since.
    ours: bool
    #: The domain as the model last saw it after its own writes and the guardian's (None: gone).
    known: Object | None


@dataclasses.dataclass(kw_only=True)
class PodMade:
    """One pod incarnation, as the model made it: the domain name it references, and whether it still runs (not
    Succeeded, Failed or gone; a terminating pod still runs)."""

    name: str
    domain: str
    live: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class Write:
    """A change of a domain between two steps that the model did not make: the guardian's request landing."""

    domain: str
    ours: bool
    before: Object
    #: None: the domain is gone (its last finalizer was removed while it was being deleted).
    after: Object | None
    #: The pods that referenced the domain and still ran when the change landed, by the model's record.
    users: tuple[str, ...]
    #: The AutoComputeDomain gate of the process that sent the request.
    gate: bool

    @property
    def released(self) -> bool:
        return PROTECTION in finalizers(self.before) and PROTECTION not in finalizers(self.after)


def finalizers(domain: Object | None) -> list[str]:
    return list((domain or {}).get("metadata", {}).get("finalizers") or [])


def deleting(domain: Object | None) -> bool:
    return bool((domain or {}).get("metadata", {}).get("deletionTimestamp"))


def beyond_finalizers(domain: Object) -> Object:
    """What a domain says apart from its finalizers and its version."""
    meta = {k: v for k, v in domain["metadata"].items() if k not in ("finalizers", "resourceVersion")}
    return {**domain, "metadata": meta}


@dataclasses.dataclass(kw_only=True)
class Elector:
    """What the guardian's components ask of their process's `leases.LeaderElector`: the model's Lease."""

    may_write: Callable[[], bool]
    term: Callable[[], int]
    on_change: list[Callable[[bool], None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Process:
    """One guardian process, set up as `handlers.start` sets it up: the real `handlers.Guardian` over the process's
    stores, writing with the harness's writer (built as `reconciling.Reconciling` builds it, on the model's Lease),
    and the memo its Deny webhook is called with. Its configuration is read once, when it starts. Its work queue
    holds the domains events touched, in order, whether it leads or not (a follower's is worked once it leads)."""

    guardian: handlers.Guardian
    memo: kopf.Memo
    gate: bool
    queue: list[NamespacedName] = dataclasses.field(default_factory=list)

    @property
    def deny_reads(self) -> state.DenyReads:
        found: state.DenyReads = self.memo["deny_reads"]
        return found


def pod_manifest(name: str, domain: str, *, reference: str, scoped: bool) -> Object:
    """A running pod referencing `domain`: holding its channel claim (in its GPU container), recording it, or both;
    labelled with our scope, as our webhooks admit it, or made by hand without."""
    container: Object = {**copy.deepcopy(GPU)}
    meta: Object = {"name": name, "namespace": NS, "labels": {keys.SCOPE_LABEL: keys.SCOPE_REPLICA} if scoped else {}}
    spec: Object = {"containers": [container]}
    if reference != "holds its claim":
        meta["annotations"] = {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain}
    if reference != "records it":
        template = names.claim_template_name(domain)
        spec["resourceClaims"] = [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": template}]
        container["resources"]["claims"] = [{"name": keys.CHANNEL_CLAIM_NAME}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


class GuardianModel(ControllerMachine[state.Stores, Process]):
    def __init__(self) -> None:
        super().__init__(
            component=keys.GUARDIAN_CONTROLLER, scope="guardian", new_stores=state.Stores, new_executor=self.new_process
        )
        #: The configuration a guardian process reads when it starts; the gate a replica's first process runs with,
        #: when a rollout was under way as the run began.
        self.gate = True
        self.first_gates: dict[str, bool] = {}
        self.protection = configuration.DeletionProtection.FINALIZER
        #: Every domain incarnation the model made (by uid), and every pod incarnation (by uid).
        self.made: dict[str, Made] = {}
        self.pods: dict[str, PodMade] = {}
        #: Every process's gate (`memory_api.MemoryClient.process`), as it started.
        self.gates: dict[int, bool] = {}
        #: The guardian's writes, as the model saw them land; how many landed requests it has looked at.
        self.writes: list[Write] = []
        self.observed = 0
        #: Deny mode: DELETEs of one of ours the webhook allowed while pods used it; how many it refused.
        self.let_go: list[str] = []
        self.refused = 0

    @initialize(
        protection=st.sampled_from(configuration.DeletionProtection),
        gate=st.booleans(),
        earlier_gate=st.booleans(),
        data=st.data(),
    )
    def configured(
        self, protection: configuration.DeletionProtection, gate: bool, earlier_gate: bool, data: st.DataObject
    ) -> None:
        """The deletion protection mode of this run's `Configuration` and its gate; replica b may still run with the
        gate of an earlier configuration (a rollout under way). The domains there already (each name free, taken by
        a live domain, or by one being deleted, deleted before any pod used it) and the pods, which both replicas
        have listed; and what the world did since, which no watch has delivered yet."""
        self.protection = protection
        self.gate = gate
        self.first_gates[REPLICAS[1]] = earlier_gate
        for name in DOMAINS:
            found = data.draw(st.sampled_from(("absent", "live", "being deleted")))
            if found == "live":
                self.domain_created(name, data)
            if found == "being deleted":  # still there, so held by our finalizer, which the guardian added
                self.create_domain(name, data.draw(MAKER), protected=True)
                self.api.delete(CD, NS, name)
                self._wrote(name)
        for name in PODS:
            if data.draw(st.booleans()) and self._domains_pods_may_use():
                self.pod_created(name, data)
        self.start()
        for _ in range(data.draw(st.integers(0, 6))):
            self.world_changes(data.draw(st.sampled_from(self._world_changes())), data)

    def start(self) -> None:
        """Both replicas start, replica a leading, each having listed the world as it is now."""
        self._start_replicas()
        for name in REPLICAS:
            self.catch_up(name)

    def new_process(
        self,
        writer: domain_writer.DomainWriter,
        client: MemoryClient,
        may_write: Callable[[], bool],
        found: state.Stores,
    ) -> Process:
        gate = self.first_gates.pop(client.sender, self.gate)
        settings_ = models.Configuration.model_validate(
            {
                "featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate},
                "computeDomain": {"deletionProtection": self.protection.value},
            }
        )
        elector = Elector(may_write=may_write, term=writer.term)
        context = controller.Context(
            identity=identity.Identity(keys.GUARDIAN_CONTROLLER),
            process=process_settings.ProcessSettings.model_construct(),
            configuration=settings_,
            client=cast(kube.Kube, client),
            elector=cast(leases.LeaderElector, elector),
        )
        guardian = handlers.Guardian(context, found)
        guardian.loop.writer = writer
        memo = kopf.Memo()
        memo.context = context
        memo["deny_reads"] = state.DenyReads(stores=found, synced=guardian.loop.sync.synced, writer=writer)
        self.gates[client.process] = gate
        return Process(guardian=guardian, memo=memo, gate=gate)

    def work_keys(self, replica: Replica[state.Stores, Process]) -> list[NamespacedName]:
        return replica.stores.domain_keys()

    def work(self, replica: Replica[state.Stores, Process], key: NamespacedName) -> Coroutine[Any, Any, Any]:
        return replica.executor.guardian.guard(key)

    def queued(self, replica: Replica[state.Stores, Process], keys: list[NamespacedName]) -> None:
        """The guardian's handlers queue every domain an event touched (`handlers.on_domain`, `on_pod`); the Lease
        holder's work queue takes the first at once when it has no pass running. The other keys wait: for a pass
        that `start_pass` draws (as the periodic resync of every key does), or for the replica's next term."""
        queue = replica.executor.queue
        queue += [key for key in keys if key not in queue]
        self.work_queue(replica)

    def work_queue(self, replica: Replica[state.Stores, Process]) -> None:
        """The Lease holder, with no pass running, starts one over the first key of its queue."""
        queue = replica.executor.queue
        if queue and self.api.leader == replica.name and replica.passing is None:
            replica.passing = self.loop.create_task(self.work(replica, queue.pop(0)))
            self.settle()

    def on_lease_change(self, replica: Replica[state.Stores, Process], leading: bool) -> None:
        """A replica that starts leading works the keys its watches queued while it followed."""
        super().on_lease_change(replica, leading)
        if leading:
            self.work_queue(replica)

    def progress(self) -> float:
        """The guardian's writes, releases above all, and the webhook's refusals."""
        return float(len(self.writes) + 5 * sum(w.released for w in self.writes) + 3 * self.refused)

    # --- the model's record -------------------------------------------------------------------------------

    def _current(self, made: Made) -> Object | None:
        found = self.api.peek(CD, NS, made.name)
        return found if found is not None and found["metadata"]["uid"] == made.uid else None

    def _incarnation(self, name: str) -> Made | None:
        found = self.api.peek(CD, NS, name)
        return None if found is None else self.made[found["metadata"]["uid"]]

    def _wrote(self, name: str) -> None:
        """The model wrote domain `name`: what it holds now is the model's doing, not the guardian's."""
        for made in self.made.values():
            if made.name == name and made.known is not None:
                made.known = copy.deepcopy(self._current(made))

    def users(self, domain: str) -> tuple[str, ...]:
        """The pods that reference `domain` and still run, by the model's record."""
        return tuple(sorted(pod.name for pod in self.pods.values() if pod.live and pod.domain == domain))

    def _observe(self) -> None:
        """Takes every change of a domain since it last looked that the model did not make as the guardian's: the
        request that landed meanwhile. It looks after every step (the invariants); a write lands in a step of its
        own (`end_request`), so each `Write` sees the pods of its moment."""
        landed = self.api.landed[self.observed :]
        self.observed = len(self.api.landed)
        for made in self.made.values():
            if made.known is None:
                continue
            now = self._current(made)
            if now is not None and now["metadata"]["resourceVersion"] == made.known["metadata"]["resourceVersion"]:
                continue
            senders = [sent for sent in landed if sent.what == f"patch {CD}/{made.name}"]
            assert senders, f"{made.name} changed, and neither the model nor the guardian wrote it"
            now = copy.deepcopy(now)
            write = Write(
                domain=made.name,
                ours=made.ours,
                before=made.known,
                after=now,
                users=self.users(made.name),
                gate=self.gates[senders[-1].process],
            )
            self.writes.append(write)
            made.known = now

    def _domains(self, *, live: bool | None = None, ours: bool | None = None) -> list[str]:
        found = []
        for name in DOMAINS:
            domain = self.api.peek(CD, NS, name)
            made = self._incarnation(name)
            if domain is None or made is None:
                continue
            if (live is None or live != deleting(domain)) and (ours is None or ours == made.ours):
                found.append(name)
        return found

    # --- one step: the guardian's replicas move, or the world changes ---------------------------------------

    def _guardian_moves(self) -> list[str]:
        possible = {
            "its watch streams move": True,
            "the Lease holder starts a pass": self._may_reconcile(),
            "a write in flight ends": bool(self.api.in_flight),
            "the Lease moves": self.may_disrupt("lease"),
            "a quiet spell": self._may_reconcile(),
        }
        return [move for move, now in possible.items() if now for _ in range(GUARDIAN_WEIGHTS[move])]

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One thing happens: the guardian's replicas move, or the world changes, each as often as its weight says."""
        what = data.draw(st.sampled_from(self._guardian_moves() + self._world_changes()))
        if what in GUARDIAN_WEIGHTS:
            self.guardian_moves(what, data)
        else:
            self.world_changes(what, data)

    def guardian_moves(self, move: str, data: st.DataObject) -> None:
        if move == "its watch streams move":
            self.move_watches(data, WATCH_PLANS)
        elif move == "the Lease holder starts a pass":
            self.start_pass(data)
        elif move == "a write in flight ends":
            self.end_request(data, data.draw(st.sampled_from(REQUEST_OUTCOMES)))
        elif move == "a quiet spell":
            self.settle_leader(data.draw(st.booleans()))
        else:
            self.move_lease(data.draw(st.sampled_from(LEASE_TARGETS)), data.draw(st.sampled_from(DEPOSED)))

    def _world_changes(self) -> list[str]:
        """What the world may do now, each as often as its weight says."""
        possible = {
            "a domain is created": bool(self._free_domain_names()),
            "a user deletes a domain": bool(self._domains(live=True)),
            "a live domain is taken over": bool(self._domains(ours=True, live=True)),
            "a domain being deleted is taken over": bool(self._domains(ours=True, live=False)),
            "another controller finalizes a domain": bool(self._domains()),
            "our finalizer is removed by hand": bool(self._unprotectable_domains()),
            "a pod is created": bool(self._free_pod_names() and self._domains_pods_may_use()),
            "a pod ends": bool(self._pod_names()),
            "the configuration is rolled out": True,
        }
        return [change for change, now in possible.items() if now for _ in range(WORLD_WEIGHTS[change])]

    def world_changes(self, change: str, data: st.DataObject) -> None:
        if change == "a domain is created":
            self.domain_created(data.draw(st.sampled_from(self._free_domain_names())), data)
        elif change == "a user deletes a domain":
            self.user_deletes(data)
        elif change == "a live domain is taken over":
            self.domain_taken_over(data.draw(st.sampled_from(self._domains(ours=True, live=True))))
        elif change == "a domain being deleted is taken over":
            self.domain_taken_over(data.draw(st.sampled_from(self._domains(ours=True, live=False))))
        elif change == "another controller finalizes a domain":
            self.another_controller_finalizes(data.draw(st.sampled_from(self._domains())))
        elif change == "our finalizer is removed by hand":
            self.protection_removed_by_hand(data.draw(st.sampled_from(self._unprotectable_domains())))
        elif change == "a pod is created":
            self.pod_created(data.draw(st.sampled_from(self._free_pod_names())), data)
        elif change == "a pod ends":
            self.pod_ends(data.draw(st.sampled_from(self._pod_names())), data.draw(st.sampled_from(POD_ENDS)))
        else:
            self.configuration_rolled_out(data)

    def _free_domain_names(self) -> list[str]:
        return [name for name in DOMAINS if self.api.peek(CD, NS, name) is None]

    def domain_created(self, name: str, data: st.DataObject) -> None:
        """mnnvl-lws or mnnvl-ds creates a domain under its own label; or someone else creates a look-alike,
        labelled as theirs; with our finalizer (as mnnvl-lws and mnnvl-ds create theirs, or as copied into a
        look-alike) or, more often, without it (as an earlier release created them, or after someone removed it)."""
        self.create_domain(name, data.draw(MAKER), protected=data.draw(st.sampled_from((True, False, False))))

    def create_domain(self, name: str, maker: str, *, protected: bool) -> None:
        manager, label = MAKERS[maker]
        labels = {keys.MANAGED_BY_LABEL: label, keys.OWNER_UID_LABEL: "uid-dsr1", keys.WORKLOAD_NAME_LABEL: "dsr1"}
        created = self.api.put(
            CD, domain_manifest(name, labels, finalizers=[PROTECTION] if protected else []), manager=manager
        )
        uid = created["metadata"]["uid"]  # `put` answers a copy
        self.made[uid] = Made(name=name, uid=uid, ours=maker in OURS, known=created)

    def domain_taken_over(self, name: str) -> None:
        """Someone applies the identity labels of one of ours under their own field manager: it is theirs now."""
        made = self._incarnation(name)
        domain = self.api.peek(CD, NS, name)
        assert made is not None
        assert domain is not None
        labels = domain["metadata"]["labels"]
        identity_labels = {key: labels[key] for key in (keys.MANAGED_BY_LABEL, keys.OWNER_UID_LABEL)}
        self.api.apply_labels(CD, NS, name, identity_labels, manager="kubectl")
        made.ours = False
        self._wrote(name)

    def user_deletes(self, data: st.DataObject) -> None:
        """A user deletes a live domain. In Deny mode the webhook (of either replica, its stores synced or not,
        behind either way) answers first, its in-use check going as `CHECKS` says; the DELETE proceeds once
        allowed, and the finalizers hold the domain."""
        name = data.draw(st.sampled_from(self._domains(live=True)))
        if self.protection is configuration.DeletionProtection.DENY:
            via, check, synced = data.draw(st.sampled_from(REPLICAS)), data.draw(CHECK), data.draw(st.booleans())
            self.delete_domain(name, via=via, check=check, synced=synced)
        else:
            self.delete_domain(name)

    def delete_domain(self, name: str, *, via: str = REPLICAS[0], check: str = "answered", synced: bool = True) -> None:
        domain = self.api.get(CD, NS, name)
        made = self._incarnation(name)
        assert domain is not None
        assert made is not None
        if self.protection is configuration.DeletionProtection.DENY:
            if not self.webhook_allows(self.replicas[via], domain, check=check, synced=synced):
                self.refused += 1
                return
            if made.ours and (using := self.users(name)):
                self.let_go.append(f"the DELETE of {name} was allowed while {', '.join(using)} used it")
        self.api.delete(CD, NS, name)
        self._wrote(name)

    def webhook_allows(
        self, replica: Replica[state.Stores, Process], domain: Object, *, check: str, synced: bool
    ) -> bool:
        """The Deny webhook of `replica` answers the DELETE of `domain` (every domain of the model matches its
        objectSelector: all are labelled as an mnnvl controller's)."""
        reads = replica.executor.deny_reads
        (reads.synced.set if synced else reads.synced.clear)()
        failing = CHECKS[check]
        if failing is not None:
            replica.client.fail_reads(failing[0], after=failing[1])
        body = kopf.Body(cast(kopf.RawBody, domain))
        try:
            self.loop.run_until_complete(DENY_WEBHOOK(body=body, memo=replica.executor.memo, operation="DELETE"))
        except kopf.AdmissionError:
            return False
        finally:
            replica.client.fail_reads(None)
            self.settle()
        return True

    def another_controller_finalizes(self, name: str) -> None:
        """Another controller adds its own finalizer to a live domain, or removes it (the last finalizer of a
        domain being deleted: it is gone)."""
        domain = self.api.peek(CD, NS, name)
        assert domain is not None
        present = finalizers(domain)
        if THEIRS in present:
            kept = [f for f in present if f != THEIRS]
        elif not deleting(domain):  # the API server refuses a new finalizer on an object being deleted
            kept = [*present, THEIRS]
        else:
            return
        self.api.update(CD, NS, name, lambda body: body["metadata"].__setitem__("finalizers", kept))
        self._wrote(name)

    def _unprotectable_domains(self) -> list[str]:
        """Those carrying our finalizer, live, or being deleted and not ours (mnnvl will never release it)."""
        return [
            name
            for name in self._domains()
            if PROTECTION in finalizers(self.api.peek(CD, NS, name))
            and (name in self._domains(live=True) or name not in self._domains(ours=True))
        ]

    def protection_removed_by_hand(self, name: str) -> None:
        """Someone removes our finalizer by hand (the API server stores an empty list as none): from a live domain,
        or from one that is being deleted and not ours (which mnnvl will never release)."""

        def remove(body: Object) -> None:
            kept = [f for f in finalizers(body) if f != PROTECTION]
            if kept:
                body["metadata"]["finalizers"] = kept
            else:
                del body["metadata"]["finalizers"]

        self.api.update(CD, NS, name, remove)
        self._wrote(name)

    def _free_pod_names(self) -> list[str]:
        return [name for name in PODS if self.api.peek("pods", NS, name) is None]

    def _domains_pods_may_use(self) -> list[str]:
        """A pod is made onto a domain that does not exist yet, or is not being deleted."""
        return [name for name in DOMAINS if not deleting(self.api.peek(CD, NS, name))]

    def pod_created(self, name: str, data: st.DataObject) -> None:
        domain = data.draw(st.sampled_from(self._domains_pods_may_use()))
        self.create_pod(name, domain, reference=data.draw(st.sampled_from(REFERENCES)), scoped=data.draw(st.booleans()))

    def create_pod(self, name: str, domain: str, *, reference: str, scoped: bool) -> None:
        manifest = pod_manifest(name, domain, reference=reference, scoped=scoped)
        created = self.api.put("pods", manifest, manager="kube-controller-manager")
        self.pods[created["metadata"]["uid"]] = PodMade(name=name, domain=domain)

    def _pod_names(self) -> list[str]:
        return [name for name in PODS if self.api.peek("pods", NS, name) is not None]

    def pod_ends(self, name: str, end: str) -> None:
        """A pod ends (Failed or Succeeded), is deleted gracefully (terminating, it still runs), or is gone."""
        pod = self.api.peek("pods", NS, name)
        assert pod is not None
        made = self.pods[pod["metadata"]["uid"]]
        if end in ("fails", "succeeds"):
            phase = "Failed" if end == "fails" else "Succeeded"
            self.api.update("pods", NS, name, lambda body: body["status"].__setitem__("phase", phase))
            made.live = False
        elif end in GRACE_ENDS:
            self.api.delete("pods", NS, name, grace_until=GRACE_ENDS[end])
        else:
            self.api.delete("pods", NS, name)
            made.live = False

    def configuration_rolled_out(self, data: st.DataObject) -> None:
        """The configuration is written with the AutoComputeDomain gate on or off, and a replica that does not lead
        restarts (a rollout step): it takes the configuration up and remembers nothing. A leader takes it up when
        it restarts at a hand-over (`move_lease`)."""
        self.gate = data.draw(st.booleans())
        self.restart(data.draw(st.sampled_from([name for name in REPLICAS if name != self.api.leader])))

    # --- what must hold after every step -------------------------------------------------------------------

    @invariant()
    def a_foreign_domain_is_never_written(self) -> None:
        self._observe()
        for write in self.writes:
            assert write.ours, f"the guardian wrote {write.domain}, which is not ours: {write}"

    @invariant()
    def the_guardian_changes_nothing_but_its_finalizer(self) -> None:
        self._observe()
        for write in self.writes:
            if write.after is not None:
                assert beyond_finalizers(write.before) == beyond_finalizers(write.after), f"{write}"
                added = set(finalizers(write.after)) - set(finalizers(write.before))
                assert added <= {PROTECTION}, f"the guardian added {added} to {write.domain}"

    @invariant()
    def another_controllers_finalizer_is_never_removed(self) -> None:
        self._observe()
        for write in self.writes:
            theirs = set(finalizers(write.before)) - {PROTECTION}
            lost = theirs - set(finalizers(write.after))
            assert not lost, f"the guardian removed {lost} from {write.domain}"

    @invariant()
    def a_finalizer_is_released_only_from_a_deleted_unused_domain(self) -> None:
        self._observe()
        for write in self.writes:
            if write.released:
                assert deleting(write.before), f"the guardian released {write.domain}, which is not being deleted"
                assert not write.users, f"the guardian released {write.domain} while {write.users} used it"

    @invariant()
    def with_the_gate_off_nothing_is_released(self) -> None:
        self._observe()
        for write in self.writes:
            assert write.gate or not write.released, f"a guardian with the gate off released {write.domain}"

    @invariant()
    def in_deny_mode_no_used_domain_is_let_go(self) -> None:
        assert self.let_go == []

    def check(self) -> None:
        """Every invariant, for scripted scenarios."""
        self.a_foreign_domain_is_never_written()
        self.the_guardian_changes_nothing_but_its_finalizer()
        self.another_controllers_finalizer_is_never_removed()
        self.a_finalizer_is_released_only_from_a_deleted_unused_domain()
        self.with_the_gate_off_nothing_is_released()
        self.in_deny_mode_no_used_domain_is_let_go()
        self.nothing_is_written_by_a_replica_that_does_not_lead()


GuardianModel.TestCase.settings = settings.for_model(max_examples=150, steps=25)
test_guardian_interleavings = GuardianModel.TestCase


# --- scripted scenarios: the model's own steps, in an order that matters --------------------------------------


def scenario(protection: configuration.DeletionProtection, *, gate: bool = True) -> GuardianModel:
    """A model configured so, with no domain or pod yet and no replica started."""
    machine = GuardianModel()
    machine.protection = protection
    machine.gate = gate
    return machine


def test_a_domain_taken_over_while_deleted_is_not_released_from_a_stale_store() -> None:
    """One of ours is deleted, then taken over; the leader's watch delivers the deletion, not the takeover yet, and
    its queue's pass decides on what the store says (ours, deleted, unused): the release reads the domain afresh and
    leaves it alone."""
    machine = scenario(configuration.DeletionProtection.FINALIZER)
    machine.create_domain(DOMAINS[0], "mnnvl-lws", protected=True)
    machine.start()
    machine.delete_domain(DOMAINS[0])
    machine.domain_taken_over(DOMAINS[0])
    leader = machine.replicas[REPLICAS[0]]
    machine.deliver(leader, leader.mirror(CD), 1)  # the deletion, not the takeover: the pass starts from the queue
    machine.land_everything()
    machine.check()
    assert PROTECTION in finalizers(machine.api.get(CD, NS, DOMAINS[0]))
    machine.teardown()


def test_a_finalizer_another_controller_adds_while_our_protection_is_in_flight_is_kept() -> None:
    """The guardian reads a domain of ours without finalizers and sends the protection; another controller adds its
    own finalizer before the protection lands: the protection fails (its version test) and the next pass adds ours
    beside theirs."""
    machine = scenario(configuration.DeletionProtection.FINALIZER)
    machine.create_domain(DOMAINS[0], "mnnvl-ds", protected=False)
    machine.start()  # the leader's queue takes the domain at once: the protection is in flight
    assert [request.what for request in machine.api.in_flight] == [f"patch {CD}/{DOMAINS[0]}"]
    machine.another_controller_finalizes(DOMAINS[0])
    machine.land_everything()
    machine.reconcile_fully(REPLICAS[0])
    machine.check()
    assert finalizers(machine.api.get(CD, NS, DOMAINS[0])) == [THEIRS, PROTECTION]
    machine.teardown()


def test_in_deny_mode_a_pod_made_by_hand_keeps_its_domain() -> None:
    """A pod made without our scope label holds a domain's claim: no store of the guardian knows it, so the webhook
    lists the pods afresh and refuses the deletion; a check that times out refuses it too."""
    machine = scenario(configuration.DeletionProtection.DENY)
    machine.create_domain(DOMAINS[0], "mnnvl-lws", protected=True)
    machine.create_pod(PODS[2], DOMAINS[0], reference="holds its claim", scoped=False)
    machine.start()
    machine.delete_domain(DOMAINS[0], via=REPLICAS[1])
    machine.delete_domain(DOMAINS[0], via=REPLICAS[0], check="times out after a read")
    machine.check()
    assert machine.refused == 2
    assert not deleting(machine.api.get(CD, NS, DOMAINS[0]))
    machine.teardown()


def test_with_the_gate_off_a_deleted_unused_domain_stays_held() -> None:
    """With the gate off, a managed domain deleted while nothing uses it keeps the protection finalizer."""
    machine = scenario(configuration.DeletionProtection.FINALIZER, gate=False)
    machine.create_domain(DOMAINS[0], "mnnvl-lws", protected=True)
    machine.start()
    machine.delete_domain(DOMAINS[0])
    machine.catch_up(REPLICAS[0])
    machine.reconcile_fully(REPLICAS[0])
    machine.check()
    assert PROTECTION in finalizers(machine.api.get(CD, NS, DOMAINS[0]))
    machine.teardown()
