"""The watch stores every controller decides from (`mnnvl_runtime.stores`: `Mirror`, its list protocol and
`StoreSync`), and the indexes the scopes build on them, over adversarial interleavings of writes, watch events and
paged lists.

Two store processes run side by side, each at its own lags: a replica scope's (`mnnvl_lws.state.Stores`) and a
slice scope's (`mnnvl_ds.state.Stores`), each with a watch stream per resource (`relist.Stream`, reading the API's
event log from its beginning) and its real `StoreSync`, which lists every resource of the scope in turn, one object
a page, in front of an in-memory API server (`memory_api`). The cluster holds every object when they start, each
changed once since its creation. Hypothesis interleaves, one step at a time:

- writes: pods (of either scope; recording a domain, holding its claim, both or neither), ComputeDomains (with the
  driver's claim template; labelled for a workload by either scope's controller; protected by the finalizer or
  not) and a LeaderWorkerSet, created, changed (a pod fails or records another domain, a domain is marked
  condemned or relabelled as the other controller's), deleted (a protected domain in two steps: marked, then let
  go) or replaced (deleted and created again under its name: a new uid). A write either names its object, or
  races a process's list: it lands between two of the list's pages (after its first, if it has not begun), on an
  object the pages still to come hold, or a new one of that resource;
- a watch stream delivering one event, or all it has not delivered yet; or losing one, or all of them, on a 410,
  kopf re-delivering the objects that exist now, or not;
- the page a process's sync waits for: answered as the watch streams stand, or once the watch of that resource
  delivered all it had (the usual order, drawn twice as often); or failing with a 410, which aborts that list and
  leaves the sync's round incomplete. A list's snapshot is taken when its first page is answered, and its pages
  come in key order, as the API server's do.

What the stores promise is checked after every step, in the test's own terms: the oracle is the API's history (its
event log, and the snapshot each list answered) and what the test delivered to each store; what a store holds is
what its mirrors passed on to its indexes (a tap on each mirror's `apply`), never the store's own bookkeeping.

- `no_object_version_rolls_back`: a store never passes its indexes an older version of an object than the one they
  hold: not from a late watch event older than what a list gave, not from a list page older than an event already
  applied;
- `a_deletion_the_watch_showed_stays`: a store never holds an object whose deletion its watch delivered, even when
  a list in flight at the deletion has it on a later page (a tombstone);
- `a_finished_list_leaves_its_snapshot_and_what_the_watch_showed_newer`: when a list finishes, its store holds the
  objects of the list's snapshot and those its watch showed at a version newer than the snapshot, less those whose
  deletion its watch showed, each at the newest version it was shown, and nothing else: no ghost (an object deleted
  before the snapshot, its DELETED event lost or not delivered yet), none deleted during the list, none newer than
  the list dropped;
- `the_barrier_opens_only_once_every_resource_was_listed`: `StoreSync.synced` is set only once every mirror of the
  process has finished a list;
- what the consumers (`mnnvl_lws.state`, `mnnvl_ds.state`, the guardian) ask the indexes agrees with the objects the
  store holds: `the_newest_incarnation_answers_for_a_name` (the domain and the LeaderWorkerSet of a name are its
  newest incarnation held: a stale one, its deletion hidden by a re-delivery or a list in flight, never shadows its
  successor; the claim templates that exist are those held), `the_pods_using_a_domain_are_those_held_that_use_it`
  (the non-terminal pods recording a domain, and those holding a claim template) and
  `a_workloads_domains_are_those_its_own_controller_labelled` (the domains indexed under a workload, and the managed
  workloads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mnnvl_api import keys, names
from mnnvl_ds import state as ds_state
from mnnvl_lws import state as lws_state
from mnnvl_runtime import kube, stores

from ..mnnvl_runtime.memory_api import MemoryApi, MemoryClient, Object, Snapshot
from ..mnnvl_runtime.relist import Stream
from . import settings
from .harness import NS

PODS = ("p0", "p1", "p2")
DOMAINS = ("d0", "d1")
#: The workloads domains are labelled for; the LeaderWorkerSet written is the first.
WORKLOADS = ("w0", "w1")
CD = keys.COMPUTE_DOMAIN_PLURAL
LWS = keys.LWS_PLURAL
TEMPLATES = "resourceclaimtemplates"
TEMPLATE_OF = {domain: names.claim_template_name(domain) for domain in DOMAINS}
MANAGERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER)
#: What the model writes, by plural, and the names it writes them under (claim templates are the driver's).
WRITTEN = {"pods": PODS, CD: DOMAINS, LWS: WORKLOADS[:1]}
NAMES = [(plural, name) for plural, found in WRITTEN.items() for name in found]

#: The scope stores a process keeps.
Stores = lws_state.Stores | ds_state.Stores


def version(body: Mapping[str, Any]) -> int:
    return int(body["metadata"]["resourceVersion"])


def uid(body: Mapping[str, Any]) -> str:
    return str(body["metadata"]["uid"])


def pod_body(name: str, *, scope: str, records: str | None, claims: str | None) -> Object:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.SCOPE_LABEL: scope},
            "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: records} if records else {},
        },
        "spec": {
            "resourceClaims": (
                [{"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE_OF[claims]}] if claims else []
            ),
        },
        "status": {"phase": "Running"},
    }


def domain_body(name: str, *, workload: str, manager: str, protected: bool) -> Object:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                keys.WORKLOAD_NAME_LABEL: workload,
                keys.MANAGED_BY_LABEL: manager,
                keys.OWNER_UID_LABEL: f"uid-of-{workload}",
            },
            "annotations": {},
            "finalizers": [keys.PROTECTION_FINALIZER] if protected else [],
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": TEMPLATE_OF[name]}}},
    }


def workload_body(name: str) -> Object:
    return {"metadata": {"name": name, "namespace": NS, "annotations": {}}}


def failing_or_recording(records: str | None) -> Callable[[Object], None]:
    """A pod's change: it fails ("fails"), or records another domain (None: none)."""

    def change(body: Object) -> None:
        if records == "fails":
            body["status"]["phase"] = "Failed"
        elif records is None:
            body["metadata"]["annotations"].pop(keys.COMPUTE_DOMAIN_NAME_ANNOTATION, None)
        else:
            body["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION] = records

    return change


def marked_or_relabelled(relabelled: bool) -> Callable[[Object], None]:
    """A domain's change: its condemned mark set or lifted, or its managed-by label given to the other scope."""

    def change(body: Object) -> None:
        meta = body["metadata"]
        if relabelled:
            labels = meta["labels"]
            labels[keys.MANAGED_BY_LABEL] = MANAGERS[MANAGERS.index(labels[keys.MANAGED_BY_LABEL]) - 1]
        elif meta["annotations"].pop(keys.CONDEMNED_ANNOTATION, None) is None:
            meta["annotations"][keys.CONDEMNED_ANNOTATION] = "mark"

    return change


def opted_in_or_out(body: Object) -> None:
    """A LeaderWorkerSet's change: its opt-in given or removed."""
    annotations = body["metadata"]["annotations"]
    if annotations.pop(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION, None) is None:
        annotations[keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "enabled"


@st.composite
def new_pods(draw: st.DrawFn) -> Callable[[str], Object]:
    """A pod of either scope, recording a domain, holding its claim, both or neither."""
    return functools.partial(
        pod_body,
        scope=draw(st.sampled_from((keys.SCOPE_REPLICA, keys.SCOPE_SLICE))),
        records=draw(st.sampled_from((None, *DOMAINS))),
        claims=draw(st.sampled_from((None, *DOMAINS))),
    )


@st.composite
def new_domains(draw: st.DrawFn) -> Callable[[str], Object]:
    """A domain for either workload, labelled as either scope controller's, protected by the finalizer or not."""
    return functools.partial(
        domain_body,
        workload=draw(st.sampled_from(WORKLOADS)),
        manager=draw(st.sampled_from(MANAGERS)),
        protected=draw(st.booleans()),
    )


#: By plural: a new object of that name, and a change of one.
NEW: dict[str, st.SearchStrategy[Callable[[str], Object]]] = {
    "pods": new_pods(),
    CD: new_domains(),
    LWS: st.just(workload_body),
}
CHANGES: dict[str, st.SearchStrategy[Callable[[Object], None]]] = {
    "pods": st.sampled_from(("fails", None, *DOMAINS)).map(failing_or_recording),
    CD: st.booleans().map(marked_or_relabelled),
    LWS: st.just(opted_in_or_out),
}
#: How an object that exists is written (`an_object_is_written`).
WRITES = ("changed", "deleted", "replaced")
#: The processes (their index in `StoreInterleavings.processes`); whose list a write races: nobody's, or a
#: process's.
PROCESSES = (0, 1)
RACES = (None, *PROCESSES)
#: What is written to race a list: by the plural listed, the plural written (a claim template comes and goes with
#: its domain); by the name listed, the name written.
RACED = {"pods": "pods", CD: CD, TEMPLATES: CD, LWS: LWS}
WRITER = {
    **{name: name for found in WRITTEN.values() for name in found},
    **{template: domain for domain, template in TEMPLATE_OF.items()},
}
#: The watch streams that see what the model writes, (process, plural): the slice scope watches LeaderWorkerSets
#: only as a DisaggregatedSet's children.
STREAMS = (
    *((0, plural) for plural in ("pods", CD, TEMPLATES, LWS)),
    *((1, plural) for plural in ("pods", CD, TEMPLATES)),
)
#: What a watch stream does (`a_watch_stream_moves`).
STREAM_ACTIONS = (
    "delivers one",
    "delivers all",
    "loses one",
    "loses all",
    "loses one, re-delivers",
    "loses all, re-delivers",
)
#: Every event a stream has not delivered yet.
ALL = 1000
#: How the page a sync waits for is answered (`a_list_moves`); the watch ahead twice as often as not, the usual
#: order.
LIST_ANSWERS = ("the page", "the page, the watch ahead", "the page, the watch ahead", "a 410")


# --- what a store was shown, and what it holds -----------------------------------------------------------------


@dataclasses.dataclass
class Shown:
    """What a store's watch stream delivered of one resource: the newest version of each object it showed alive
    (by an event, or kopf's re-delivery), and the objects whose deletion it showed."""

    alive: dict[str, int] = dataclasses.field(default_factory=dict)
    deleted: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(kw_only=True)
class ShownStream(Stream):
    """A watch stream that notes what it delivers."""

    shown: Shown

    def observe(self, body: Object, *, deleted: bool) -> None:
        if deleted:
            self.shown.deleted.add(uid(body))
        else:
            self.shown.alive[uid(body)] = max(self.shown.alive.get(uid(body), 0), version(body))
        super().observe(body, deleted=deleted)


@dataclasses.dataclass
class Held:
    """What a mirror passed on to its store's indexes: each object they hold, at the version last passed on; and
    every time an older version was passed on over a newer one."""

    objects: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    rollbacks: list[str] = dataclasses.field(default_factory=list)

    def around(self, apply: stores.Apply[stores.NamespacedName]) -> stores.Apply[stores.NamespacedName]:
        """`apply`, noting first what it is passed."""

        def tapped(key: str, body: Mapping[str, Any] | None) -> list[stores.NamespacedName]:
            known = self.objects.pop(key, None)
            if body is not None:
                if known is not None and version(body) < version(known):
                    name = body["metadata"]["name"]
                    self.rollbacks.append(f"{name} ({key}) from version {version(known)} to {version(body)}")
                self.objects[key] = body
            return list(apply(key, body))

        return tapped

    def newest(self) -> dict[str, Mapping[str, Any]]:
        """The newest object held under each name."""
        found: dict[str, Mapping[str, Any]] = {}
        for body in self.objects.values():
            name = body["metadata"]["name"]
            if name not in found or version(body) > version(found[name]):
                found[name] = body
        return found


@dataclasses.dataclass(kw_only=True)
class Asked:
    """A page a process's `StoreSync` asked for, answered when the model says."""

    plural: str
    #: What the pages of the list still to come hold; None for its first page (the snapshot is not taken yet).
    coming: list[Object] | None
    answer: asyncio.Future[None]


class PacedLists(MemoryClient):
    """A process's client for its lists: one object a page, each page answered only when the model says (the
    first one takes the list's snapshot then); every list that got its last page is noted in `finished`."""

    def __init__(self, api: MemoryApi) -> None:
        super().__init__(api, "lists", sender="", page_size=1)
        self.asked: Asked | None = None
        self.finished: list[tuple[str, Snapshot]] = []

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
        index, _, offset = (after or "").partition(":")
        coming = None if after is None else self.snapshots[int(index)].items[int(offset or 0) :]
        self.asked = Asked(plural=plural, coming=coming, answer=asyncio.get_running_loop().create_future())
        await self.asked.answer  # raises the error the model chose
        page = await super().alist_page(
            api_version,
            plural,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            after=after,
        )
        if page.next is None:
            self.finished.append((plural, self.snapshots[-1 if after is None else int(index)]))
        return page


@dataclasses.dataclass(kw_only=True)
class Process:
    """One controller process as far as its stores go: the scope's stores, what each mirror passed on to them,
    a watch stream per resource, and its `StoreSync` running on the model's loop."""

    name: str
    store: Stores
    held: dict[str, Held]
    shown: dict[str, Shown]
    streams: dict[str, ShownStream]
    lists: PacedLists
    sync: stores.StoreSync[stores.NamespacedName]
    #: The resources of which the process finished a list.
    listed: set[str] = dataclasses.field(default_factory=set)
    running: asyncio.Task[None] | None = None


def started(name: str, found: Stores, api: MemoryApi, loop: asyncio.AbstractEventLoop) -> Process:
    """A process with `found` as its stores: every mirror tapped, its watches reading the API's event log from its
    beginning (behind from the start), its sync running."""
    held: dict[str, Held] = {}
    for attribute, mirror in list(vars(found).items()):
        if isinstance(mirror, stores.Mirror):  # its apply, the scope's own, now reached through the tap
            tap = held[mirror.resource.plural] = Held()
            setattr(found, attribute, stores.Mirror(mirror.resource, tap.around(mirror._apply)))
    shown = {plural: Shown() for plural in held}
    lists = PacedLists(api)
    process = Process(
        name=name,
        store=found,
        held=held,
        shown=shown,
        streams={
            m.resource.plural: ShownStream(api=api, mirror=m, cursor=0, shown=shown[m.resource.plural])
            for m in found.mirrors
        },
        lists=lists,
        sync=stores.StoreSync(lists, found.mirrors, every=0.0, touched=lambda _: None),
    )
    process.running = loop.create_task(process.sync.run())
    return process


class StoreInterleavings(RuleBasedStateMachine):
    """The processes, the API server they watch and list, and the model's loop their syncs run on."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.api = MemoryApi()
        self.processes: list[Process] = []

    @initialize(data=st.data())
    def the_processes_start(self, data: st.DataObject) -> None:
        """The cluster holds every object when the processes start, so that their first lists take several pages;
        each was changed since its creation, so that those lists are ahead of the watches, which read the API's
        event log from its beginning."""
        for plural, name in NAMES:
            self.api.put(plural, data.draw(NEW[plural])(name), manager="someone")
            self.api.update(plural, NS, name, data.draw(CHANGES[plural]))
        self.processes = [
            started("replica scope", lws_state.Stores(), self.api, self.loop),
            started("slice scope", ds_state.Stores(), self.api, self.loop),
        ]
        self.settle()

    def teardown(self) -> None:
        running = [process.running for process in self.processes if process.running is not None]
        for task in running:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*running, return_exceptions=True))
        self.loop.close()

    def settle(self) -> None:
        """Let every sync run until it waits for its next page; note the lists that finished meanwhile."""

        async def turns() -> None:
            for _ in range(20):
                await asyncio.sleep(0)
                if all(p.lists.asked is not None and not p.lists.asked.answer.done() for p in self.processes):
                    return

        self.loop.run_until_complete(turns())
        for process in self.processes:
            assert process.running is not None
            if process.running.done():  # a crash is not an invariant: raised as it is
                raise process.running.exception() or AssertionError(f"the {process.name}'s store sync returned")
            for plural, _ in process.lists.finished:
                process.listed.add(plural)

    # --- writes ------------------------------------------------------------------------------------------------

    @rule(data=st.data(), what=st.sampled_from(NAMES), racing=st.sampled_from(RACES), how=st.sampled_from(WRITES))
    def an_object_is_written(self, data: st.DataObject, what: tuple[str, str], racing: int | None, how: str) -> None:
        """An object is created if there is none of its name (again, after an earlier incarnation: a new uid); else
        it is changed, deleted (a protected domain: marked for deletion, then, the next time, let go), or replaced:
        deleted (and let go) and created again under its name. It is the one named `what`; or, racing a process's
        list, one on the list's pages still to come or, unless changed, one its resource does not hold yet (a
        domain, for a list of claim templates), written between two of its pages: a list that has not begun gets
        its first page first."""
        plural, name = what
        racer = self._racing(racing, changing=how == "changed") if racing is not None else []
        if racer:
            plural, name = data.draw(st.sampled_from(racer))
        found = self.api.peek(plural, NS, name)
        if found is None:
            self.api.put(plural, data.draw(NEW[plural])(name), manager="someone")
        elif how == "changed":
            self.api.update(plural, NS, name, data.draw(CHANGES[plural]))
        else:
            deleting = bool(found["metadata"].get("deletionTimestamp"))
            if not deleting:
                self.api.delete(plural, NS, name)  # gone, or a protected domain marked for deletion
            if self._exists(plural, name) and (deleting or how == "replaced"):
                self.api.update(plural, NS, name, lambda body: body["metadata"].__setitem__("finalizers", []))
            if how == "replaced":
                self.api.put(plural, data.draw(NEW[plural])(name), manager="someone")

    def _racing(self, process: int, *, changing: bool) -> list[tuple[str, str]]:
        """The objects whose writes race the list the process is reading (its first page answered, if it has not
        begun): those on its pages still to come and, unless `changing`, those its resource does not hold (a write
        creates them); none once the list ended with its first page, or when the model writes nothing it lists."""
        lists = self.processes[process].lists
        if lists.asked is not None and lists.asked.plural in RACED and lists.asked.coming is None:
            self._answer(process, "the page")
        asked = lists.asked
        if asked is None or asked.coming is None or asked.plural not in RACED:
            return []
        plural, coming = RACED[asked.plural], {WRITER[body["metadata"]["name"]] for body in asked.coming}
        return [
            (plural, name)
            for name in WRITTEN[plural]
            if (name in coming and self._exists(plural, name)) or not (changing or self._exists(plural, name))
        ]

    def _exists(self, plural: str, name: str) -> bool:
        return self.api.peek(plural, NS, name) is not None

    # --- watch streams and lists -------------------------------------------------------------------------------

    @rule(stream=st.sampled_from(STREAMS), action=st.sampled_from(STREAM_ACTIONS))
    def a_watch_stream_moves(self, stream: tuple[int, str], action: str) -> None:
        """A process's watch stream of a resource delivers one event, or all it has not delivered yet; or it loses
        one, or all of them, on a 410, kopf re-delivering the objects that exist now, or not."""
        process, plural = stream
        moving = self.processes[process].streams[plural]
        if action.startswith("delivers"):
            moving.deliver(1 if action == "delivers one" else ALL)
        else:
            moving.drop(1 if action.startswith("loses one") else ALL, redelivered=action.endswith("re-delivers"))

    @rule(process=st.sampled_from(PROCESSES), answer=st.sampled_from(LIST_ANSWERS))
    def a_list_moves(self, process: int, answer: str) -> None:
        """The page a process's sync waits for is answered: as the watch streams stand, or once the watch of its
        resource delivered all it had (a watch streams live events while a list's pages come from its snapshot, so
        it is usually ahead); or the page fails (a 410), which aborts the list, the sync going on with the next
        resource."""
        self._answer(process, answer)

    def _answer(self, process: int, answer: str) -> None:
        """The page the process's sync waits for is answered (`LIST_ANSWERS`); the sync goes on to its next one."""
        asked, streams = self.processes[process].lists.asked, self.processes[process].streams
        assert asked is not None
        assert not asked.answer.done()
        if answer == "a 410":
            asked.answer.set_exception(kube.ApiError(status=410, reason="Expired"))
        else:
            if answer == "the page, the watch ahead":
                streams[asked.plural].deliver(ALL)
            asked.answer.set_result(None)
        self.settle()

    # --- invariants ----------------------------------------------------------------------------------------------

    @invariant()
    def no_object_version_rolls_back(self) -> None:
        for process in self.processes:
            for plural, held in process.held.items():
                assert held.rollbacks == [], f"the {process.name} rolled {plural} back: {held.rollbacks}"

    @invariant()
    def a_deletion_the_watch_showed_stays(self) -> None:
        for process in self.processes:
            for plural, held in process.held.items():
                back = sorted(held.objects.keys() & process.shown[plural].deleted)
                assert back == [], f"the {process.name} holds {plural} {back}, whose deletion its watch showed"

    @invariant()
    def a_finished_list_leaves_its_snapshot_and_what_the_watch_showed_newer(self) -> None:
        """Checked for the lists that finished in this step (each is checked once)."""
        for process in self.processes:
            for plural, snapshot in process.lists.finished:
                shown = process.shown[plural]
                listed = {uid(body): version(body) for body in snapshot.items}
                newer = {key for key, seen in shown.alive.items() if seen > snapshot.version}
                expected = {
                    key: max(listed.get(key, 0), shown.alive.get(key, 0))
                    for key in listed.keys() | newer
                    if key not in shown.deleted
                }
                holds = {key: version(body) for key, body in process.held[plural].objects.items()}
                assert holds == expected, (
                    f"the {process.name}'s list of {plural} at version {snapshot.version} left {holds}, not {expected}"
                )
            process.lists.finished.clear()

    @invariant()
    def the_barrier_opens_only_once_every_resource_was_listed(self) -> None:
        for process in self.processes:
            if process.sync.synced.is_set():
                unlisted = sorted(process.held.keys() - process.listed)
                assert unlisted == [], f"the {process.name}'s barrier opened before {unlisted} were listed"

    @invariant()
    def the_newest_incarnation_answers_for_a_name(self) -> None:
        for process in self.processes:
            domains, templates = process.held[CD].newest(), process.held[TEMPLATES].newest()
            for name in DOMAINS:
                found, newest = process.store.shared.domain(NS, name), domains.get(name)
                assert (found and found.uid) == (newest and uid(newest)), f"the {process.name}'s domain {name}"
                template = TEMPLATE_OF[name]
                exists = process.store.shared.template_exists(NS, template)
                assert exists == (template in templates), f"the {process.name}'s claim template {template}"
            if isinstance(process.store, lws_state.Stores):
                workloads = process.held[LWS].newest()
                for name in WORKLOADS:
                    workload, newest = process.store.workload(NS, name), workloads.get(name)
                    assert (workload and workload.uid) == (newest and uid(newest)), f"the {process.name}'s {name}"

    @invariant()
    def the_pods_using_a_domain_are_those_held_that_use_it(self) -> None:
        for process in self.processes:
            recording: dict[tuple[str, str], dict[str, str]] = {}
            holding: dict[tuple[str, str], dict[str, str]] = {}
            for key, pod in process.held["pods"].objects.items():
                if pod["status"]["phase"] in ("Succeeded", "Failed"):
                    continue
                name = pod["metadata"]["name"]
                if recorded := pod["metadata"]["annotations"].get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION):
                    recording.setdefault((NS, recorded), {})[key] = name
                for claim in pod["spec"]["resourceClaims"]:
                    holding.setdefault((NS, claim["resourceClaimTemplateName"]), {})[key] = name
            shared = process.store.shared
            recorders = {group: shared.domain_recorders.get(group) for group in shared.domain_recorders.groups()}
            assert recorders == recording, f"the {process.name}'s pods recording a domain"
            users = {group: shared.template_users.get(group) for group in shared.template_users.groups()}
            assert users == holding, f"the {process.name}'s pods holding a claim template"

    @invariant()
    def a_workloads_domains_are_those_its_own_controller_labelled(self) -> None:
        for process in self.processes:
            made: dict[str, set[str]] = {}
            for key, domain in process.held[CD].objects.items():
                labels = domain["metadata"]["labels"]
                if labels[keys.MANAGED_BY_LABEL] == process.store.manager:
                    made.setdefault(labels[keys.WORKLOAD_NAME_LABEL], set()).add(key)
            for workload in WORKLOADS:
                found = {facts.uid for facts in process.store.shared.domains_of(NS, workload)}
                assert found == made.get(workload, set()), f"the {process.name}'s domains of {workload}"
            assert process.store.managed_workloads() == {(NS, workload) for workload in made}


StoreInterleavings.TestCase.settings = settings.for_model(max_examples=100, steps=50)
test_store_interleavings = StoreInterleavings.TestCase
