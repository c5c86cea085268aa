"""The writing half of `fit`: for an unschedulable pod, the group it asked to keep in one clique, read from its
owners, and a Warning on its workload when the census says the group cannot fit, posted once per change."""

from __future__ import annotations

import dataclasses
import logging
from typing import Final

from mnnvl_api import events as reasons
from mnnvl_api import keys
from mnnvl_api.decisions import ownership
from mnnvl_runtime import kube

from . import census, effects, fit, telemetry

log = logging.getLogger(__name__)
#: Owners followed from a pod to the workload that carries KAI's annotations (its top owner).
OWNER_PLURALS: Final = {
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    (keys.LWS_API_VERSION, "LeaderWorkerSet"): keys.LWS_PLURAL,
}
PODCLIQUESET: Final = (keys.GROVE_API_VERSION, keys.GROVE_PODCLIQUESET_PLURAL)
DYNAMO_DEPLOYMENT: Final = (keys.DYNAMO_API_VERSION, keys.DYNAMO_DEPLOYMENT_PLURAL)


#: (namespace, *census.group_key, the group's members when it is part of what its key holds)
FitKey = tuple[object, ...]


@dataclasses.dataclass
class PostedVerdict:
    news: tuple[object, ...]
    pods: set[tuple[str, str]]


@dataclasses.dataclass
class FitWarner(effects.Effects):
    #: Group → the cannot-fit verdict last posted and the pods it was about, so each change is posted once while
    #: the group has unschedulable pods (forgotten once it has none: a later episode is posted again). A workload
    #: may hold several groups (an LWS's replicas, a set's slices, a PodCliqueSet's gangs), each judged on its own.
    posted: dict[FitKey, PostedVerdict] = dataclasses.field(default_factory=dict)
    #: Objects the fit checks read (owners, gangs), kept until the next resync: many pending pods of one workload
    #: cost one read per resync, not one each.
    reads: dict[tuple[str, str, str, str], kube.Object | None] = dataclasses.field(default_factory=dict)

    def on_resync(self) -> None:
        """The reads are made afresh, and the Warnings of groups none of whose pods is unschedulable any more are
        forgotten, so the next time one cannot fit is posted again."""
        self.reads.clear()
        for group, posted in list(self.posted.items()):
            if not any(self.stores.unschedulable_pod(*pod) is not None for pod in posted.pods):
                del self.posted[group]

    async def check(self, namespace: str, pod: str) -> None:
        facts = self.stores.unschedulable_pod(namespace, pod)
        if facts is None or facts.topology_missing:
            return
        group = await self.group_of(facts)
        key: FitKey = (namespace, *census.group_key(facts))
        if group is None:  # it no longer asks for one clique: asking again is news
            for found in [found for found in self.posted if found[: len(key)] == key]:
                del self.posted[found]
            return
        key = (*key, group.members)
        placed = self.stores.placed_cliques(facts, group.members)
        verdict = fit.cannot_fit(group.needed, self.stores.current_census(), placed)
        if verdict is None:
            self.posted.pop(key, None)
            return
        posted = self.posted.setdefault(key, PostedVerdict(news=(), pods=set()))
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
