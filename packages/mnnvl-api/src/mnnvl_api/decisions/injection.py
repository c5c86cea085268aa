"""Container targeting and claim injection on a pod spec: plain dict in, JSON patch operations out.

Targets are the containers, and the restartable init containers (`restartPolicy: Always`), that request
`nvidia.com/gpu` > 0, or exactly the containers named in `compute-domain-containers`. Each target gets a
`resources.claims` entry for the channel claim; the pod gets the claim itself. Nothing else is touched, and
applying the result and injecting again yields no further operations.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .. import errors, keys, names
from . import patches
from .patches import JsonPatch

_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+))\s*([a-zA-Z]*)\s*$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """A container that gets the claim: `field` is `containers` or `initContainers`, `index` its position."""

    field: str
    index: int
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Injection:
    patch: JsonPatch
    targets: tuple[Target, ...]
    errors: list[errors.FieldError]


def requests_gpu(container: Mapping[str, Any]) -> bool:
    """True when the container asks for more than zero `nvidia.com/gpu` in limits or requests."""
    resources = container.get("resources") or {}
    return any(
        _positive_quantity((resources.get(kind) or {}).get(keys.GPU_RESOURCE)) for kind in ("limits", "requests")
    )


def pod_requests_gpu(pod_spec: Mapping[str, Any]) -> bool:
    """The one GPU rule: a container or a restartable init container (a sidecar, which runs beside them) asks for
    `nvidia.com/gpu` (`requests_gpu`). The channel claim goes to exactly these, and the census counts a node busy
    with exactly these."""
    return any(_gpu_target(target, container) for target, container in _indexed(pod_spec))


def named_containers(annotations: Mapping[str, str]) -> list[str] | None:
    """The names listed in `compute-domain-containers`, or None when the annotation is absent."""
    value = annotations.get(keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION)
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def target_containers(
    pod_spec: Mapping[str, Any], annotations: Mapping[str, str], *, path: str = ""
) -> tuple[list[Target], list[errors.FieldError]]:
    """The containers that get the channel claim, or errors naming what the annotation got wrong.

    `path` is where the template's metadata lives, e.g. `spec.leaderWorkerTemplate.workerTemplate`
    (empty for a pod's own metadata).
    """
    containers = _indexed(pod_spec)
    names = named_containers(annotations)
    if names is None:
        return [target for target, container in containers if _gpu_target(target, container)], []
    field = errors.annotation_path(path, keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION)
    value = annotations[keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION]
    if not names:
        return [], [errors.invalid(field, value, "names no container; list container names separated by commas")]
    by_name = {target.name: target for target, _ in containers}
    missing = [name for name in names if name not in by_name]
    if missing:
        known = ", ".join(json.dumps(target.name) for target, _ in containers)
        listed = ", ".join(json.dumps(name) for name in missing)
        noun = "container" if len(missing) == 1 else "containers"
        return [], [
            errors.invalid(
                field, value, f"no {noun} named {listed} (containers: {known}); name existing containers only"
            )
        ]
    wanted = set(names)
    return [target for target, _ in containers if target.name in wanted], []


def lacks_channel_claim(pod_spec: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    """The pod has containers that should hold the channel claim, but it holds none: it was admitted while the
    scope's pod webhook was not registered or not reachable."""
    targets, _ = target_containers(pod_spec, annotations)
    return bool(targets) and _existing_channel_claim(pod_spec)[1] is None


def unclaimed_gpu_containers_warning(
    pod_spec: Mapping[str, Any], annotations: Mapping[str, str], *, path: str = ""
) -> str | None:
    """A warning when `compute-domain-containers` names only containers that request no GPU while others do.

    Such a list is valid, but it leaves every GPU container without the channel claim, which is rarely meant.
    None when the annotation is absent or invalid (validation reports that), names a container that requests
    GPUs, or no container requests GPUs. `path` is as for `target_containers`.
    """
    targets, found = target_containers(pod_spec, annotations, path=path)
    if named_containers(annotations) is None or found:
        return None
    containers = _indexed(pod_spec)
    if any(requests_gpu(container) for target, container in containers if target in targets):
        return None
    unclaimed = [target.name for target, container in containers if _gpu_target(target, container)]
    if not unclaimed:
        return None
    field = errors.annotation_path(path, keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION)
    value = json.dumps(annotations[keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION])
    listed = ", ".join(json.dumps(name) for name in unclaimed)
    left_out = f"container {listed} gets" if len(unclaimed) == 1 else f"containers {listed} get"
    return (
        f"{field}: {value} names no container that requests {keys.GPU_RESOURCE}, so GPU {left_out} no "
        "ComputeDomain channel; name the GPU containers too, or remove the annotation to target them automatically"
    )


def inject_channel_claim(
    pod_spec: Mapping[str, Any], annotations: Mapping[str, str], claim_template: str, *, path: str = ""
) -> Injection:
    """JSON patch that gives the pod the channel claim from `claim_template` and each target its reference.

    `path` locates the annotations in error messages; the default is the pod's own metadata.
    """
    targets, found = target_containers(pod_spec, annotations, path=path)
    index, existing = _existing_channel_claim(pod_spec)
    if existing is not None and existing.get("resourceClaimTemplateName") != claim_template:
        found.append(reserved_claim_error(f"spec.resourceClaims[{index}]"))
    if found:
        return Injection(patch=[], targets=(), errors=found)
    if not targets:
        return Injection(patch=[], targets=(), errors=[])
    patch: JsonPatch = []
    if existing is None:
        claim = {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": claim_template}
        patch.extend(_append(pod_spec.get("resourceClaims"), "/spec/resourceClaims", claim))
    for target in targets:
        patch.extend(_claim_reference(pod_spec[target.field][target.index], f"/spec/{target.field}/{target.index}"))
    return Injection(patch=patch, targets=tuple(targets), errors=[])


def pod_steps(pod: Mapping[str, Any], *, domain: str, gate: bool) -> Injection:
    """What every scope's pod webhook does to a pod joining `domain`: record the domain on the pod (unless it
    is recorded already), give its target containers the domain's channel claim, and add the scheduling gate
    when `gate`. Idempotent, so reinvocations and retries change nothing further."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = pod.get("spec") or {}
    claim = inject_channel_claim(spec, annotations, names.claim_template_name(domain))
    if claim.errors:
        return claim
    patch: JsonPatch = []
    if keys.COMPUTE_DOMAIN_NAME_ANNOTATION not in annotations:
        patch += patches.set_annotation(meta, keys.COMPUTE_DOMAIN_NAME_ANNOTATION, domain)
    patch += claim.patch
    if gate:
        patch += scheduling_gate_patch(spec)
    return Injection(patch=patch, targets=claim.targets, errors=[])


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodAdmission:
    """What a scope's pod webhook does to one pod: the patch, or the errors that refuse it; and, for the log,
    the domain it joins, the containers that get the claim, and whether it is gated."""

    patch: JsonPatch
    errors: list[errors.FieldError]
    domain: str | None = None
    targets: tuple[str, ...] = ()
    gated: bool = False


def join_domain(pod: Mapping[str, Any], *, domain: str, gate: bool) -> PodAdmission:
    """The admission of a pod joining `domain` (`pod_steps`), gated when `gate`."""
    steps = pod_steps(pod, domain=domain, gate=gate)
    if steps.errors:
        return PodAdmission(patch=[], errors=steps.errors)
    return PodAdmission(
        patch=steps.patch, errors=[], domain=domain, targets=tuple(t.name for t in steps.targets), gated=gate
    )


def reserved_claim_error(path: str) -> errors.FieldError:
    """The error for a user claim at `path` that uses the reserved channel claim name."""
    return errors.invalid(
        f"{path}.name",
        keys.CHANNEL_CLAIM_NAME,
        "this claim name is reserved for the automatically managed ComputeDomain channel; rename your claim",
    )


def scheduling_gate_patch(pod_spec: Mapping[str, Any]) -> JsonPatch:
    """JSON patch that adds the ComputeDomain scheduling gate, unless the pod already has it."""
    gates = pod_spec.get("schedulingGates")
    if any(gate.get("name") == keys.SCHEDULING_GATE for gate in gates or ()):
        return []
    return _append(gates, "/spec/schedulingGates", {"name": keys.SCHEDULING_GATE})


def gate_index(pod_spec: Mapping[str, Any]) -> int | None:
    """Where the ComputeDomain gate sits in `spec.schedulingGates` (None: the pod is not gated by us)."""
    for index, gate in enumerate(pod_spec.get("schedulingGates") or ()):
        if gate.get("name") == keys.SCHEDULING_GATE:
            return index
    return None


def gate_removal_at(index: int) -> JsonPatch:
    """JSON patch that removes the ComputeDomain gate at `index`; its `test` fails if the gates moved meanwhile."""
    pointer = f"/spec/schedulingGates/{index}"
    return [{"op": "test", "path": pointer, "value": {"name": keys.SCHEDULING_GATE}}, {"op": "remove", "path": pointer}]


def scheduling_gate_removal(pod_spec: Mapping[str, Any]) -> JsonPatch:
    """JSON patch that removes the ComputeDomain gate from a pod with this spec (empty: not gated)."""
    index = gate_index(pod_spec)
    return [] if index is None else gate_removal_at(index)


def is_gated(pod_spec: Mapping[str, Any]) -> bool:
    return gate_index(pod_spec) is not None


def _indexed(pod_spec: Mapping[str, Any]) -> list[tuple[Target, Mapping[str, Any]]]:
    return [
        (Target(field=field, index=index, name=str(container.get("name", ""))), container)
        for field in ("containers", "initContainers")
        for index, container in enumerate(pod_spec.get(field) or ())
    ]


def _gpu_target(target: Target, container: Mapping[str, Any]) -> bool:
    restartable = target.field == "containers" or container.get("restartPolicy") == "Always"
    return restartable and requests_gpu(container)


def _existing_channel_claim(pod_spec: Mapping[str, Any]) -> tuple[int, Mapping[str, Any] | None]:
    for index, claim in enumerate(pod_spec.get("resourceClaims") or ()):
        if claim.get("name") == keys.CHANNEL_CLAIM_NAME:
            return index, claim
    return -1, None


def _claim_reference(container: Mapping[str, Any], pointer: str) -> JsonPatch:
    resources = container.get("resources")
    reference = {"name": keys.CHANNEL_CLAIM_NAME}
    if resources is None:
        return [{"op": "add", "path": f"{pointer}/resources", "value": {"claims": [reference]}}]
    claims = resources.get("claims")
    if any(claim.get("name") == keys.CHANNEL_CLAIM_NAME for claim in claims or ()):
        return []
    return _append(claims, f"{pointer}/resources/claims", reference)


def _append(existing: Sequence[Any] | None, pointer: str, item: dict[str, Any]) -> JsonPatch:
    if existing is None:
        return [{"op": "add", "path": pointer, "value": [item]}]
    return [{"op": "add", "path": f"{pointer}/-", "value": item}]


def _positive_quantity(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, int | float):
        return value > 0
    match = _QUANTITY.match(str(value))
    if match is None:
        return False
    try:
        return decimal.Decimal(match.group(1)) > 0
    except decimal.InvalidOperation:
        return False
