"""The shared domain writer (`mnnvl_runtime.domain_writer.DomainWriter`) asked to act on plans as stale as a lagging store
makes them, while the world changes under it.

A scope's planner decides from its stores; the writer must make every decision safe by itself, from fresh reads
and preconditions, because anything may have changed since: the domain deleted and made again under its name (by
us, or a look-alike labelled as ours by someone else), another replica marking or lifting the mark, pods admitted
onto it (up to the admission bound after our webhook read it) and ending, pods deleted and made again under their
names. Here the writer is called for any of its writes at any step, whatever the world looks like, and every write
it sends lands at a step of the model's choosing (or never), after the world changed again.

The oracle judges every write of the writer the moment it lands, from the API server's objects then:

- a DELETE begins a domain's deletion only when no non-terminal pod uses it (holds its claim or records it), nor
  will: no pod admitted onto that domain before is persisted after it;
- the protection finalizer goes only from a domain being deleted that no non-terminal pod uses;
- nothing made by someone else (a look-alike labelled as ours) is changed;
- a scheduling gate is lifted only from the pod incarnation the writer was asked to ungate.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains
from mnnvl_api.models import computedomain
from mnnvl_runtime import domain_writer

from ..mnnvl_runtime import memory_api
from ..mnnvl_runtime.memory_api import MemoryApi, Object
from . import settings
from .harness import RETRIED, campaign

NS = "serving"
NAME = "dsr1-0-bbbbb"
TEMPLATE = names.claim_template_name(NAME)
OTHER = "dsr1-1-bbbbb"
FENCE = 90.0
ADMISSION_BOUND = 60.0
#: Pod names, reused by new incarnations; more than a page of the writer's pod lists.
PODS = ("p0", "p1", "p2", "p3")
LABELS = {
    keys.OWNER_UID_LABEL: "lws-uid",
    keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER,
    keys.SCOPE_LABEL: keys.SCOPE_REPLICA,
    keys.WORKLOAD_NAME_LABEL: "dsr1",
    keys.GROUP_INDEX_LABEL: "0",
}
#: The most times a run changes the domain under the writer (made again, deleted) and marks or lifts it from
#: elsewhere: a run disrupted every few steps never gets as far as a fence passing.
DISRUPTIONS = 3
#: How a pod uses the domain: holds its claim, records it (a CPU-only leader), or uses another domain.
USES = ("holds its claim", "records it", "uses another")


def belongs(facts: domains.DomainFacts) -> bool:
    """What a scope's executor passes: made by a scope controller, as the labels say and the API server confirms."""
    return facts.managed


def pod_body(name: str, uses: str, *, gated: bool) -> Object:
    domain = OTHER if uses == "uses another" else NAME
    spec: Object = {"containers": [{"name": "vllm", "image": "vllm"}]}
    if uses != "records it":
        spec["resourceClaims"] = [
            {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(domain)}
        ]
    if gated:
        spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def uses_domain(pod: Object) -> bool:
    return memory_api.references_domain(pod, domain=NAME, claim_template=TEMPLATE)


@dataclasses.dataclass(frozen=True)
class Told:
    """A pod incarnation the writer was asked to ungate."""

    name: str
    uid: str


class WriterInterleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.api.leader = "a"
        self.now = 0.0
        client = self.api.client(keys.LWS_CONTROLLER, sender="a")
        client.reads_take = self.read_takes
        self.writer = domain_writer.DomainWriter(
            client,
            component=keys.LWS_CONTROLLER,
            scope=keys.SCOPE_REPLICA,
            fence_seconds=FENCE,
            clock=lambda: self.now,
        )
        self.tasks: list[asyncio.Task[Any]] = []
        #: Admissions begun: (deadline, pod); every pod incarnation ever persisted (name, uid); ungates asked for.
        self.pending: list[tuple[float, Object, str | None]] = []
        self.incarnations: list[Told] = []
        self.told: set[Told] = set()
        self.marks = (f"other-replica/{n}" for n in itertools.count())
        self.disruptions = {"domain": 0, "mark": 0}
        #: The uids of the domain incarnations whose deletion a DELETE of the writer began.
        self.deleted_by_writer: set[str] = set()
        self.read_seconds = 0.0
        self.domain_made(ours=True)

    @initialize(uses=st.lists(st.sampled_from(USES), max_size=len(PODS)), gated=st.booleans())
    def pods_running(self, uses: list[str], gated: bool) -> None:
        """The run starts with pods already persisted, each using the domain or another (its steps then go to what
        happens around them, not to making them)."""
        for name, use in zip(PODS, uses, strict=False):
            self.persist(pod_body(name, use, gated=gated))

    def teardown(self) -> None:
        for task in self.tasks:
            task.cancel()
        for request in self.api.in_flight:
            request.answer.cancel()
        self.settle()
        self.loop.close()

    def settle(self) -> None:
        async def turns() -> None:
            for _ in range(50):
                await asyncio.sleep(0)

        self.loop.run_until_complete(turns())
        for task in [t for t in self.tasks if t.done()]:
            self.tasks.remove(task)
            error = None if task.cancelled() else task.exception()
            if error is not None and not isinstance(error, RETRIED):
                raise error

    def domain(self) -> Object | None:
        return self.api.peek(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)

    # --- the world ---------------------------------------------------------------------------------------

    @precondition(lambda self: self.domain() is None)
    @rule(ours=st.booleans())
    def domain_made(self, ours: bool) -> None:
        """The name is taken again: by us (a new group incarnation's domain), or by someone else's copy of our
        manifest (a look-alike: labelled and finalized as ours, made under another field manager)."""
        manifest = computedomain.manifest(name=NAME, namespace=NS, claim_template=TEMPLATE, labels=dict(LABELS))
        self.api.put(keys.COMPUTE_DOMAIN_PLURAL, manifest, manager=keys.LWS_CONTROLLER if ours else "kubectl")

    @precondition(lambda self: self.domain() is not None and self.disruptions["domain"] < DISRUPTIONS)
    @rule(how=st.sampled_from(("deleted by a user", "replaced by ours", "replaced by a look-alike")))
    def domain_goes(self, how: str) -> None:
        """A user deletes the domain (its finalizer keeps it while it has one); or it goes (deleted, its finalizers
        taken off by whoever) and the name is taken again at once: a coarse step, since the finalizer keeps a
        deleted domain for as long as the writer leaves it. (One rule with an argument: Hypothesis draws the first
        valid rule of its order, fewest arguments first, far more often than the others.)"""
        self.disruptions["domain"] += 1
        self.api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
        if how == "deleted by a user":
            return
        if self.domain() is not None:
            self.api.update(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME, lambda b: b["metadata"].__setitem__("finalizers", []))
        self.domain_made(how == "replaced by ours")

    def live(self) -> bool:
        found = self.domain()
        return found is not None and not found["metadata"].get("deletionTimestamp")

    @precondition(lambda self: self.live() and self.disruptions["mark"] < DISRUPTIONS)
    @rule(lifted=st.booleans())
    def another_replica_marks(self, lifted: bool) -> None:
        """A replica that led before (its writes landing late) sets a mark of its own, or lifts the mark."""
        self.disruptions["mark"] += 1

        def change(body: Object) -> None:
            annotations = body["metadata"].setdefault("annotations", {})
            if lifted:
                annotations.pop(keys.CONDEMNED_ANNOTATION, None)
            else:
                annotations[keys.CONDEMNED_ANNOTATION] = next(self.marks)

        self.api.update(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME, change)

    @rule(
        name=st.sampled_from(PODS),
        uses=st.sampled_from(USES),
        gated=st.booleans(),
        latency=st.sampled_from((1.0, ADMISSION_BOUND)),
    )
    def pod_admitted(self, name: str, uses: str, gated: bool, latency: float) -> None:
        """Our webhook reads the domain now and admits a pod onto it unless it is missing, condemned or being
        deleted; the pod is persisted up to `latency` later."""
        if self.admits(uses):
            found = self.domain()
            onto = found["metadata"]["uid"] if found is not None and uses != "uses another" else None
            self.pending.append((self.now + latency, pod_body(name, uses, gated=gated), onto))

    def admits(self, uses: str) -> bool:
        """Our webhook's answer to a pod that `uses` the domain, from a fresh read of it."""
        found = self.domain()
        return uses == "uses another" or not (
            found is None
            or found["metadata"].get("deletionTimestamp")
            or keys.CONDEMNED_ANNOTATION in (found["metadata"].get("annotations") or {})
        )

    def persist(self, body: Object) -> None:
        if self.api.peek("pods", NS, body["metadata"]["name"]) is None:
            stored = self.api.put("pods", body, manager="kube-controller-manager")
            self.incarnations.append(Told(stored["metadata"]["name"], stored["metadata"]["uid"]))

    def admitted(self, admission: tuple[float, Object, str | None]) -> None:
        """An admitted pod is persisted: the domain incarnation it was admitted onto must not have started going
        by the writer's DELETE meanwhile (the fence is there to wait out admissions in flight)."""
        _, body, onto = admission
        assert onto not in self.deleted_by_writer, (
            f"{body['metadata']['name']} was admitted onto {NAME} before the writer's DELETE and persisted after it"
        )
        self.persist(body)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def admission_ends(self, data: st.DataObject) -> None:
        self.admitted(self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1))))

    @rule(seconds=st.sampled_from((1.0, 30.0, FENCE + 1.0)))
    def time_passes(self, seconds: float) -> None:
        """Admissions due meanwhile land first, at the last moment."""
        self.now += seconds
        self.admissions_due()

    def admissions_due(self) -> None:
        for due in sorted((p for p in self.pending if p[0] <= self.now), key=lambda p: p[0]):
            self.pending.remove(due)
            self.admitted(due)

    @rule(seconds=st.sampled_from((0.0, 20.0)))
    def reads_slow(self, seconds: float) -> None:
        """From now on each of the writer's reads takes `seconds` to answer (the API server under load): admissions
        due land as a read is asked, and the clock runs on while its answer comes back. A pod list of several pages
        spans admissions landing."""
        self.read_seconds = seconds

    def read_takes(self) -> None:
        self.admissions_due()
        self.now += self.read_seconds

    def pod_names(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.api.view("pods"))

    @precondition(lambda self: self.pod_names())
    @rule(data=st.data(), uses=st.sampled_from(USES))
    def pod_made_again(self, data: st.DataObject, uses: str) -> None:
        """A pod is deleted and its creator makes it again under its name at once (our webhook admitting it), gated:
        a new incarnation."""
        name = data.draw(st.sampled_from(self.pod_names()))
        self.api.delete("pods", NS, name)
        if self.admits(uses):
            self.persist(pod_body(name, uses, gated=True))

    @precondition(lambda self: self.pod_names())
    @rule(data=st.data(), deleted=st.booleans())
    def pod_ends(self, data: st.DataObject, deleted: bool) -> None:
        name = data.draw(st.sampled_from(self.pod_names()))
        if deleted:
            self.api.delete("pods", NS, name)
        else:
            self.api.update("pods", NS, name, lambda b: b["status"].__setitem__("phase", "Succeeded"))

    # --- the writer, on a stale plan -----------------------------------------------------------------------

    def start(self, write: Any) -> None:
        self.tasks.append(self.loop.create_task(write))
        self.settle()

    @rule(write=st.sampled_from(("fenced delete", "uncondemn", "release")))
    def writer_acts(self, write: str) -> None:
        """The Lease holder's pass asks for a write on the domain's name, whatever its stores say about it."""
        if write == "fenced delete":
            self.start(self.writer.fenced_delete(NS, NAME, belongs=belongs, workload=None))
        elif write == "uncondemn":
            self.start(self.writer.uncondemn(NS, NAME, belongs=belongs, workload=None))
        else:
            self.start(self.writer.release(NS, NAME, belongs=belongs, workload=None))

    @rule(write=st.sampled_from(("fenced delete", "uncondemn", "release")))
    def writer_acts_and_hears_back(self, write: str) -> None:
        """As `writer_acts`, then every write in flight lands, answered: a coarse step, so that a search reaches a
        mark whose fence has passed, and the deletes and releases that follow, within a few steps."""
        self.writer_acts(write)
        while self.api.in_flight:
            self.land(self.api.in_flight[0], answered=True)

    @precondition(lambda self: self.incarnations)
    @rule(data=st.data(), watched_gate=st.booleans())
    def writer_ungates(self, data: st.DataObject, watched_gate: bool) -> None:
        """The pass ungates a pod incarnation its store knew (perhaps gone, its name taken by a successor), with
        where the watch saw its gate, or without."""
        told = data.draw(st.sampled_from(self.incarnations))
        self.told.add(told)
        self.start(self.writer.ungate(NS, told.name, uid=told.uid, gate_at=0 if watched_gate else None, workload=None))

    @precondition(lambda self: self.api.in_flight)
    @rule(data=st.data(), outcome=st.sampled_from(("answered", "unanswered", "lost")))
    def request_ends(self, data: st.DataObject, outcome: str) -> None:
        """A write lands now (its sender hears the answer, or sees a timeout), or its sender times out and it
        never lands. Every write is judged as it lands."""
        request = data.draw(st.sampled_from(self.api.in_flight))
        if outcome == "lost":
            if not request.answer.done():
                request.answer.set_exception(memory_api.timed_out())
            self.api.in_flight.remove(request)
            self.settle()
        else:
            self.land(request, answered=outcome == "answered")

    @precondition(
        lambda self: self.api.in_flight and self.domain() is not None and self.disruptions["domain"] < DISRUPTIONS
    )
    @rule(data=st.data(), how=st.sampled_from(("replaced by ours", "replaced by a look-alike")))
    def a_write_lands_after_the_name_is_taken_again(self, data: st.DataObject, how: str) -> None:
        """The domain a write was decided on is replaced while the write is in flight; then it lands: a coarse
        step for the race each write's precondition is there for."""
        request = data.draw(st.sampled_from(self.api.in_flight))
        self.domain_goes(how)
        self.land(request, answered=True)

    def land(self, request: memory_api.Request, *, answered: bool) -> None:
        before = self.world()
        teardowns = len(self.api.teardowns)
        self.api.land(request, answered=answered)
        self.judge(before, self.api.teardowns[teardowns:])
        self.settle()

    # --- the oracle ----------------------------------------------------------------------------------------

    def world(self) -> tuple[Object | None, list[Object]]:
        found = self.domain()
        return copy.deepcopy(found), copy.deepcopy(self.api.view("pods"))

    def judge(self, before: tuple[Object | None, list[Object]], teardowns: list[memory_api.Teardown]) -> None:
        domain, pods = before
        users = [p["metadata"]["name"] for p in pods if uses_domain(p)]
        after = self.domain()
        for teardown in teardowns:
            assert not teardown.users, f"the writer's DELETE began {teardown.domain}'s deletion under {teardown.users}"
            if domain is not None:
                self.deleted_by_writer.add(domain["metadata"]["uid"])
        if domain is not None:
            changed = after is None or after["metadata"]["resourceVersion"] != domain["metadata"]["resourceVersion"]
            if changed:
                facts = domains.facts_of(domain)
                assert facts.managed, f"the writer changed {NAME}, made by someone else"
            released = keys.PROTECTION_FINALIZER in (domain["metadata"].get("finalizers") or []) and (
                after is None or keys.PROTECTION_FINALIZER not in (after["metadata"].get("finalizers") or [])
            )
            if released:
                assert domain["metadata"].get("deletionTimestamp"), f"the finalizer left {NAME}, which lives"
                assert not users, f"the finalizer left {NAME} while {users} use it"
        for pod in pods:
            now = self.api.peek("pods", NS, pod["metadata"]["name"])
            if now is not None and now["metadata"]["uid"] == pod["metadata"]["uid"]:
                lifted = len(now["spec"].get("schedulingGates") or []) < len(pod["spec"].get("schedulingGates") or [])
                if lifted:
                    told = Told(pod["metadata"]["name"], pod["metadata"]["uid"])
                    assert told in self.told, f"the gate left {told}, which the writer was never asked to ungate"


WriterInterleavings.TestCase.settings = settings.for_model(max_examples=600, steps=40)
test_writer_interleavings = WriterInterleavings.TestCase

#: The rules of every race the campaigns below stage: the mark set or lifted from elsewhere, pods admitted and
#: landing, time passing, the writer acting and its writes landing.
RACE_RULES = ("another_replica_marks", "pod_admitted", "admission_ends", "time_passes", "writer_acts", "request_ends")

#: Writes in flight while the domain is marked, lifted, deleted or made again under its name, and pods come and go:
#: the race each write's preconditions are there for, staged on its own.
LateWrites = campaign(
    WriterInterleavings,
    "LateWrites",
    rules=("domain_goes", *RACE_RULES, "a_write_lands_after_the_name_is_taken_again"),
    max_examples=300,
)
test_writer_late_writes = LateWrites.TestCase


class FencePassed(WriterInterleavings):
    @initialize()
    def fence_passed(self) -> None:
        """The run starts with the writer's mark on the domain a fence ago: its next pass deletes, if nothing
        changed."""
        self.writer_acts_and_hears_back("fenced delete")
        self.time_passes(FENCE + 1.0)


#: A fenced deletion's last step sent while the mark is lifted and a pod admitted, or the domain made again under
#: its name: what the DELETE's preconditions are there for.
FenceRaces = campaign(
    FencePassed,
    "FenceRaces",
    rules=("domain_goes", *RACE_RULES),
    max_examples=600,
)
test_writer_fence_races = FenceRaces.TestCase


class MarkedAsAPodIsAdmitted(WriterInterleavings):
    @initialize()
    def marked_as_a_pod_is_admitted(self) -> None:
        """The run starts as the writer marks the domain just after a webhook let a pod onto it, the pod landing up
        to the admission bound later; pods of other domains share the namespace, so the writer's pod lists run to
        several pages."""
        for name in ("n0", "n1", "n2"):
            self.persist(pod_body(name, "uses another", gated=False))
        self.pod_admitted("p3", "holds its claim", gated=False, latency=ADMISSION_BOUND)
        self.writer_acts_and_hears_back("fenced delete")

    def pods_running(self, uses: list[str], gated: bool) -> None:
        """Not an initializer here: the start above is the whole of it."""
        super().pods_running(uses, gated)


#: Fenced deletions whose pod lists are slow enough for admissions to land while they run: what counting the fence
#: to the list's start is there for.
SlowLists = campaign(
    MarkedAsAPodIsAdmitted,
    "SlowLists",
    rules=(
        "pod_admitted",
        "admission_ends",
        "time_passes",
        "reads_slow",
        "writer_acts",
        "writer_acts_and_hears_back",
        "request_ends",
    ),
    max_examples=1000,
)
test_writer_slow_lists = SlowLists.TestCase
