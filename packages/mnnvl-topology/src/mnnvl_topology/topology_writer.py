"""The writing half of `topologies`: KAI Topologies and Grove bindings applied, adopted, recreated and removed
under mnnvl-topology's field manager, with their Events and metrics; foreign objects warned about once."""

from __future__ import annotations

import dataclasses
import logging
from typing import Final

from mnnvl_api import events as reasons
from mnnvl_api import keys
from mnnvl_api.models import configuration
from mnnvl_runtime import kube, posting, preflight

from . import effects, telemetry, topologies

log = logging.getLogger(__name__)
#: How many things already said (foreign objects, KAI-only or alias reports) a process remembers; the oldest is said
#: again if it comes up again.
SAID_REMEMBERED = 4096
CRD_API: Final = "apiextensions.k8s.io/v1"
TOPOLOGY: Final = (keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL)
BINDING: Final = (keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL)


class IncompletePassError(RuntimeError):
    """Some topology objects could not be written (each reported); the others were, and the pass is retried."""


def _said() -> posting.Once:
    return posting.Once(SAID_REMEMBERED)


@dataclasses.dataclass
class TopologyWriter(effects.Effects):
    #: (kind, name, uid, owner) of foreign objects already warned about: one Warning per object incarnation and
    #: owner (an object that changes hands is news).
    warned_foreign: posting.Once = dataclasses.field(default_factory=_said)
    #: Topologies already reported as KAI-only while Grove is not served.
    reported_kai_only: posting.Once = dataclasses.field(default_factory=_said)
    #: Topologies already reported as written without their aliases while the served schema has none.
    reported_aliases_ignored: posting.Once = dataclasses.field(default_factory=_said)
    #: Optional APIs not served at start-up, hence never watched by this process; and those reported since.
    unwatched: frozenset[topologies.OptionalApi] = frozenset()
    reported_served_late: posting.Once = dataclasses.field(default_factory=_said)

    async def sync(self) -> None:
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
        reported = [api for api in self.unwatched if api in self.reported_served_late]
        served = [
            api
            for api in self.unwatched
            if api not in reported and (grove if api is topologies.GROVE_BINDINGS else await self.served(api))
        ]
        for api in topologies.served_since_start_up(self.unwatched, served, reported):
            self.reported_served_late.first(api)
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
