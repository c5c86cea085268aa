"""What every interleaving model of a controller shares: two replicas of it in front of an in-memory API server
(`memory_api`), the driver behind it, and the invariants of the promise.

Each replica is a process of its own: its stores, fed by one watch stream per resource, each at its own lag; its
own domain writer, executor and webhooks. `ControllerMachine` has the steps every controller goes through, which
`ControllerRules` draws one rule each (a model may draw them its own way instead):

- watch streams delivering events; a stream dropping events (a 410: it resumes from a later point, the events in
  between are lost, and kopf may re-deliver the current objects, never the deletions), so that only the periodic
  resync repairs the store; that resync (a fresh list) delivered page by page, between other steps;
- Lease hand-overs at any step (to the other replica, or to nobody); the deposed leader's pass cancelled at once
  or only at its next write (which `may_write` then refuses); a replica restarting with nothing remembered;
- reconciliation passes of the Lease holder, whose every write is a request in flight: it lands at a later step
  (answered, or landed while its sender saw a timeout), times out and lands later still, or never lands; so a
  write begun by a deposed leader can land after the hand-over.

`ScopeMachine` adds what a scope controller (mnnvl-lws, mnnvl-ds) goes through:

- pod admissions by either replica's webhook (a follower's stores lag as much as a leader's), begun and persisted
  as separate steps, up to `ADMISSION_BOUND` apart; the deletion fence is any value the product's `Configuration`
  accepts, so a fence shorter than the admission bound is tried when the configuration allows one;
- and time passing (admissions due meanwhile land at the last moment, the worst case for a fence).

How often each rule runs is not even: Hypothesis draws the first rule in its order (fewest arguments, then name)
that is valid and enabled far more often than the others (about a quarter of all steps). The rules are named so
that this one is harmless (`replica_catches_up`), and a scope names the rule that deletes and rewrites its
workloads `workload_changes`, after the others: a run whose workloads are rewritten every few steps never gets
deep enough to matter.

A scope's model adds its workloads (deleted and created again under the same names), its pods (names reused by
new incarnations), its planner and its own invariants.

Each replica's process runs the code of one version (`version_of`): the current code, but in the mixed-version
models (`test_mixed_versions.py`), where one replica runs an earlier tree's (`versions`). Its stores, domain
writer, executor, planner and webhooks are then that version's (`versions.Version.counterpart`), and a webhook
that no step sends to a replica of its choosing (a workload's, a child LeaderWorkerSet's) is answered by each
replica in turn (`serving`). The invariants are the current code's account of the promise, whichever version acts.

The invariants checked after every step, for every controller:

- `nothing_is_written_by_a_replica_that_does_not_lead`: every write sent (in flight, or landed at the API server)
  was sent while its sender held the Lease (`may_write` is checked before sending); one that lands after its sender
  lost the Lease must be pinned to what it was decided on (`memory_api.Landed.pinned`: create-if-absent, a DELETE
  with uid and resourceVersion, a JSON patch testing the resourceVersion or, on anything but a domain, the uid), so
  it fails on anything changed since. Whether such a late write is harmless is left to the other invariants, which
  see it land. Events are not counted as writes.

And for every scope:

- `no_domain_starts_deleting_under_a_pod`: when a domain's deletion begins, no non-terminal pod holds its claim or
  records it;
- `no_pod_references_a_domain_being_deleted`: no non-terminal pod holds the claim of, or records, a domain whose
  deletion has begun; and one released to the scheduler (not gated) uses no domain that is gone, which is how a
  pod admitted before a domain's deletion and persisted after it shows (a pod may wait, gated, for a later domain
  of a name whose earlier domain is gone);
- `no_enrolled_pod_runs_without_its_claim`: every non-terminal pod made from a template the scope stamped (its
  workload, or its revision, opted in) is gated, or holds the channel claim in every GPU container. This also
  covers "every pod of a live opted-in workload that the scope enrolls holds its claim or is gated": those pods
  are made from stamped templates;
- `plain_workloads_are_never_refused`: a workload that did not opt in is never refused or changed by a webhook;
- `a_foreign_look_alike_is_never_written`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

import jsonpatch
import kopf
import pydantic
from hypothesis import strategies as st
from hypothesis import target
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mnnvl_api import keys, models, names
from mnnvl_api.decisions import injection, opt_in, plans, references
from mnnvl_runtime import domain_writer, kube, scopes, stores
from mnnvl_runtime.stores import Mirror, NamespacedName

from ..mnnvl_runtime import memory_api
from ..mnnvl_runtime.memory_api import MemoryApi, MemoryClient, Object
from ..mnnvl_runtime.relist import Stream
from . import settings, versions
from .versions import Version

NS = "serving"
#: The longest a pod's creation can take from our webhook's reads to the pod being persisted: the API server's
#: request timeout, which bounds every admission chain (later webhooks up to their own timeouts included).
ADMISSION_BOUND = 60.0
#: Fences tried, of those the product's `Configuration` accepts (and its default).
FENCES = (0.0, 10.0, 30.0, 90.0)
REPLICAS = ("a", "b")
#: The most rounds of reconciliation in one quiet spell (`settle_leader`).
SETTLING_PASSES = 3
#: The most disruptions of each kind one run has: Lease hand-overs (a deposed leader's restart included), and
#: a scope's rewrites of its workloads (deleted, created again, opt-in toggled, templates edited, rolled out). The
#: holes found so far each take at most three of a kind; more only keep a run from getting deep.
DISRUPTIONS = {"lease": 4, "workload": 4}
GPU = {"name": "vllm", "image": "vllm", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
#: What a pass may raise that the work queue retries: API errors, a write refused after a hand-over, a cancel.
RETRIED = (kube.ApiError, domain_writer.NotLeadingError, asyncio.CancelledError)
#: The suffix of the sender of a replica's webhook writes (`webhook_client`), which need no Lease.
WEBHOOK = "/webhook"
#: Where the Lease may pass (None: it expires), and what becomes of the deposed leader (`move_lease`).
LEASE_TARGETS = (*REPLICAS, None)
DEPOSED = ("cancelled at once", "cancelled at its next write", "restarted")
#: Besides those, for a pass cut by a hand-over (`CutPasses`): the deposed leader hears back and goes on.
CUT_DEPOSED = (*DEPOSED, "hears back and goes on")
#: How a write in flight ends (`end_request`).
REQUEST_OUTCOMES = ("answered", "unanswered", "lands later", "lost")
#: What one watch stream does in a step (`move_watches`).
WATCH_ACTIONS = ("waits", "delivers one", "delivers all", "drops", "resyncs")


def accepted_fences() -> list[float]:
    """The fences of `FENCES` (and the default) that a `Configuration` file may set."""
    found = {models.Configuration().compute_domain.deletion_fence_seconds}
    for seconds in FENCES:
        try:
            configuration = models.Configuration.model_validate({"computeDomain": {"deletionFenceSeconds": seconds}})
        except pydantic.ValidationError:
            continue
        found.add(configuration.compute_domain.deletion_fence_seconds)
    return sorted(found)


def new_writer(
    client: kube.Api,
    *,
    component: str,
    scope: str,
    fence: float,
    clock: Callable[[], float],
    may_write: Callable[[], bool],
    term: Callable[[], int],
    version: Version = versions.CURRENT,
) -> domain_writer.DomainWriter:
    """The one place the model builds a domain writer (as `mnnvl_runtime.reconciling` does), of `version`'s code."""
    return version.counterpart(domain_writer.DomainWriter)(
        client, component=component, scope=scope, fence_seconds=fence, clock=clock, may_write=may_write, term=term
    )


def gate_on(version: Version) -> opt_in.Environment:
    """The workload webhooks' environment, as `version`'s code has it: the gate on and ComputeDomains served."""
    return version.counterpart(opt_in.Environment)(gate_enabled=True, api_served=True)


def retried(version: Version) -> tuple[type[BaseException], ...]:
    """What a pass of `version`'s code may raise that the work queue retries (`RETRIED`, of that version)."""
    return tuple(version.counterpart(error) for error in RETRIED)


MachineT = TypeVar("MachineT", bound=RuleBasedStateMachine)


#: The rules of each race a campaign stages, as every scope names them; a scope adds the rules by which its pods
#: come (and its workloads' objects come and go).
ADMISSION_RACE_RULES = ("pod_ends", "leader_settles", "replica_catches_up", "time_passes", "admission_ends")
HAND_OVER_RULES = ("lease_moves", "leader_reconciles", "request_ends", *ADMISSION_RACE_RULES)
STALE_STORE_RULES = ("watches", "workload_changes", "pod_ends", "leader_settles", "time_passes", "admission_ends")


def campaign(
    machine: type[MachineT], name: str, *, rules: Collection[str], max_examples: int = 100, steps: int = 40
) -> type[MachineT]:
    """`machine` with only the rules named (its initializers and invariants all kept), searched with `max_examples`
    runs of `steps` steps: a campaign of one kind of race. With every rule in play a chain of four or five
    particular steps is rare (each step is one rule of fifteen, and Hypothesis's swarm testing turns rules off at
    random, not by kind); among the eight or so rules of one race it is likely, so a campaign finds in a hundred
    runs what the whole model may miss in thousands."""
    known = {found.function.__name__ for found in machine.setup_state().rules}
    if unknown := set(rules) - known:
        raise ValueError(f"campaign {name}: {machine.__name__} has no rules {sorted(unknown)}")
    left_out = {rule_name: _plain(getattr(machine, rule_name)) for rule_name in known - set(rules)}
    staged = cast(type[MachineT], type(f"{machine.__name__}{name}", (machine,), left_out))
    staged.TestCase.settings = settings.for_model(max_examples=max_examples, steps=steps)
    return staged


def _plain(rule: Callable[..., Any]) -> Callable[..., Any]:
    """`rule` as a plain method: still callable by scripted scenarios, no longer a rule."""

    def plain(self: Any, *args: Any, **kwargs: Any) -> Any:
        return rule(self, *args, **kwargs)

    return plain


class Mirrored(Protocol):
    """A controller's `state.Stores`, as far as feeding it goes."""

    @property
    def mirrors(self) -> list[stores.Mirror[stores.NamespacedName]]: ...


class WatchStores(Mirrored, Protocol):
    """A scope's `state.Stores`, as far as feeding and reading it goes."""

    def workload_keys(self) -> list[stores.NamespacedName]: ...


StoresT = TypeVar("StoresT", bound=Mirrored)
WatchStoresT = TypeVar("WatchStoresT", bound=WatchStores)
ExecutorT = TypeVar("ExecutorT")
#: The stores of a scope controller (replica, slice).
ScopeStoresT = TypeVar("ScopeStoresT", bound=stores.ScopeStores[Any, Any])
#: Makes a process's executor from its writer, its client, its Lease check and its stores; of the code of the version
#: its process runs (`ControllerMachine.version_of` the client's sender), as the writer and the stores are.
NewExecutor = Callable[[domain_writer.DomainWriter, MemoryClient, Callable[[], bool], StoresT], ExecutorT]


@dataclasses.dataclass(kw_only=True)
class Listing:
    """A fresh list in flight: the snapshot the API server took at its first page, and how far it was taken."""

    items: list[Object]
    version: int
    taken: int = 0


@dataclasses.dataclass(kw_only=True)
class Replica(Generic[StoresT, ExecutorT]):
    """One process of the controller: what it knows, its writer and executor (of its version's code), its pass in
    flight."""

    name: str
    version: Version
    client: MemoryClient
    stores: StoresT
    writer: domain_writer.DomainWriter
    executor: ExecutorT
    #: Per watched resource (plural): its watch stream.
    streams: dict[str, Stream]
    lists: dict[str, Listing] = dataclasses.field(default_factory=dict)
    passing: asyncio.Task[Any] | None = None

    def mirror(self, plural: str) -> Mirror[NamespacedName]:
        (found,) = [m for m in self.stores.mirrors if m.resource.plural == plural]
        return found


class ControllerMachine(RuleBasedStateMachine, Generic[StoresT, ExecutorT]):
    #: The most disruptions of each kind one run may have (a campaign may allow more).
    disruption_budget: Mapping[str, int] = DISRUPTIONS

    """Two replicas of one controller and the steps they go through (`move_lease`, `start_pass`, `settle_leader`,
    `catch_up`, `end_request`, `move_watches`), which `ControllerRules` draws one rule each. A model says what the
    Lease holder's passes work on (`work_keys`) and what one pass does (`work`), creates its objects, then calls
    `_start_replicas`."""

    def __init__(
        self,
        *,
        component: str,
        scope: str,
        new_stores: Callable[[], StoresT],
        new_executor: NewExecutor[StoresT, ExecutorT],
    ) -> None:
        super().__init__()
        self.component = component
        self.scope = scope
        self.new_stores = new_stores
        self.new_executor = new_executor
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.now = 0.0
        self.fence = models.Configuration().compute_domain.deletion_fence_seconds
        self.replicas: dict[str, Replica[StoresT, ExecutorT]] = {}
        #: Disruptions so far, by kind (`DISRUPTIONS`).
        self.disruptions: dict[str, int] = {}
        #: Per replica process: the Lease term it leads in (`LeaderElector.term`), counted up each time it leads.
        self.terms: dict[str, int] = {}
        #: Per webhook that a call reaches through its Service, not a named replica: the calls so far (`serving`).
        self.webhook_calls: dict[str, int] = {}

    def version_of(self, name: str) -> Version:
        """The code replica `name`'s process runs, as it (re)starts: the current code, or in a mixed-version model
        (`test_mixed_versions.py`) another version for one of the replicas."""
        return versions.CURRENT

    def serving(self, webhook: str, *, pace: int = 1) -> Version:
        """The version of the replica that answers the next call of `webhook` that no step sends to a replica of its
        choosing (the Service spreads calls over the replicas): each in turn, a turn lasting `pace` calls, so that
        two webhooks of one request called at different paces meet every pair of versions."""
        calls = self.webhook_calls[webhook] = self.webhook_calls.get(webhook, 0) + 1
        name = REPLICAS[(calls - 1) // pace % len(REPLICAS)]
        return self.replicas[name].version if name in self.replicas else self.version_of(name)

    def work_keys(self, replica: Replica[StoresT, ExecutorT]) -> list[NamespacedName]:
        """What a pass of `replica` may work on, as its stores know it."""
        raise NotImplementedError

    def work(self, replica: Replica[StoresT, ExecutorT], key: NamespacedName) -> Coroutine[Any, Any, Any]:
        """One pass of `replica` over `key`, from its stores."""
        raise NotImplementedError

    def queued(self, replica: Replica[StoresT, ExecutorT], keys: list[NamespacedName]) -> None:
        """What `replica`'s handlers do with the keys a watch event or a resync touched (`Mirror.observe`,
        `take_page`, `finish_list`): a model may start the Lease holder's pass over one of them at once, as its
        work queue would. By default nothing: passes start only as `start_pass` draws them."""

    def progress(self) -> float:
        """How far a run got, for Hypothesis to steer towards (`target`): domain writes landed, late ones above
        all."""
        domain_writes = [write for write in self.api.landed if keys.COMPUTE_DOMAIN_PLURAL in write.what]
        late = sum(1 for write in domain_writes if not write.leading)
        return float(len(domain_writes) + 5 * late)

    def teardown(self) -> None:
        if currently_in_test_context():  # scripted scenarios run outside Hypothesis
            target(self.progress(), label="progress")
        for replica in self.replicas.values():
            if replica.passing is not None:
                replica.passing.cancel()
        for request in self.api.in_flight:
            request.answer.cancel()
        self.settle()
        self.loop.close()

    # --- replicas ----------------------------------------------------------------------------------------

    def _start_replicas(self) -> None:
        """Both replicas start, replica a leading; their watches start from the beginning."""
        for name in REPLICAS:
            self._start(name, watch_from=0)
        self.api.leader = REPLICAS[0]
        self.terms[REPLICAS[0]] += 1

    def _start(self, name: str, *, watch_from: int) -> None:
        """A (re)started process remembers nothing; its watches read from `watch_from` on."""
        client = self.api.client(self.component, sender=name)
        self.terms[name] = 0  # a new process's elector counts its terms afresh
        version = self.version_of(name)

        def may_write() -> bool:
            return self.api.leader == name

        writer = new_writer(
            client,
            component=self.component,
            scope=self.scope,
            fence=self.fence,
            clock=lambda: self.now,
            may_write=may_write,
            term=lambda: self.terms[name],
            version=version,
        )
        found = version.counterpart(self.new_stores)()  # a class of the controller's code: each version has its own

        def touched(keys: list[NamespacedName]) -> None:
            self.queued(self.replicas[name], keys)

        self.replicas[name] = Replica(
            name=name,
            version=version,
            client=client,
            stores=found,
            writer=writer,
            executor=self.new_executor(writer, client, may_write, found),
            streams={
                mirror.resource.plural: Stream(api=self.api, mirror=mirror, cursor=watch_from, touched=touched)
                for mirror in found.mirrors
            },
        )

    def on_lease_change(self, replica: Replica[StoresT, ExecutorT], leading: bool) -> None:
        """What the process's elector tells its components (`LeaderElector.on_change`); a scope adds its own.
        A replica that starts leading starts a new term: its writer trusts no sight of a mark from an earlier one."""
        if leading:
            self.terms[replica.name] += 1

    def _replica(self, index: int) -> Replica[StoresT, ExecutorT]:
        return self.replicas[REPLICAS[index]]

    def may_disrupt(self, kind: str) -> bool:
        """Whether the run may have one more disruption of `kind` (`DISRUPTIONS`; `disrupted` counts one). A precondition:
        a run whose Lease moves, or whose workloads are rewritten, every few steps never gets deep enough for the
        protocol's steps to interleave with them."""
        return self.disruptions.get(kind, 0) < self.disruption_budget[kind]

    def disrupted(self, kind: str) -> None:
        self.disruptions[kind] = self.disruptions.get(kind, 0) + 1

    def move_lease(self, to: str | None, deposed: str) -> None:
        """The Lease passes to `to` (None: it expires, nobody holds it yet). The deposed leader's pass is cancelled
        at once; or goes on until its next write is refused (`may_write`), its writes in flight landing when they
        may, or at once, answered (it hears back and goes on: its renewal failed, not its connection); or its
        process is killed and started again with nothing remembered. Whatever it has in flight may still land."""
        leader = self.api.leader
        if to == leader:
            return
        self.disrupted("lease")
        self.api.leader = to
        if leader is not None:
            replica = self.replicas[leader]
            goes_on = deposed in ("cancelled at its next write", "hears back and goes on")
            if not goes_on and replica.passing is not None:
                replica.passing.cancel()
            self.on_lease_change(replica, False)
            self.settle()
            if deposed == "hears back and goes on":
                self.land_from(leader)
            if deposed == "restarted":
                self.restart(leader)
        if to is not None:
            self.on_lease_change(self.replicas[to], True)
        self.settle()

    def restart(self, name: str) -> None:
        """A (re)started process remembers nothing: its watches start now, and its initial lists begin."""
        self._start(name, watch_from=len(self.api.events))
        replica = self.replicas[name]
        for mirror in replica.stores.mirrors:
            self.resync_page(replica, mirror)

    def _may_reconcile(self) -> bool:
        leader = self.replicas.get(self.api.leader or "")
        return leader is not None and leader.passing is None and bool(self.work_keys(leader))

    def start_pass(self, data: st.DataObject) -> None:
        """The Lease holder starts a pass over one key its stores know, synced or not: the writer's fresh reads
        must keep it safe even where the cache-sync barrier would have waited."""
        assert self.api.leader is not None
        replica = self.replicas[self.api.leader]
        key = data.draw(st.sampled_from(self.work_keys(replica)))
        replica.passing = self.loop.create_task(self.work(replica, key))
        self.settle()

    def settle_leader(self, catch_up: bool) -> None:
        """A quiet spell: the Lease holder, having read every event first or not, reconciles every key it
        knows, each write landing answered (`reconcile_fully`), again until a round writes nothing (at most
        `SETTLING_PASSES` rounds). The coarse step that takes the protocol forward
        (a domain created, a gate lifted, a mark set, the fence's end, a delete) in one go, so that the search
        reaches deep chains, while the fine-grained rules interleave what can go wrong between them."""
        assert self.api.leader is not None
        for _ in range(SETTLING_PASSES):
            if catch_up:
                self.catch_up(self.api.leader)
            writes = len(self.api.landed)
            self.reconcile_fully(self.api.leader)
            if len(self.api.landed) == writes:
                break  # nothing more to do until something changes (or the fence passes)

    def settle(self) -> None:
        """Let every task run until it waits for a request in flight, then collect the passes that ended."""

        async def turns() -> None:
            for _ in range(50):
                await asyncio.sleep(0)

        self.loop.run_until_complete(turns())
        for replica in self.replicas.values():
            if replica.passing is not None and replica.passing.done():
                if not replica.passing.cancelled() and replica.passing.exception() is not None:
                    error = replica.passing.exception()
                    if not isinstance(error, retried(replica.version)):
                        raise error  # type: ignore[misc]
                replica.passing = None

    # --- requests in flight ------------------------------------------------------------------------------

    def end_request(self, data: st.DataObject, outcome: str) -> None:
        """A write in flight lands now, its sender hearing the answer or seeing a timeout; or its sender times
        out while the request lands at a later step, or never."""
        request = data.draw(st.sampled_from(self.api.in_flight))
        if outcome in ("answered", "unanswered"):
            self.api.land(request, answered=outcome == "answered")
        else:
            if not request.answer.done():
                request.answer.set_exception(memory_api.timed_out())
            if outcome == "lost":
                self.api.in_flight.remove(request)
        self.settle()

    def land_from(self, sender: str) -> None:
        """Every request `sender` has in flight lands, answered, and so does every one its pass sends meanwhile."""
        while sent := [request for request in self.api.in_flight if request.sender == sender]:
            self.api.land(sent[0], answered=True)
            self.settle()

    def land_everything(self) -> None:
        """For scripted scenarios: every request lands, answered, until nothing is in flight."""
        while self.api.in_flight:
            self.api.land(self.api.in_flight[0], answered=True)
            self.settle()

    # --- watch streams and fresh lists -------------------------------------------------------------------

    def move_watches(self, data: st.DataObject, plans: st.SearchStrategy[tuple[str, ...]] | None = None) -> None:
        """Each watch stream of each replica, at its own lag: waits; delivers one event or all it has not delivered
        yet; drops events (a 410: it resumes from a later point, the events in between are lost, and kopf may
        deliver the objects that exist now, never the deletions it missed); or its resource's periodic resync
        (`stores.StoreSync`) takes a page: the first page starts a fresh list (a snapshot of now), each later
        one takes the next page, the last one drops what the list no longer has. Each stream draws its action
        (`WATCH_ACTIONS`); or one draw from `plans` gives every stream's, in the order of the replicas and their
        mirrors (a model's weights, and fewer draws)."""
        streams = [(r, m) for r in self.replicas.values() for m in r.stores.mirrors]
        plan = data.draw(plans) if plans is not None else None
        for index, (replica, mirror) in enumerate(streams):
            action = plan[index] if plan is not None else data.draw(st.sampled_from(WATCH_ACTIONS))
            if action == "delivers one":
                self.deliver(replica, mirror, 1)
            elif action == "delivers all":
                self.deliver(replica, mirror, 1000)
            elif action == "drops":
                self.drop(replica, mirror, data.draw(st.integers(0, 1000)), redelivered=data.draw(st.booleans()))
            elif action == "resyncs":
                self.resync_page(replica, mirror)

    def deliver(self, replica: Replica[StoresT, ExecutorT], mirror: stores.Mirror[Any], count: int) -> None:
        replica.streams[mirror.resource.plural].deliver(count)

    def drop(
        self, replica: Replica[StoresT, ExecutorT], mirror: stores.Mirror[Any], lost: int, *, redelivered: bool
    ) -> None:
        """The stream loses up to `lost` of its events (`Stream.drop`)."""
        replica.streams[mirror.resource.plural].drop(lost, redelivered=redelivered)

    def resync_page(self, replica: Replica[StoresT, ExecutorT], mirror: stores.Mirror[Any]) -> None:
        plural = mirror.resource.plural
        listing = replica.lists.get(plural)
        if listing is None:
            mirror.begin_list()
            listing = replica.lists[plural] = Listing(
                items=self.api.all(plural, mirror.resource.label_selector), version=self.api.resource_version
            )
        touched = mirror.take_page(listing.items[listing.taken : listing.taken + memory_api.PAGE_SIZE])
        listing.taken += memory_api.PAGE_SIZE
        if listing.taken >= len(listing.items):
            touched += mirror.finish_list(str(listing.version))[0]
            del replica.lists[plural]
        self.queued(replica, touched)

    def catch_up(self, name: str) -> None:
        """Every watch stream of replica `name` delivers everything."""
        replica = self.replicas[name]
        for mirror in replica.stores.mirrors:
            self.deliver(replica, mirror, 1000)

    def reconcile_fully(self, name: str) -> None:
        """Replica `name`, leading, reconciles every key it knows, every write landing answered."""
        replica = self.replicas[name]
        assert self.api.leader == name
        for key in self.work_keys(replica):
            replica.passing = self.loop.create_task(self.work(replica, key))
            self.settle()
            self.land_everything()

    @invariant()
    def nothing_is_written_by_a_replica_that_does_not_lead(self) -> None:
        """Only the Lease holder writes, except a webhook's creates of ComputeDomains (`WEBHOOK`): a create changes
        nothing that exists."""
        for request in self.api.in_flight:  # sent already: whether it ever lands is up to the network
            if not webhook_create(request.sender, request.what):
                assert request.sent_leading, f"{request.sender} sent {request.what} while not leading"
        for write in self.api.landed:
            if webhook_create(write.sender, write.what):
                continue
            assert write.sent_leading, f"{write.sender} sent {write.what} while not leading"
            assert write.leading or write.pinned, f"{write.sender}'s late {write.what} is not pinned to a version"


def webhook_create(sender: str, what: str) -> bool:
    """A write a replica's webhook sent (`WEBHOOK`); it may only create a ComputeDomain, or it fails the run."""
    if not sender.endswith(WEBHOOK):
        return False
    assert what.startswith(f"create {keys.COMPUTE_DOMAIN_PLURAL}/"), f"{sender} sent {what}: a webhook only creates"
    return True


class ControllerRules(ControllerMachine[StoresT, ExecutorT]):
    """One Hypothesis rule per step of the controller, each as likely as any other rule of the model."""

    @precondition(lambda self: self.may_disrupt("lease"))
    @rule(to=st.sampled_from(LEASE_TARGETS), deposed=st.sampled_from(DEPOSED))
    def lease_moves(self, to: str | None, deposed: str) -> None:
        self.move_lease(to, deposed)

    @precondition(lambda self: self._may_reconcile())
    @rule(data=st.data())
    def leader_reconciles(self, data: st.DataObject) -> None:
        self.start_pass(data)

    @precondition(lambda self: self._may_reconcile())
    @rule(catch_up=st.booleans())
    def leader_settles(self, catch_up: bool) -> None:
        self.settle_leader(catch_up)

    @rule(index=st.integers(0, len(REPLICAS) - 1))
    def replica_catches_up(self, index: int) -> None:
        """Every watch stream of one replica delivers all it has not delivered yet."""
        self.catch_up(REPLICAS[index])

    @precondition(lambda self: self.api.in_flight)
    @rule(data=st.data(), outcome=st.sampled_from(REQUEST_OUTCOMES))
    def request_ends(self, data: st.DataObject, outcome: str) -> None:
        self.end_request(data, outcome)

    @rule(data=st.data())
    def watches(self, data: st.DataObject) -> None:
        self.move_watches(data)


class CutPasses(ControllerMachine[Any, Any]):
    """A rule for a campaign's machine (`with_rules`): a hand-over drawn on its own seldom falls inside a pass, and
    a pass whose first writes land before its next ones are sent (a domain created, then an obsolete one condemned
    or deleted) is rarer still."""

    @precondition(lambda self: self._may_reconcile() and self.may_disrupt("lease"))
    @rule(data=st.data(), to=st.sampled_from(LEASE_TARGETS), deposed=st.sampled_from(CUT_DEPOSED))
    def pass_cut_by_hand_over(self, data: st.DataObject, to: str | None, deposed: str) -> None:
        """The Lease holder starts a pass and loses the Lease while its first writes are in flight."""
        self.start_pass(data)
        self.move_lease(to, deposed)


def with_rules(machine: type[MachineT], *rules: type[ControllerMachine[Any, Any]]) -> type[MachineT]:
    """`machine` with the rules of the mixins `rules` besides its own (for a campaign: the whole model's search
    stays as it is)."""
    return cast(type[MachineT], type(machine.__name__, (*rules, machine), {}))


class ScopeMachine(ControllerRules[ScopeStoresT, ExecutorT]):
    """A scope's subclass creates its workloads and `foreign` in `__init__`, then calls `_start_replicas`; a pass
    works on one workload: its stores' snapshot, the planner's plan, the executor."""

    #: A look-alike: named as we would name a domain and labelled as ours, but created by someone else.
    foreign: Object

    def __init__(
        self, *, descriptor: scopes.Scope[Any, ScopeStoresT], new_executor: NewExecutor[ScopeStoresT, ExecutorT]
    ) -> None:
        super().__init__(
            component=descriptor.name,
            scope=descriptor.scope,
            new_stores=type(descriptor.stores),
            new_executor=new_executor,
        )
        self.descriptor = descriptor
        #: Admissions begun and not ended yet: (deadline, the admitted pod).
        self.pending: list[tuple[float, Object]] = []
        #: Webhook answers to a workload that did not opt in which refused or changed it.
        self.plain_refusals: list[str] = []

    def work_keys(self, replica: Replica[ScopeStoresT, ExecutorT]) -> list[NamespacedName]:
        return replica.stores.workload_keys()

    def scope_executor(
        self, writer: domain_writer.DomainWriter, client: MemoryClient, follow_up: scopes.FollowUp[Any] | None
    ) -> scopes.ScopeExecutor[Any]:
        """The scope's executor, of the code of the version that `client`'s process runs."""
        version = self.version_of(client.sender)
        return version.counterpart(scopes.ScopeExecutor)(version.counterpart(self.descriptor), writer, follow_up)

    def work(self, replica: Replica[ScopeStoresT, ExecutorT], key: NamespacedName) -> Coroutine[Any, Any, Any]:
        snapshot, plan = self.plan_of(replica.stores, key, version=replica.version)
        applied: Coroutine[Any, Any, Any] = replica.executor.apply(snapshot, plan)  # type: ignore[attr-defined]
        return applied

    def plan_of(
        self, stores: ScopeStoresT, key: NamespacedName, *, version: Version = versions.CURRENT
    ) -> tuple[Any, plans.Plan]:
        """The workload's snapshot in `stores`, and the plan of `version`'s scope for it."""
        snapshot = stores.snapshot(*key, gate_enabled=True)
        return snapshot, version.counterpart(self.descriptor).plan(snapshot)

    def progress(self) -> float:
        """Domain writes landed, late ones above all, and deletions."""
        return super().progress() + 5 * len(self.api.teardowns)

    @initialize(fence=st.sampled_from(accepted_fences()))
    def configured(self, fence: float) -> None:
        """The deletion fence of this run's `Configuration`."""
        self.fence = fence
        for replica in self.replicas.values():
            replica.writer.fence_seconds = fence

    # --- admission: begun by either replica's webhook, persisted (or abandoned) later --------------------

    def _pod(self, name: str) -> Object | None:
        return self.api.peek("pods", NS, name)

    def _pod_fails(self, name: str) -> None:
        self.api.update("pods", NS, name, lambda b: b["status"].__setitem__("phase", "Failed"))

    def _delete_pod(self, name: str) -> None:
        if self._pod(name) is not None:
            self.api.delete("pods", NS, name)

    def _is_pending(self, name: str) -> bool:
        return any(p["metadata"]["name"] == name for _, p in self.pending)

    def _admit(
        self, body: Object, admitting: Coroutine[Any, Any, injection.PodAdmission], *, latency: float
    ) -> injection.PodAdmission | None:
        """Runs the webhook's decision on `body` now; an admitted pod is persisted later, `latency` at most. Returns
        the admission (None: refused)."""
        try:
            admitted = self.loop.run_until_complete(admitting)
        except kopf.AdmissionError:
            return None  # refused or deferred: the creator tries again later
        self.pending.append((self.now + latency, jsonpatch.apply_patch(body, admitted.patch)))
        return admitted

    def _persist(self, body: Object) -> Object | None:
        """The API server creates the admitted pod; returns it, or None when the name is taken (the create is
        refused). A scope adds what the pod's creator does next."""
        if self._pod(body["metadata"]["name"]) is not None:
            return None
        return self.api.put("pods", body, manager="kube-controller-manager")

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), lands=st.booleans())
    def admission_ends(self, data: st.DataObject, lands: bool) -> None:
        """A begun admission ends before its deadline: the pod is persisted, or the request was abandoned."""
        entry = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        if lands:
            self._persist(entry[1])

    def persist_named(self, name: str) -> None:
        """For scripted scenarios: persist the pending admission of pod `name`."""
        (entry,) = [p for p in self.pending if p[1]["metadata"]["name"] == name]
        self.pending.remove(entry)
        self._persist(entry[1])

    @rule(seconds=st.sampled_from((1.0, 10.0, 35.0, 65.0, 95.0)))
    def time_passes(self, seconds: float) -> None:
        """Admissions due meanwhile end first: at the last moment, the worst case for a fence."""
        self.now += seconds
        for due in sorted((p for p in self.pending if p[0] <= self.now), key=lambda p: p[0]):
            self.pending.remove(due)
            self._persist(due[1])

    def note_plain_answer(self, what: str, *, refused: bool, patch: list[Any]) -> None:
        """A webhook answered a workload that did not opt in: it must admit it unchanged."""
        if refused or patch:
            self.plain_refusals.append(f"{what}: {'refused' if refused else patch}")

    def write_workload(self, body: Object, *, plain: str) -> tuple[Object | None, bool]:
        """A create or update of a workload as the API server takes it: the scope's mutating webhook
        (`WorkloadRules.stamp`), its validating webhook (`errors`), then stored as kubectl would (an update replaces
        its annotations and spec). Returns the stored object (None: refused) and whether it was created; the
        answers about the workload named `plain` are noted (`note_plain_answer`). Each webhook is answered by the
        replica its turn names (`serving`), the validating one at half the mutating one's pace."""
        rules = self.descriptor.workload_rules
        mutating, validating = self.serving("workload mutating"), self.serving("workload validating", pace=2)
        name = body["metadata"]["name"]
        old = self.api.get(rules.plural, NS, name)
        patch = mutating.counterpart(self.descriptor).workload_rules.stamp(body, gate_on(mutating))
        mutated = jsonpatch.apply_patch(body, patch)
        refused = bool(validating.counterpart(self.descriptor).workload_rules.errors(mutated, old, gate_on(validating)))
        if name == plain:
            self.note_plain_answer(f"{self.descriptor.workload_kind} {name}", refused=refused, patch=patch)
        if refused:
            return None, False
        if old is None:
            return self.api.put(rules.plural, mutated, manager="kubectl"), True

        def change(current: Object) -> None:
            current["metadata"]["annotations"] = mutated["metadata"]["annotations"]
            current["spec"] = mutated["spec"]

        return self.api.update(rules.plural, NS, name, change), False

    # --- what must hold after every step, whatever the scope ---------------------------------------------

    def enrolled(self, pod: Object) -> bool:
        """Made from a template this scope stamped: its workload or revision opted in."""
        return (pod["metadata"].get("labels") or {}).get(keys.SCOPE_LABEL) == self.scope

    @invariant()
    def no_domain_starts_deleting_under_a_pod(self) -> None:
        assert [t for t in self.api.teardowns if t.users] == []

    @invariant()
    def no_pod_references_a_domain_being_deleted(self) -> None:
        for pod in self.api.view("pods"):
            if not references.is_non_terminal(pod):
                continue
            recorded = references.recorded_domain(pod)
            claims = references.referenced_claim_templates(pod)
            used = set()
            for domain in self.api.view(keys.COMPUTE_DOMAIN_PLURAL):
                name = domain["metadata"]["name"]
                if recorded == name or names.claim_template_name(name) in claims:
                    used.add(name)
                    assert not domain["metadata"].get("deletionTimestamp"), (
                        f"{pod['metadata']['name']} uses {name}, which is being deleted"
                    )
            if not injection.is_gated(pod["spec"]):  # released to the scheduler: its domain must be there
                assert recorded is None or recorded in used, f"{pod['metadata']['name']} runs on {recorded}, gone"
                assert {names.claim_template_name(name) for name in used} >= claims, (
                    f"{pod['metadata']['name']} holds {set(claims)}, whose domain is gone"
                )

    @invariant()
    def no_enrolled_pod_runs_without_its_claim(self) -> None:
        for pod in self.api.view("pods"):
            spec = pod["spec"]
            if not self.enrolled(pod) or not references.is_non_terminal(pod) or injection.is_gated(spec):
                continue
            claimed = any(c.get("name") == keys.CHANNEL_CLAIM_NAME for c in spec.get("resourceClaims") or ())
            for container in spec["containers"]:
                if injection.requests_gpu(container):
                    holds = {c.get("name") for c in (container.get("resources") or {}).get("claims") or ()}
                    where = f"{pod['metadata']['name']} runs without its claim in container {container['name']}"
                    assert claimed, where
                    assert keys.CHANNEL_CLAIM_NAME in holds, where

    @invariant()
    def plain_workloads_are_never_refused(self) -> None:
        assert self.plain_refusals == []

    @invariant()
    def a_foreign_look_alike_is_never_written(self) -> None:
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, self.foreign["metadata"]["name"])
        assert found is not None
        assert found["metadata"]["resourceVersion"] == self.foreign["metadata"]["resourceVersion"]

    # --- for scripted scenarios --------------------------------------------------------------------------

    def is_condemned(self, domain: str) -> bool:
        """Whether `domain`, which must still exist, carries the condemned mark."""
        found = self.api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, domain)
        assert found is not None, f"{domain} is gone"
        return keys.CONDEMNED_ANNOTATION in (found["metadata"].get("annotations") or {})

    def check(self) -> None:
        """Every invariant, for scripted scenarios."""
        self.no_domain_starts_deleting_under_a_pod()
        self.no_pod_references_a_domain_being_deleted()
        self.no_enrolled_pod_runs_without_its_claim()
        self.plain_workloads_are_never_refused()
        self.a_foreign_look_alike_is_never_written()
        self.nothing_is_written_by_a_replica_that_does_not_lead()
        self.check_scope()

    def check_scope(self) -> None:
        """The scope's own invariants, for scripted scenarios."""

    def put_foreign_look_alike(self, name: str, labels: dict[str, str]) -> Object:
        return self.api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_manifest(name, labels), manager="kubectl")


def domain_manifest(name: str, labels: dict[str, str], *, finalizers: Iterable[str] = ()) -> Object:
    """A ComputeDomain named `name` in `NS`, with its channel's claim template named as the driver names it."""
    meta: Object = {"name": name, "namespace": NS, "labels": labels}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {
        "metadata": meta,
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }
