"""The chaos run's workload churn: what users do next, chosen from a seed over the workloads there are (pure), and
doing it on the API as a user would.

The workloads are read back from the API before every choice (each carries its shape in annotations of ours), so
a call whose outcome was lost in an outage cannot make the churn's picture of the cluster drift from the cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import time
from collections.abc import Sequence
from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import workloads

#: Every churned workload carries this label (the end of the run finds them by it) and its shape as annotations.
CHURN_LABEL = "mnnvl-testbed/chaos"
SHAPE_ANNOTATION = "mnnvl-testbed/shape"
#: Set on workloads that were never opted in: requests about them must never meet a webhook of ours.
PLAIN_ANNOTATION = "mnnvl-testbed/never-opted-in"
REVISION_ANNOTATION = "mnnvl-testbed/revision"
#: The stems of the run's namespaces (each run adds its id).
NAMESPACES = ("chaos-a", "chaos-b", "chaos-c")
#: Pods holding a node's channel at once, of the testbed's 24 nodes: the rest is room for rolls and pods leaving,
#: so that whatever the churn leaves behind fits and converges.
CAPACITY = 14
LWS_SHAPES = ("gpu-leader", "cpu-leader", "gpu-sidecar")
DS_SHAPES = ("slice", "slice-and-replica-role")
#: GPU pods per slice: prefill (a group of 2), decode (1) and the opted-out encoder (1).
PODS_PER_SLICE = 4
ACTIONS = (
    "create",
    "scale",
    "roll",
    "restart-group",
    "delete-worker",
    "delete",
    "recreate",
    "toggle-opt-in",
    "change-slices",
)
LWS = "LeaderWorkerSet"
DS = keys.DS_KIND


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    kind: str
    namespace: str
    name: str
    shape: str
    opted_in: bool
    never_opted_in: bool
    #: LeaderWorkerSet replicas, DisaggregatedSet slices.
    replicas: int
    #: LeaderWorkerSet group size (0 for a DisaggregatedSet).
    size: int
    revision: int = 0

    @property
    def channel_pods(self) -> int:
        """Pods of it that hold a node's channel (every GPU pod, opted in or not, is given a whole node here)."""
        if self.kind == DS:
            return self.replicas * PODS_PER_SLICE
        return self.replicas * (self.size - 1 if self.shape == "cpu-leader" else self.size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Operation:
    action: str
    #: The workload acted on as it is before, and as it should be after (None: deleted, or not there before).
    before: Workload | None
    after: Workload | None
    #: For pod deletions: the group index; for creations: whether the API server picks the name.
    group: int = 0
    generated: bool = False

    @property
    def plain(self) -> bool:
        return all(w is None or w.never_opted_in for w in (self.before, self.after))


def next_operation(rng: random.Random, world: Sequence[Workload], serial: int, namespaces: Sequence[str]) -> Operation:
    """What a user does next to `world` (the churn's workloads as the API has them); `serial` names new ones, made
    in one of `namespaces`."""
    used = sum(w.channel_pods for w in world)
    choices = [action for action in ACTIONS if _possible(action, world, used)]
    weights = [
        6 if a == "create" and len(world) < 3 else {"create": 3, "delete": 1, "recreate": 1}.get(a, 2) for a in choices
    ]
    action = rng.choices(choices, weights)[0]
    if action == "create":
        return Operation(
            action=action,
            before=None,
            after=_new(rng, serial, CAPACITY - used, namespaces),
            generated=rng.random() < 0.25,
        )
    candidates = [w for w in world if _applies(action, w, CAPACITY - used)]
    target = rng.choice(candidates)
    group = rng.randrange(target.replicas)
    if action in ("restart-group", "delete-worker"):
        return Operation(action=action, before=target, after=target, group=group)
    if action == "delete":
        return Operation(action=action, before=target, after=None)
    if action == "recreate":
        return Operation(action=action, before=target, after=dataclasses.replace(target, revision=0))
    if action == "roll":
        return Operation(action=action, before=target, after=dataclasses.replace(target, revision=target.revision + 1))
    if action == "toggle-opt-in":
        flipped = dataclasses.replace(target, opted_in=not target.opted_in, never_opted_in=False)
        return Operation(action=action, before=target, after=flipped)
    room = CAPACITY - used
    grow = rng.random() < 0.5 and _fits(dataclasses.replace(target, replicas=target.replicas + 1), target, room)
    replicas = target.replicas + 1 if grow or target.replicas == 1 else target.replicas - 1
    return Operation(action=action, before=target, after=dataclasses.replace(target, replicas=replicas))


def _possible(action: str, world: Sequence[Workload], used: int) -> bool:
    if action == "create":
        return CAPACITY - used >= PODS_PER_SLICE or (CAPACITY - used >= 1 and len(world) < 2)
    return any(_applies(action, w, CAPACITY - used) for w in world)


def _applies(action: str, workload: Workload, room: int) -> bool:
    if action == "scale":
        return workload.kind == LWS and (
            workload.replicas > 1 or _fits(dataclasses.replace(workload, replicas=2), workload, room)
        )
    if action == "change-slices":
        return workload.kind == DS and (
            workload.replicas > 1 or _fits(dataclasses.replace(workload, replicas=2), workload, room)
        )
    if action == "delete-worker":
        return workload.kind == LWS and workload.size > 1
    return action != "create"


def _fits(after: Workload, before: Workload, room: int) -> bool:
    return after.channel_pods - before.channel_pods <= room


def _new(rng: random.Random, serial: int, room: int, namespaces: Sequence[str]) -> Workload:
    opted_in = rng.random() < 0.7
    if room >= PODS_PER_SLICE and rng.random() < 0.35:
        kind, shape, replicas, size = DS, rng.choice(DS_SHAPES), 1, 0
    else:
        kind, shape = LWS, rng.choice(LWS_SHAPES)
        size = rng.randint(1, 3) if shape != "cpu-leader" else rng.randint(2, 3)
        replicas = 1
        size = min(size, max(room, 1 if shape != "cpu-leader" else 2))
    prefix = ("lws" if kind == LWS else "ds") if opted_in else ("plain-lws" if kind == LWS else "plain-ds")
    return Workload(
        kind=kind,
        namespace=rng.choice(namespaces),
        name=f"{prefix}-{serial}",
        shape=shape,
        opted_in=opted_in,
        never_opted_in=not opted_in,
        replicas=replicas,
        size=size,
    )


# --- the imperative shell --------------------------------------------------------------------------------------


def manifest(workload: Workload, run: str) -> dict[str, Any]:
    """The workload as a user would write it, labelled with the churn's `run` and its shape in annotations."""
    if workload.kind == DS:
        encoder_annotations = {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "disabled"}
        if workload.shape == "slice-and-replica-role":
            encoder_annotations[keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] = "enabled"
        image = f"nvcr.io/nvidia/vllm:{workload.revision}"
        built = workloads.ds_manifest(
            workload.name,
            slices=workload.replicas,
            roles=[
                workloads.role_manifest("prefill", size=2, image=image),
                workloads.role_manifest("decode", image=image),
                workloads.role_manifest("encoder", image=image, annotations=encoder_annotations),
            ],
            opt_in="enabled" if workload.opted_in else None,
            placement=False,
        )
    else:
        built = _lws(workload)
    meta = built["metadata"]
    meta["namespace"] = workload.namespace
    meta["labels"] = {CHURN_LABEL: run}
    meta["annotations"][SHAPE_ANNOTATION] = workload.shape
    if workload.never_opted_in:
        meta["annotations"][PLAIN_ANNOTATION] = "true"
    return built


def _lws(workload: Workload) -> dict[str, Any]:
    revision = {REVISION_ANNOTATION: str(workload.revision)}
    opt_in = "enabled" if workload.opted_in else None
    if workload.shape == "cpu-leader":
        return workloads.lws_manifest(
            workload.name,
            replicas=workload.replicas,
            size=workload.size,
            opt_in=opt_in,
            leader_containers=[workloads.ROUTING_PROXY],
            worker_annotations=revision,
        )
    built = workloads.lws_manifest(
        workload.name, replicas=workload.replicas, size=workload.size, opt_in=opt_in, worker_annotations=revision
    )
    if workload.shape == "gpu-sidecar":
        worker = built["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        sidecar = copy.deepcopy(workloads.VLLM) | {"name": "nccl-sidecar", "restartPolicy": "Always"}
        worker["initContainers"] = [sidecar]
        worker["containers"] = [copy.deepcopy(workloads.ROUTING_PROXY)]
    return built


def observed(obj: kube.Object) -> Workload | None:
    """A churned workload as the API has it; None while it is being deleted."""
    meta = obj["metadata"]
    if meta.get("deletionTimestamp"):
        return None
    annotations = meta.get("annotations") or {}
    spec = obj["spec"]
    if obj["kind"] == DS:
        opted_in = annotations.get(keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION) == "enabled"
        image = spec["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"]
        replicas, size, revision = int(spec.get("slices", 1)), 0, int(image.rsplit(":", 1)[1])
    else:
        opted_in = annotations.get(keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION) == "enabled"
        template = spec["leaderWorkerTemplate"]
        replicas, size = int(spec.get("replicas", 1)), int(template.get("size", 1))
        revision = int(
            ((template["workerTemplate"].get("metadata") or {}).get("annotations") or {})[REVISION_ANNOTATION]
        )
    return Workload(
        kind=obj["kind"],
        namespace=meta["namespace"],
        name=meta["name"],
        shape=annotations[SHAPE_ANNOTATION],
        opted_in=opted_in,
        never_opted_in=annotations.get(PLAIN_ANNOTATION) == "true",
        replicas=replicas,
        size=size,
        revision=revision,
    )


def path(kind: str, namespace: str, name: str | None = None) -> str:
    api_version, plural = (workloads.DS_API, keys.DS_PLURAL) if kind == DS else (workloads.LWS_API, "leaderworkersets")
    return kube.path_of(api_version, plural, namespace=namespace, name=name)


def world(api: kube.Kube, run: str) -> list[Workload]:
    listed = [
        *api.list_objects(workloads.LWS_API, "leaderworkersets", labelSelector=f"{CHURN_LABEL}={run}"),
        *api.list_objects(workloads.DS_API, keys.DS_PLURAL, labelSelector=f"{CHURN_LABEL}={run}"),
    ]
    return sorted(
        (found for obj in listed if (found := observed(obj)) is not None), key=lambda w: (w.namespace, w.name)
    )


def perform(api: kube.Kube, operation: Operation, run: str) -> None:
    """Do `operation` as a user would; raises the API's error when it is refused or cannot be done."""
    before, after = operation.before, operation.after
    if operation.action == "create":
        assert after is not None
        created = manifest(after, run)
        if operation.generated:
            created = workloads.generate_named(created, f"gen-{after.name}-")
        api.request("POST", path(after.kind, after.namespace), body=created)
        return
    assert before is not None
    if operation.action in ("restart-group", "delete-worker"):
        pod = f"{before.name}-{operation.group}" + ("-1" if operation.action == "delete-worker" else "")
        if before.kind == DS:
            pods = api.list_objects(
                "v1", "pods", namespace=before.namespace, labelSelector=f"{keys.DS_NAME_LABEL}={before.name}"
            )
            pod = sorted(p["metadata"]["name"] for p in pods)[operation.group % max(len(pods), 1)] if pods else ""
        if pod:
            api.delete(kube.path_of("v1", "pods", namespace=before.namespace, name=pod))
        return
    if after is None or operation.action == "recreate":
        api.delete(path(before.kind, before.namespace, before.name))
        if after is not None:
            _create_again(api, after, run)
        return
    api.request("PATCH", path(after.kind, after.namespace, after.name), body=change(operation.action, after, run),
                content_type=kube.MERGE_PATCH)  # fmt: skip


def change(action: str, after: Workload, run: str) -> dict[str, Any]:
    """The merge patch a user sends for `action`, naming only what the action changes."""
    if action == "toggle-opt-in":
        key = keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION if after.kind == DS else keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION
        return {"metadata": {"annotations": {key: "enabled" if after.opted_in else None, PLAIN_ANNOTATION: None}}}
    if action == "roll" and after.kind == DS:
        return {"spec": {"roles": manifest(after, run)["spec"]["roles"]}}
    if action == "roll":
        revision = {"annotations": {REVISION_ANNOTATION: str(after.revision)}}
        return {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": revision}}}}
    return {"spec": {"slices" if after.kind == DS else "replicas": after.replicas}}


def _create_again(api: kube.Kube, workload: Workload, run: str, *, within: float = 30.0) -> None:
    """Create the workload under the name just deleted: 409 while the old one is still going away."""
    deadline = time.monotonic() + within
    while True:
        try:
            api.request("POST", path(workload.kind, workload.namespace), body=manifest(workload, run))
            return
        except kube.ApiError as error:
            if error.status != 409 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def describe(operation: Operation) -> str:
    target = operation.after or operation.before
    assert target is not None
    return json.dumps(
        {
            "action": operation.action,
            "kind": target.kind,
            "workload": f"{target.namespace}/{target.name}",
            "group": operation.group,
        }
    )
