"""The effects of mnnvl-topology's decisions: writes under its field manager, events, metrics. Only the Lease
holder runs these (they are queue passes)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Final

from mnnvl_api import events as reasons
from mnnvl_api import keys
from mnnvl_api.decisions import ownership
from mnnvl_api.models import configuration
from mnnvl_runtime import controller, kube, posting, preflight

from . import census, fit, state, telemetry, topologies

log = logging.getLogger(__name__)
#: How many things already said (foreign objects, KAI-only or alias reports) a process remembers; the oldest is said
#: again if it comes up again.
SAID_REMEMBERED = 4096
CRD_API: Final = "apiextensions.k8s.io/v1"
CENSUS_CONFIGMAP: Final = "mnnvl-clique-census"
CENSUS_KEY: Final = "census.json"
#: Owners followed from a pod to the workload that carries KAI's annotations (its top owner).
OWNER_PLURALS: Final = {
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    (keys.LWS_API_VERSION, "LeaderWorkerSet"): keys.LWS_PLURAL,
}
TOPOLOGY: Final = (keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL)
BINDING: Final = (keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL)
PODCLIQUESET: Final = (keys.GROVE_API_VERSION, keys.GROVE_PODCLIQUESET_PLURAL)
DYNAMO_DEPLOYMENT: Final = (keys.DYNAMO_API_VERSION, keys.DYNAMO_DEPLOYMENT_PLURAL)


#: (namespace, *census.group_key, the group's members when it is part of what its key holds)
FitKey = tuple[object, ...]


@dataclasses.dataclass
class PostedVerdict:
    news: tuple[object, ...]
    pods: set[tuple[str, str]]


class IncompletePassError(RuntimeError):
    """Some topology objects could not be written (each reported); the others were, and the pass is retried."""


@dataclasses.dataclass
class Executor:
    context: controller.Context
    stores: state.Stores
    #: (kind, name, uid, owner) of foreign objects already warned about: one Warning per object incarnation and
    #: owner (an object that changes hands is news).
    warned_foreign: posting.Once = dataclasses.field(default_factory=lambda: posting.Once(SAID_REMEMBERED))
    #: Topologies already reported as KAI-only while Grove is not served.
    reported_kai_only: posting.Once = dataclasses.field(default_factory=lambda: posting.Once(SAID_REMEMBERED))
    #: Topologies already reported as written without their aliases while the served schema has none.
    reported_aliases_ignored: posting.Once = dataclasses.field(default_factory=lambda: posting.Once(SAID_REMEMBERED))
    #: Optional APIs not served at start-up, hence never watched by this process; and those reported since.
    unwatched: frozenset[topologies.OptionalApi] = frozenset()
    reported_served_late: set[topologies.OptionalApi] = dataclasses.field(default_factory=set)
    #: Group → the cannot-fit verdict last posted and the pods it was about, so each change is posted once while
    #: the group has unschedulable pods (forgotten once it has none: a later episode is posted again). A workload
    #: may hold several groups (an LWS's replicas, a set's slices, a PodCliqueSet's gangs), each judged on its own.
    fit_warnings: dict[FitKey, PostedVerdict] = dataclasses.field(default_factory=dict)
    #: Objects the fit checks read (owners, gangs), kept until the next resync: many pending pods of one workload
    #: cost one read per resync, not one each.
    reads: dict[tuple[str, str, str, str], kube.Object | None] = dataclasses.field(default_factory=dict)
    census_written: str | None = None
    #: Cliques the gauges have a value for.
    published_cliques: set[str] = dataclasses.field(default_factory=set)

    @property
    def client(self) -> kube.Kube:
        return self.context.client

    @property
    def configured(self) -> list[configuration.TopologySettings]:
        return self.context.configuration.topologies

    @property
    def installation(self) -> str:
        return self.context.configuration.installation_of(self.context.process.namespace)

    async def event(self, involved: kube.Object, reason: str, message: str, *, warning: bool = False) -> None:
        component = self.context.identity.reporting_component
        await posting.post(
            self.client,
            posting.event_for(involved, reason=reason, message=message, warning=warning, component=component),
        )

    # --- topologies and bindings ---------------------------------------------------------------------------

    async def sync_topologies(self) -> None:
        """Every configured entry and every removal on its own: one the API server refuses (Grove's webhook
        rejecting a binding, say) is reported and the others are still done; the pass then fails so the queue
        retries it with back-off."""
        crd = await self.client.aget(CRD_API, "customresourcedefinitions", keys.KAI_TOPOLOGY_CRD)
        aliases = topologies.schema_has_aliases(crd)
        if aliases:
            self.reported_aliases_ignored.clear()
        grove = await self.served(topologies.GROVE_BINDINGS)
        telemetry.KAI_ONLY.set(0 if grove else sum(1 for entry in self.configured if entry.grove_binding.enabled))
        if grove:
            self.reported_kai_only.clear()
        await self.report_served_late(grove=grove)
        foreign = {keys.KAI_TOPOLOGY_KIND: 0, keys.GROVE_BINDING_KIND: 0}
        refused = [
            entry.name
            for entry in self.configured
            if not await self.sync_entry(entry, aliases=aliases, grove=grove, foreign=foreign)
        ]
        for kind, count in foreign.items():
            telemetry.FOREIGN.labels(kind=kind).set(count)
        refused += await self.remove_obsolete(grove=grove)
        if refused:
            raise IncompletePassError(f"the API server refused writes for: {', '.join(refused)}")

    async def sync_entry(
        self, entry: configuration.TopologySettings, *, aliases: bool, grove: bool, foreign: dict[str, int]
    ) -> bool:
        """One entry's Topology, then its binding; False when the API server refused a call (reported)."""
        # What a refusal is reported on: the object of the step under way, as found (None: it does not exist).
        concerned: tuple[str, str, kube.Object | None] = (keys.KAI_TOPOLOGY_KIND, entry.name, None)
        try:
            desired = topologies.desired_topology(entry, aliases=aliases, installation=self.installation)
            found = await self.client.aget(*TOPOLOGY, entry.name)
            concerned = (keys.KAI_TOPOLOGY_KIND, entry.name, found)
            action = topologies.decide_topology(desired, found, aliases=aliases, installation=self.installation)
            if action is topologies.Action.FOREIGN:
                assert found is not None
                foreign[keys.KAI_TOPOLOGY_KIND] += 1
                await self.warn_foreign(found, f"no {keys.GROVE_BINDING_KIND} is created for it")
                return True  # the binding would bind Grove to a Topology we do not keep in shape
            topology = await self.write_topology(action, desired, found)
            await self.report_aliases_ignored(entry, topology, aliases=aliases)
            binding = topologies.desired_binding(entry, installation=self.installation)
            if binding is None:
                return True
            if not grove:
                await self.report_kai_only(entry, topology)
                return True
            concerned = (keys.GROVE_BINDING_KIND, entry.binding_name, None)
            found_binding = await self.client.aget(*BINDING, entry.binding_name)
            concerned = (keys.GROVE_BINDING_KIND, entry.binding_name, found_binding)
            binding_action = topologies.decide_binding(binding, found_binding, installation=self.installation)
            if binding_action is topologies.Action.FOREIGN:
                assert found_binding is not None
                foreign[keys.GROVE_BINDING_KIND] += 1
                await self.warn_foreign(found_binding, "it is left as it is")
                return True
            await self.write_binding(binding_action, binding, found_binding)
        except kube.ApiError as error:
            await self.report_refusal(*concerned, error)
            return False
        return True

    async def report_refusal(self, kind: str, name: str, found: kube.Object | None, error: kube.ApiError) -> None:
        """A Warning with the API server's message, on the object concerned or, when it does not exist, on the
        census ConfigMap (an Event needs an object to be about, and that one is in our namespace). A conflict is no
        refusal: the object changed (or appeared) since it was read, and the retried pass decides on it afresh."""
        if error.status == 409:
            log.info("topology object changed since read, retried", extra={"kind": kind, "object": name})
            return
        message = topologies.refusal_message(kind, name, status=error.status, body=error.body)
        telemetry.REFUSED.labels(kind=kind).inc()
        log.warning("topology write refused", extra={"kind": kind, "object": name, "reason": message})
        await self.event(found or self.census_reference(), reasons.TOPOLOGY_WRITE_REFUSED_REASON, message, warning=True)

    async def served(self, api: topologies.OptionalApi) -> bool:
        """Whether discovery lists `api` now."""
        return await preflight.is_served_now(self.client, api.api_version, api.plural)

    async def report_served_late(self, *, grove: bool) -> None:
        """Say once per process, for each optional API served since start-up, that its watch needs a restart.
        The Warning is about this controller, so it goes on the census ConfigMap in its namespace (an Event needs
        an object to be about; that one need not exist), as a refusal of a missing object does."""
        served = [
            api
            for api in self.unwatched - self.reported_served_late
            if (grove if api is topologies.GROVE_BINDINGS else await self.served(api))
        ]
        for api in topologies.served_since_start_up(self.unwatched, served, self.reported_served_late):
            self.reported_served_late.add(api)
            log.warning("api served after start-up, not watched until a restart", extra={"api": api.name})
            message = topologies.restart_message(api, namespace=self.context.process.namespace)
            await self.event(self.census_reference(), reasons.WATCH_NEEDS_RESTART_REASON, message, warning=True)

    async def write_topology(
        self, action: topologies.Action, desired: kube.Object, found: kube.Object | None
    ) -> kube.Object:
        if action is topologies.Action.KEEP:
            assert found is not None
            return found
        if action is topologies.Action.ADOPT:
            assert found is not None
            written = await self.client.aapply(topologies.conditional(desired, found), keys.KAI_TOPOLOGY_PLURAL)
            await self.wrote(written, "adopt", reasons.TOPOLOGY_ADOPTED_REASON, self.adopted())
            return written
        if action is topologies.Action.PATCH:
            assert found is not None
            written = await self.client.aapply(topologies.conditional(desired, found), keys.KAI_TOPOLOGY_PLURAL)
            await self.wrote(
                written, "patch", reasons.TOPOLOGY_ALIASES_UPDATED_REASON, "level aliases updated in place"
            )
            return written
        if action is topologies.Action.RECREATE:
            assert found is not None
            # KAI refuses this change in place; pending workloads briefly see "topology does not exist".
            await self.delete_as_read(TOPOLOGY, found)
            written = await self.client.acreate(desired, keys.KAI_TOPOLOGY_PLURAL)
            await self.wrote(written, "recreate", reasons.TOPOLOGY_RECREATED_REASON, "recreated with new levels")
            return written
        written = await self.client.acreate(desired, keys.KAI_TOPOLOGY_PLURAL)
        await self.wrote(written, "create", reasons.TOPOLOGY_CREATED_REASON, "created")
        return written

    async def write_binding(self, action: topologies.Action, desired: kube.Object, found: kube.Object | None) -> None:
        if action is topologies.Action.CREATE:
            written = await self.client.acreate(desired, keys.GROVE_BINDING_PLURAL)
            await self.wrote(written, "create", reasons.BINDING_CREATED_REASON, "created")
        elif action in (topologies.Action.PATCH, topologies.Action.ADOPT):
            assert found is not None
            written = await self.client.aapply(topologies.conditional(desired, found), keys.GROVE_BINDING_PLURAL)
            if action is topologies.Action.ADOPT:
                await self.wrote(written, "adopt", reasons.BINDING_ADOPTED_REASON, self.adopted())
            else:
                await self.wrote(written, "patch", reasons.BINDING_UPDATED_REASON, "spec restored from configuration")

    def adopted(self) -> str:
        return f"adopted for the installation {self.installation} (an earlier version's, which recorded none)"

    async def delete_as_read(self, resource: tuple[str, str], found: kube.Object) -> bool:
        """Delete `found` only as it was read (uid and resourceVersion preconditions): one replaced, relabelled or
        handed to another installation meanwhile is left (409) for the next pass to decide on."""
        meta = found["metadata"]
        path = kube.path_of(*resource, name=meta["name"])
        return await self.client.adelete(path, uid=meta["uid"], resource_version=meta["resourceVersion"])

    async def wrote(self, written: kube.Object, action: str, reason: str, what: str) -> None:
        kind, name = written["kind"], written["metadata"]["name"]
        telemetry.WRITES.labels(kind=kind, action=action).inc()
        log.info("topology object written", extra={"kind": kind, "object": name, "result": action})
        await self.event(written, reason, f"{kind} {name} {what} by {keys.TOPOLOGY_CONTROLLER}")

    async def warn_foreign(self, found: kube.Object, consequence: str) -> None:
        meta = found["metadata"]
        owner = topologies.foreign_owner(found, installation=self.installation)
        seen = (found["kind"], meta["name"], meta["uid"], owner)
        if not self.warned_foreign.first(seen):
            return
        log.warning("foreign topology object left alone", extra={"kind": seen[0], "object": seen[1], "reason": owner})
        await self.event(
            found,
            reasons.UNEXPECTED_TOPOLOGY_OWNER_REASON,
            f"{seen[0]} {seen[1]} exists and is {owner}: {keys.TOPOLOGY_CONTROLLER} leaves it alone and {consequence}; "
            "rename the topology in the configuration, or delete this object to let it be created",
            warning=True,
        )

    async def report_kai_only(self, entry: configuration.TopologySettings, topology: kube.Object) -> None:
        if not self.reported_kai_only.first(entry.name):
            return
        log.info("grove not served, kai only", extra={"topology": entry.name, "binding": entry.binding_name})
        await self.event(
            topology,
            reasons.KAI_ONLY_REASON,
            f"Grove's {keys.GROVE_BINDING_PLURAL}.{keys.GROVE_GROUP} API is not served: topology {entry.name} works "
            f"with KAI Scheduler only and {keys.GROVE_BINDING_KIND} {entry.binding_name} is created once Grove is "
            "installed",
        )

    async def report_aliases_ignored(
        self, entry: configuration.TopologySettings, topology: kube.Object, *, aliases: bool
    ) -> None:
        dropped = topologies.dropped_aliases(entry, aliases=aliases)
        if not dropped or not self.reported_aliases_ignored.first(entry.name):
            return
        log.warning("topology aliases ignored", extra={"topology": entry.name, "aliases": dropped})
        message = topologies.aliases_ignored_message(entry.name, dropped)
        await self.event(topology, reasons.TOPOLOGY_ALIASES_IGNORED_REASON, message, warning=True)

    async def remove_obsolete(self, *, grove: bool) -> list[str]:
        """Delete this installation's objects that the configuration no longer names (never anyone else's, nor an
        earlier version's); the names of those whose deletion the API server refused. Candidates are the objects
        labelled ours; each is decided on a fresh read."""
        wanted = [entry.name for entry in self.configured]
        refused = [
            name
            for name in topologies.obsolete(self.stores.labelled_topologies(), wanted)
            if not await self.delete_ours(
                TOPOLOGY, keys.KAI_TOPOLOGY_KIND, name, wanted, reasons.TOPOLOGY_DELETED_REASON
            )
        ]
        if not grove:
            return refused
        listed = await self.client.alist_page(
            *BINDING, label_selector=f"{keys.MANAGED_BY_LABEL}={keys.TOPOLOGY_CONTROLLER}"
        )
        bindings = [entry.binding_name for entry in self.configured if entry.grove_binding.enabled]
        labelled = [item["metadata"]["name"] for item in listed.items]
        return refused + [
            name
            for name in topologies.obsolete(labelled, bindings)
            if not await self.delete_ours(
                BINDING, keys.GROVE_BINDING_KIND, name, bindings, reasons.BINDING_DELETED_REASON
            )
        ]

    async def delete_ours(
        self, resource: tuple[str, str], kind: str, name: str, wanted: list[str], reason: str
    ) -> bool:
        """False when the API server refused a call (reported)."""
        found: kube.Object | None = None
        try:
            found = await self.client.aget(*resource, name)
            if found is None or not topologies.removable(found, wanted=wanted, installation=self.installation):
                return True
            if await self.delete_as_read(resource, found):
                telemetry.WRITES.labels(kind=kind, action="delete").inc()
                log.info("topology object deleted", extra={"kind": kind, "object": name, "result": "delete"})
                await self.event(found, reason, f"{kind} {name} deleted: it is no longer in the configuration")
        except kube.ApiError as error:
            await self.report_refusal(kind, name, found, error)
            return False
        return True

    # --- the census -------------------------------------------------------------------------------------------

    async def publish_census(self) -> None:
        found = self.stores.current_census()
        # New values first, then only the vanished cliques removed: a scrape never sees a clique missing.
        for count in found.cliques:
            telemetry.CLIQUE_NODES.labels(clique=count.clique).set(count.nodes)
            telemetry.CLIQUE_GPUS.labels(clique=count.clique).set(count.gpus)
            telemetry.CLIQUE_CHANNEL_NODES.labels(clique=count.clique).set(count.channel_nodes)
            telemetry.CLIQUE_FREE_NODES.labels(clique=count.clique).set(count.free_nodes)
        cliques = {count.clique for count in found.cliques}
        for clique in topologies.obsolete(self.published_cliques, cliques):
            for gauge in telemetry.CLIQUE_GAUGES:
                gauge.remove(clique)
        self.published_cliques = cliques
        telemetry.UNLABELLED_GPU_NODES.set(len(found.unlabelled_gpu_nodes))
        document = found.to_json()
        if document == self.census_written:
            return
        configmap = self.census_reference()
        configmap["metadata"]["labels"] = {keys.MANAGED_BY_LABEL: keys.TOPOLOGY_CONTROLLER}
        configmap["data"] = {CENSUS_KEY: document}
        await self.client.aapply(configmap, "configmaps")
        self.census_written = document

    def forget_census(self) -> None:
        """The ConfigMap may have been deleted or edited since we wrote it, so the next census pass applies it
        again (an apply that changes nothing is cheap)."""
        self.census_written = None

    def on_resync(self) -> None:
        """Called after every periodic resync: the census is applied again, and the Warnings of workloads none of
        whose pods is unschedulable any more are forgotten, so the next time one cannot fit is posted again."""
        self.forget_census()
        self.reads.clear()
        for group, posted in list(self.fit_warnings.items()):
            if not any(self.stores.unschedulable_pod(*pod) is not None for pod in posted.pods):
                del self.fit_warnings[group]

    def on_lease_change(self, leading: bool) -> None:
        if leading:  # another replica wrote the census and may have posted Warnings while it held the Lease
            self.forget_census()
            self.fit_warnings.clear()

    def census_reference(self) -> kube.Object:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CENSUS_CONFIGMAP, "namespace": self.context.process.namespace},
        }

    # --- groups that cannot fit ------------------------------------------------------------------------------------

    async def check_fit(self, namespace: str, pod: str) -> None:
        facts = self.stores.unschedulable_pod(namespace, pod)
        if facts is None or facts.topology_missing:
            return
        group = await self.group_of(facts)
        key: FitKey = (namespace, *census.group_key(facts))
        if group is None:  # it no longer asks for one clique: asking again is news
            for found in [found for found in self.fit_warnings if found[: len(key)] == key]:
                del self.fit_warnings[found]
            return
        key = (*key, group.members)
        placed = self.stores.placed_cliques(facts, group.members)
        verdict = fit.cannot_fit(group.needed, self.stores.current_census(), placed)
        if verdict is None:
            self.fit_warnings.pop(key, None)
            return
        posted = self.fit_warnings.setdefault(key, PostedVerdict(news=(), pods=set()))
        posted.pods.add((namespace, pod))
        if posted.news == verdict.news:
            return
        posted.news = verdict.news
        workload = group.workload
        telemetry.CANNOT_FIT.inc()
        log.warning(
            "group cannot fit in one clique",
            extra={"kind": workload["kind"], "namespace": namespace, "workload": workload["metadata"]["name"]},
        )
        await self.event(
            dict(workload),
            reasons.CLIQUE_TOO_SMALL_REASON,
            f"{verdict.message}; pod {pod} is unschedulable: free nodes in one clique, or make the group smaller",
            warning=True,
        )

    async def read(self, api_version: str, plural: str, name: str, namespace: str) -> kube.Object | None:
        """An object a fit check needs, read once per resync (see `reads`)."""
        key = (api_version, plural, namespace, name)
        if key not in self.reads:
            self.reads[key] = await self.client.aget(api_version, plural, name, namespace=namespace)
        return self.reads[key]

    async def group_of(self, facts: census.PodUsage) -> fit.Group | None:
        """The group an unschedulable pod belongs to, if it asked for one clique (a slice, an opted-in LWS, a Grove
        gang constrained at the clique level, or a KAI required placement at the clique level)."""
        if facts.slice is not None:
            ds = await self.read(keys.DS_API_VERSION, keys.DS_PLURAL, facts.slice[0], facts.namespace)
            size = self.stores.slice_size(facts.namespace, *facts.slice)
            return None if ds is None or size == 0 else fit.Group(workload=ds, needed=size)
        levels = fit.clique_levels(self.configured)
        if facts.gang is not None:
            return await self.gang_of(facts, levels)
        if facts.lws is not None:
            top = await self.read(keys.LWS_API_VERSION, keys.LWS_PLURAL, facts.lws, facts.namespace)
        else:
            top = await self.top_owner(facts)
        if top is None:
            return None
        needed = fit.opted_in_group_size(top, clique_levels=levels)
        return None if needed is None else fit.Group(workload=top, needed=needed)

    async def gang_of(self, facts: census.PodUsage, levels: frozenset[str]) -> fit.Group | None:
        """A Grove pod's group, from the PodGang Grove hands KAI; its Warning goes on the PodCliqueSet that made
        the gang or, when Dynamo made that set, on its DynamoGraphDeployment (KAI's top owner, whose annotations it
        reads when the gang has no constraint of its own)."""
        assert facts.gang is not None
        gang = await self.read(keys.GROVE_SCHEDULER_API_VERSION, keys.GROVE_PODGANG_PLURAL, facts.gang, facts.namespace)
        if gang is None:
            return None
        workload: kube.Object = gang
        set_name = _made_by(gang, keys.GROVE_API_VERSION, keys.GROVE_PODCLIQUESET_KIND)
        podcliqueset = None if set_name is None else await self.read(*PODCLIQUESET, set_name, facts.namespace)
        if podcliqueset is not None:
            made_by = _made_by(podcliqueset, keys.DYNAMO_API_VERSION, keys.DYNAMO_DEPLOYMENT_KIND)
            deployment = None if made_by is None else await self.read(*DYNAMO_DEPLOYMENT, made_by, facts.namespace)
            workload = deployment or podcliqueset
        placement = _annotation(gang, keys.KAI_REQUIRED_PLACEMENT_ANNOTATION) or _annotation(
            workload, keys.KAI_REQUIRED_PLACEMENT_ANNOTATION
        )
        group = fit.gang_group(gang, facts.name, clique_levels=levels, owner_placement=placement)
        return None if group is None else dataclasses.replace(group, workload=workload)

    async def top_owner(self, facts: census.PodUsage) -> kube.Object | None:
        """The end of the pod's chain of controlling owners, whose annotations KAI reads; None when the chain leaves
        the kinds known here (a CronJob's or a JobSet's Job, an Argo Rollout's ReplicaSet: KAI reads their top
        owner, which is not looked up) or an owner is gone."""
        top: kube.Object | None = None
        owner = facts.owner
        for _ in range(len(OWNER_PLURALS)):
            if owner is None:
                return top
            plural = OWNER_PLURALS.get((owner[0], owner[1]))
            if plural is None:
                return None
            top = await self.read(owner[0], plural, owner[2], facts.namespace)
            if top is None:
                return None
            owner = ownership.controller_owner(top["metadata"])
        return None


def _made_by(body: kube.Object, api_version: str, kind: str) -> str | None:
    """The name of `body`'s controlling owner when it is of that kind."""
    owner = ownership.controller_owner(body["metadata"])
    return owner[2] if owner is not None and owner[:2] == (api_version, kind) else None


def _annotation(body: kube.Object, key: str) -> str | None:
    found = (body["metadata"].get("annotations") or {}).get(key)
    return None if found is None else str(found)
