"""Safety of the Lease, the work queue and the cache-sync barrier over adversarial interleavings.

Two or three replicas of one controller contend for its Lease, each a process of its own with its own event loop
(`virtual_time`): the real `LeaderElector`, sending its Lease requests from worker threads as in production, and
the real `Reconciling` (its `WorkQueue` and its `StoreSync`, whose barrier holds every pass until each watched
resource has been listed in full), with the timing, queue concurrency and store resync period of a `Configuration`
the product accepts. What the model stands in for is the API server: the Lease endpoints (`lease_api`) and the
list endpoint the stores are filled from; and the decision of a pass, which lasts until the model ends it.

Hypothesis interleaves, one step at a time:

- time passing, in uneven steps; every timer of a running replica fires at its due time on the way, and a Lease
  request whose client's timeout passed times out;
- the API server answering a replica's Lease requests at once (as all replicas start), or stalling them (a
  partition, an overloaded server): each stalled request then lands on the Lease, or not (yet), and returns to
  its sender with the answer, a timeout (landed or not), or an error that changed nothing, at steps of its own;
  so renewals fail, hang until the deadline, or land after their sender gave up on them, and a request of a
  replica that stepped down lands after it did;
- a replica pausing (a GC pause, a starved CPU) and resuming: while paused it runs nothing, its requests can still
  land, and its timers fire late, at once, once it resumes;
- a watch event queueing a key on every replica, leading or not, while the Lease changes hands or not;
- a page of a fresh list answered, or failing, so a replica can lead long before its stores are synced;
- a pass ending, or failing (retried after a back-off).

The invariants are the promises, judged from the model's own record (the API server's history of Lease writes,
the clock, which lists were answered in full), never from what a replica believes:

- `at_most_one_replica_may_write`: at no instant do two replicas' `may_write()` both hold;
- `a_replica_that_may_write_holds_a_fresh_lease`: a replica whose `may_write()` holds is the holder the Lease
  names, and a write of the Lease naming it, sent by it less than `renew_deadline` ago, has landed;
- `the_lease_changes_hands_only_after_its_holder_lapsed`: a write that takes the Lease from another holder lands
  more than `lease_duration` after the Lease was last written;
- `no_pass_starts_on_a_replica_without_a_fresh_lease`: when a pass starts, its replica holds a fresh Lease (as
  above);
- `no_pass_decides_before_every_store_is_listed`: no pass decides before every watched resource has been listed
  in full to its replica.

The first two are checked at every instant the model stops at: before and after each replica runs, timers firing
on the way included. The others are judged from what the model noted as Lease writes landed and passes started or
decided.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Coroutine
from typing import Any, cast
from unittest import mock

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mnnvl_api import models
from mnnvl_runtime import controller, identity, kube, leases, reconciling, settings, stores

from ..mnnvl_runtime import fakes
from . import lease_api
from . import settings as model_settings
from .virtual_time import Lockstep, VirtualLoop

NS = "serving"
LEASE = "mnnvl-lws"
REPLICAS = ("a", "b", "c")
Key = stores.NamespacedName
KEYS: tuple[Key, ...] = ((NS, "w0"), (NS, "w1"), (NS, "w2"))
#: (leaseDurationSeconds, renewDeadlineSeconds, retryPeriodSeconds): the default, and tight ones the configuration
#: accepts, with one second between a holder's deadline and its Lease's expiry, and Lease requests that time out
#: after one second or after four.
TIMINGS = ((15, 10, 2), (3, 2, 1), (10, 9, 4))
#: Workers of each replica's queue: fewer than there are keys, so keys wait for a worker; more, so workers wait for
#: keys; and the default.
CONCURRENCIES = (1, 4, 16)
#: Seconds the clock moves in one step: uneven, shorter and longer than each timing's periods.
STEPS = (0.25, 0.75, 1.5, 2.5, 4.0, 9.5, 16.0)
#: How often the work queue queues every known key again.
RESYNC_SECONDS = 30.0
#: The objects of each watched resource, by uid, with the key each concerns; pods take two pages to list.
OBJECTS: dict[str, dict[str, Key]] = {
    "pods": {"pod-0": KEYS[0], "pod-1": KEYS[1], "pod-2": KEYS[2]},
    "computedomains": {"cd-0": KEYS[0]},
}
PAGE_SIZE = 2
#: The process settings every replica reads (nothing of the machinery modelled here reads them).
PROCESS = settings.ProcessSettings(namespace=NS, pod_name="mnnvl-lws-0")


class PassError(Exception):
    """A pass that failed (a write refused, say): the queue retries its key after a back-off."""


@dataclasses.dataclass(kw_only=True, eq=False)
class PageRequest:
    """A page of a fresh list asked for and not answered yet."""

    replica: str
    plural: str
    offset: int
    answer: asyncio.Future[kube.Page]


@dataclasses.dataclass(frozen=True)
class Lister:
    """The list endpoint, as one replica's `StoreSync` calls it (the only call it makes): every page is a request
    in flight, answered at a step of the model."""

    pages: list[PageRequest]
    replica: str

    async def alist_page(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: str | None = None,
    ) -> kube.Page:
        answer: asyncio.Future[kube.Page] = asyncio.get_running_loop().create_future()
        self.pages.append(PageRequest(replica=self.replica, plural=plural, offset=int(after or 0), answer=answer))
        return await answer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Noted:
    """A pass of `replica` starting or deciding at the instant `at`, and what it lacked then by the model's record
    (empty: nothing)."""

    replica: str
    key: Key
    at: float
    lacking: str


@dataclasses.dataclass(kw_only=True, eq=False)
class Replica:
    """One process: its event loop, elector and reconciliation machinery, and what the model keeps of it."""

    name: str
    loop: VirtualLoop
    elector: leases.LeaderElector
    machinery: reconciling.Reconciling[Key]
    tasks: list[asyncio.Task[Any]]
    #: Object uid → the key it concerns, as the replica's stores hold them.
    known: dict[str, Key]
    #: The resources whose list was answered in full (its last page) to this replica.
    listed: set[str] = dataclasses.field(default_factory=set)
    #: The passes deciding now, each waiting for the model to end it.
    passes: list[asyncio.Future[None]] = dataclasses.field(default_factory=list)
    paused: bool = False
    #: Its Lease requests are answered at once (land, and return with the answer); else each waits in flight for
    #: the model to land and return it, or for its timeout.
    prompt: bool = True


def configuration(timing: tuple[int, int, int], concurrency: int, store_resync: float) -> models.Configuration:
    lease_duration, renew_deadline, retry_period = timing
    return models.Configuration.model_validate(
        {
            "leaderElection": {
                "leaseDurationSeconds": lease_duration,
                "renewDeadlineSeconds": renew_deadline,
                "retryPeriodSeconds": retry_period,
            },
            "reconciliation": {"concurrency": concurrency},
            "watching": {"storeResyncSeconds": store_resync},
        }
    )


def timing_of(configured: models.Configuration) -> leases.Timing:
    """The elector's timing, as `operator.run` derives it from the configuration."""
    election = configured.leader_election
    return leases.Timing(
        lease_duration=election.lease_duration_seconds,
        renew_deadline=election.renew_deadline_seconds,
        retry_period=election.retry_period_seconds,
    )


class LeaseInterleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = fakes.Clock()
        self.lockstep = Lockstep()
        self.server = lease_api.SteppedLeaseServer(self.clock, self.lockstep, at_once=self.answers_at_once)
        self.configuration = models.Configuration()
        self.timing = timing_of(self.configuration)
        self.replicas: dict[str, Replica] = {}
        self.pages: list[PageRequest] = []
        self.starts: list[Noted] = []
        self.decisions: list[Noted] = []
        self._stamps = itertools.count()
        self._wall_time = mock.patch.object(leases, "_wall_time", self._stamp)
        self._wall_time.start()

    def _stamp(self) -> str:
        """The Lease's renewTime, the only wall clock the elector reads: each write gets a stamp of its own."""
        return f"{self.clock.now:.3f}/{next(self._stamps)}"

    @initialize(
        timing=st.sampled_from(TIMINGS),
        replicas=st.sampled_from((2, 3)),
        concurrency=st.sampled_from(CONCURRENCIES),
        store_resync=st.sampled_from((3.0, 120.0)),
    )
    def replicas_start(
        self, timing: tuple[int, int, int], replicas: int, concurrency: int, store_resync: float
    ) -> None:
        """Every replica starts at once, with empty stores, none leading, with this run's `Configuration`."""
        self.configuration = configuration(timing, concurrency, store_resync)
        self.timing = timing_of(self.configuration)
        for name in REPLICAS[:replicas]:
            self.replicas[name] = self._start(name)
        self.run_instant()

    def _start(self, name: str) -> Replica:
        loop = VirtualLoop(self.clock, self.lockstep, at_once=functools.partial(self.answers_at_once, name))
        elector = leases.LeaderElector(
            lease_api.LeaseClient(self.server, name),
            namespace=NS,
            name=LEASE,
            holder=name,
            timing=self.timing,
            clock=self.clock,
        )
        context = controller.Context(
            identity=identity.Identity(LEASE),
            process=PROCESS,
            configuration=self.configuration,
            client=cast(kube.Kube, Lister(self.pages, name)),
            elector=elector,
        )
        known: dict[str, Key] = {}

        def apply(uid: str, body: object | None) -> list[Key]:
            key = known.pop(uid, None) if body is None else known.setdefault(uid, _key_of(uid))
            return [] if key is None else [key]

        mirrors = [stores.Mirror(stores.Resource(api_version="v1", plural=plural), apply) for plural in OBJECTS]
        machinery = reconciling.Reconciling(
            context, mirrors, functools.partial(self.decide, name), kind="Model", scope="model"
        )
        machinery.queue.work = self._noting_starts(name, machinery.queue.work)
        # What `Reconciling.start` runs, without registering the loops with the process's liveness probe.
        tasks: list[asyncio.Task[Any]] = [
            loop.create_task(elector.run(), name=f"{name}-election"),
            loop.create_task(machinery.queue.run(), name=f"{name}-queue"),
            loop.create_task(
                machinery.queue.resync(lambda: sorted(set(known.values())), every=RESYNC_SECONDS, then=lambda: None),
                name=f"{name}-resync",
            ),
            loop.create_task(machinery.sync.run(), name=f"{name}-store-sync"),
        ]
        return Replica(name=name, loop=loop, elector=elector, machinery=machinery, tasks=tasks, known=known)

    def _noting_starts(
        self, name: str, run: Callable[[Key], Coroutine[Any, Any, None]]
    ) -> Callable[[Key], Coroutine[Any, Any, None]]:
        """The pass as the queue runs it (`Reconciling`'s: the barrier, then the decision), its start noted first.
        It starts in the loop iteration after the queue made it, at the same instant, the API server unchanged."""

        async def noted(key: Key) -> None:
            lacking = "" if self.holds_fresh_lease(name) else f"a fresh Lease (it names {self.server.holder!r})"
            self.starts.append(Noted(replica=name, key=key, at=self.clock.now, lacking=lacking))
            await run(key)

        return noted

    async def decide(self, name: str, key: Key) -> None:
        """A pass's decision, once the barrier let it through: noted, with whether every resource had been listed
        in full to its replica; it then lasts until the model ends it (or the replica cancels it)."""
        replica = self.replicas[name]
        unlisted = ", ".join(plural for plural in OBJECTS if plural not in replica.listed)
        lacking = f"a complete list of {unlisted}" if unlisted else ""
        self.decisions.append(Noted(replica=name, key=key, at=self.clock.now, lacking=lacking))
        ending: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        replica.passes.append(ending)
        try:
            await ending
        finally:
            replica.passes.remove(ending)

    def teardown(self) -> None:
        """Every replica stops: its loops cancelled, every request returned, every worker thread ended."""
        try:
            for replica in self.replicas.values():
                replica.paused = False
                for task in replica.tasks:
                    task.cancel()
            for _ in range(100):
                self.run_instant(check=False)
                for call in list(self.server.in_flight):
                    self.server.returns(call, heard=False)
                pending = [task for r in self.replicas.values() for task in asyncio.all_tasks(r.loop)]
                if not self.server.in_flight and not pending:
                    break
            self.lockstep.join()
        finally:
            for replica in self.replicas.values():
                replica.loop.run_until_complete(replica.loop.shutdown_asyncgens())
                replica.loop.close()
            self._wall_time.stop()

    # --- time and processes ---------------------------------------------------------------------------------

    def answers_at_once(self, name: str) -> bool:
        """Whether the API server answers a Lease request of replica `name` as it is sent."""
        replica = self.replicas.get(name)
        return replica is not None and replica.prompt and not replica.paused

    def _running(self) -> list[Replica]:
        return [replica for replica in self.replicas.values() if not replica.paused]

    def run_instant(self, *, check: bool = True) -> None:
        """What is due now happens: a running replica's requests whose timeout passed time out; every running
        replica runs until it waits (for time to pass, or for the API server), its requests answered at once while
        its requests flow. The promises of every instant are checked before, and after each replica ran."""
        checked = self.check_instant if check else lambda: None
        checked()
        running = {replica.name for replica in self._running()}
        for call in [c for c in self.server.in_flight if c.sender in running and c.deadline <= self.clock.now]:
            self.server.returns(call, heard=False)
        prompt = {replica.name for replica in self._running() if replica.prompt}
        for _ in range(100):
            for replica in self._running():
                replica.loop.settle()
                checked()
            answered = [call for call in self.server.in_flight if call.sender in prompt]
            if not answered:
                break
            for call in answered:
                if not call.landed:
                    self.server.land(call)
                self.server.returns(call, heard=True)
        else:
            raise RuntimeError("requests answered at once keep coming at one instant")

    def check_instant(self) -> None:
        self.at_most_one_replica_may_write()
        self.a_replica_that_may_write_holds_a_fresh_lease()

    @rule(seconds=st.sampled_from(STEPS))
    def time_passes(self, seconds: float) -> None:
        """The clock moves on, stopping at every instant something is due on a running replica."""
        until = self.clock.now + seconds
        while True:
            running = self._running()
            names = {replica.name for replica in running}
            due = min(
                [replica.loop.next_due() for replica in running]
                + [call.deadline for call in self.server.in_flight if call.sender in names],
                default=math.inf,
            )
            if due > until:
                break
            self.clock.now = max(self.clock.now, due)
            self.run_instant()
        self.clock.now = until
        self.run_instant()

    @rule(data=st.data())
    def a_replica_pauses_or_resumes(self, data: st.DataObject) -> None:
        """A running replica stops running (a GC pause, a starved CPU); a paused one runs again, late."""
        replica = self.replicas[data.draw(st.sampled_from(sorted(self.replicas)))]
        replica.paused = not replica.paused
        self.run_instant()

    @rule(data=st.data())
    def the_api_server_stalls_or_answers_a_replica(self, data: st.DataObject) -> None:
        """The API server stops answering a replica's Lease requests at once (a partition, an overloaded server):
        each then lands and returns when the model says, or times out; or it answers them at once again."""
        replica = self.replicas[data.draw(st.sampled_from(sorted(self.replicas)))]
        replica.prompt = not replica.prompt
        self.run_instant()

    # --- the API server --------------------------------------------------------------------------------------

    @precondition(lambda self: any(not call.landed for call in self.server.in_flight))
    @rule(data=st.data())
    def a_lease_request_lands(self, data: st.DataObject) -> None:
        """A Lease request in flight reaches the API server (its sender may be paused)."""
        call = data.draw(st.sampled_from([call for call in self.server.in_flight if not call.landed]))
        self.server.land(call)
        self.run_instant()

    def _returnable(self) -> list[lease_api.Call]:
        running = {replica.name for replica in self._running()}
        return [call for call in self.server.in_flight if call.sender in running]

    @precondition(lambda self: self._returnable())
    @rule(data=st.data(), heard=st.booleans())
    def a_lease_request_returns(self, data: st.DataObject, heard: bool) -> None:
        """A Lease request returns to its (running) sender: landed, with its answer, or a timeout; not landed, with
        an error, or a timeout. It never lands afterwards."""
        call = data.draw(st.sampled_from(self._returnable()))
        self.server.returns(call, heard=heard)
        self.run_instant()

    def _unanswered_pages(self) -> list[PageRequest]:
        return [page for page in self.pages if not page.answer.done()]

    @precondition(lambda self: self._unanswered_pages())
    @rule(data=st.data(), fails=st.booleans())
    def a_list_page_returns(self, data: st.DataObject, fails: bool) -> None:
        """A page of a fresh list is answered (the last one completes the list), or the list fails."""
        self.answer_page(data.draw(st.sampled_from(self._unanswered_pages())), fails=fails)

    def answer_page(self, page: PageRequest, *, fails: bool) -> None:
        self.pages.remove(page)
        if fails:
            page.answer.set_exception(kube.ApiError(status=503, reason="ServiceUnavailable"))
        else:
            objects = sorted(OBJECTS[page.plural])
            taken = objects[page.offset : page.offset + PAGE_SIZE]
            last = page.offset + PAGE_SIZE >= len(objects)
            items = [{"metadata": {"uid": uid, "name": uid, "namespace": NS, "resourceVersion": "1"}} for uid in taken]
            page.answer.set_result(
                kube.Page(items=items, resource_version="1", next=None if last else str(page.offset + PAGE_SIZE))
            )
            if last:
                self.replicas[page.replica].listed.add(page.plural)
        self.run_instant()

    # --- the work ----------------------------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS))
    def a_watch_event_queues_a_key(self, key: Key) -> None:
        """An object changes: every replica's watch sees it and queues its key, leading or not, running or paused
        (then once it runs again)."""
        for name in self.replicas:
            self.enqueue(name, key)

    def enqueue(self, name: str, key: Key) -> None:
        replica = self.replicas[name]
        replica.loop.call_soon(replica.machinery.queue.enqueue, key)
        self.run_instant()

    def _deciding(self) -> list[asyncio.Future[None]]:
        return [ending for replica in self.replicas.values() for ending in replica.passes if not ending.done()]

    @precondition(lambda self: self._deciding())
    @rule(data=st.data(), failed=st.booleans())
    def a_pass_ends(self, data: st.DataObject, failed: bool) -> None:
        """A pass ends, done or failed (its key is retried after a back-off)."""
        ending = data.draw(st.sampled_from(self._deciding()))
        if failed:
            ending.set_exception(PassError("a write was refused"))
        else:
            ending.set_result(None)
        self.run_instant()

    # --- the promises ------------------------------------------------------------------------------------------

    def holds_fresh_lease(self, name: str) -> bool:
        """By the API server's record alone: the Lease names `name`, and a write of it that named `name`, sent by
        `name` less than the renew deadline ago, has landed."""
        if self.server.holder != name:
            return False
        deadline = self.timing.renew_deadline
        # Newest first, back to the last write that landed within the deadline: one sent within it landed within it.
        recent = itertools.takewhile(
            lambda write: self.clock.now - write.landed_at < deadline, reversed(self.server.writes)
        )
        return any(
            write.succeeded
            and write.sender == name
            and write.holder_after == name
            and self.clock.now - write.sent_at < deadline
            for write in recent
        )

    @invariant()
    def at_most_one_replica_may_write(self) -> None:
        writing = [name for name, replica in self.replicas.items() if replica.elector.may_write()]
        assert len(writing) <= 1, f"at {self.clock.now:.2f}, replicas {writing} may all write"

    @invariant()
    def a_replica_that_may_write_holds_a_fresh_lease(self) -> None:
        for name, replica in self.replicas.items():
            if replica.elector.may_write():
                assert self.holds_fresh_lease(name), (
                    f"at {self.clock.now:.2f}, {name} may write, but the Lease names {self.server.holder!r} and "
                    f"{name}'s last write of it naming itself was sent at {self._last_sent_by(name)}"
                )

    def _last_sent_by(self, name: str) -> float | None:
        sent = [w.sent_at for w in self.server.writes if w.succeeded and w.sender == name and w.holder_after == name]
        return max(sent, default=None)

    @invariant()
    def the_lease_changes_hands_only_after_its_holder_lapsed(self) -> None:
        succeeded = [write for write in self.server.writes if write.succeeded]
        for previous, write in itertools.pairwise(succeeded):
            if write.holder_before and write.holder_after not in ("", write.holder_before):
                assert write.landed_at - previous.landed_at > self.timing.lease_duration, (
                    f"{write.sender} took the Lease from {write.holder_before} at {write.landed_at:.2f}, "
                    f"{write.landed_at - previous.landed_at:.2f} s after it was last written"
                )

    @invariant()
    def no_pass_starts_on_a_replica_without_a_fresh_lease(self) -> None:
        assert [start for start in self.starts if start.lacking] == []

    @invariant()
    def no_pass_decides_before_every_store_is_listed(self) -> None:
        assert [decision for decision in self.decisions if decision.lacking] == []


def _key_of(uid: str) -> Key:
    (key,) = [objects[uid] for objects in OBJECTS.values() if uid in objects]
    return key


LeaseInterleavings.TestCase.settings = model_settings.for_model(max_examples=60, steps=80)
test_lease_interleavings = LeaseInterleavings.TestCase


# --- scripted scenarios: the model's own steps, in an order that matters --------------------------------------


def test_a_pass_waits_for_the_lists_and_ends_when_its_cut_off_leader_steps_down() -> None:
    """What the invariants judge is seen at all: replica a, leading, starts a pass that decides only once every
    list is answered in full; cut off from the API server, a stops writing by its renew deadline, its pass
    cancelled, and b takes the Lease only once a's record has gone unchanged for the lease duration."""
    machine = LeaseInterleavings()
    try:
        machine.replicas_start(timing=(15, 10, 2), replicas=2, concurrency=1, store_resync=120.0)
        a, b = machine.replicas["a"], machine.replicas["b"]
        assert (machine.server.holder, a.elector.may_write()) == ("a", True)
        machine.enqueue("a", KEYS[0])
        assert [(n.replica, n.key, n.lacking) for n in machine.starts] == [("a", KEYS[0], "")]
        assert machine.decisions == []  # the barrier holds it: nothing is listed yet
        while machine.pages:
            machine.answer_page(machine.pages[0], fails=False)
        assert [(n.replica, n.key, n.lacking) for n in machine.decisions] == [("a", KEYS[0], "")]
        a.prompt = False
        machine.time_passes(9.5)
        assert a.elector.may_write()
        assert a.passes
        machine.time_passes(0.75)
        assert not a.elector.may_write()
        assert a.passes == []
        machine.time_passes(4.0)
        assert machine.server.holder == "a"  # 14.25 s unchanged: not lapsed yet
        machine.time_passes(4.0)
        assert machine.server.holder == "b"
        assert b.elector.may_write()
        machine.the_lease_changes_hands_only_after_its_holder_lapsed()
        machine.no_pass_starts_on_a_replica_without_a_fresh_lease()
        machine.no_pass_decides_before_every_store_is_listed()
    finally:
        machine.teardown()
