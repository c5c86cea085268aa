"""Pod templates as mnnvl stamps and validates them, whichever workload holds them (an LWS, a DisaggregatedSet
role): JSON-patch stamps that never overwrite a user's value, and the checks of mnnvl's reserved keys.

Stamps go into a template's own metadata, so they change the workload's revision (upstream hashes templates
with their metadata) and reach every pod created from it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import errors, keys, names
from . import injection
from .patches import JsonPatch, pointer

#: The pod templates of a `leaderWorkerTemplate`, leader first.
TEMPLATE_FIELDS = ("leaderTemplate", "workerTemplate")
#: Decides whether a reserved key of ours (an annotation in `RESERVED_TEMPLATE_ANNOTATIONS`, or the scope label)
#: may carry `value` in a template: it is what the controller stamps there, or what it leaves alone.
Accepts = Callable[[str, str], bool]

_CHANNEL_CLAIM_TEMPLATE = re.compile(rf"-{re.escape(names.CLAIM_TEMPLATE_SUFFIX)}(-[0-9a-f]{{{names.HASH_LENGTH}}})?$")


def templates_of(leader_worker_template: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The pod templates present in a `leaderWorkerTemplate`, with their field names, leader first."""
    found = leader_worker_template or {}
    return [(field, found[field]) for field in TEMPLATE_FIELDS if found.get(field) is not None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stamp:
    """One key of a template's `labels` or `annotations`, as a controller wants it."""

    field: str  # "labels" or "annotations"
    key: str
    value: str | None  # None: the key must be absent
    #: The values this controller writes. Any other value was put there by a user: it is left for validation
    #: to reject, so the user learns of it instead of seeing it silently replaced.
    ours: tuple[str, ...]


def stamp_patch(template: Mapping[str, Any], base: Sequence[str], stamps: Sequence[Stamp]) -> JsonPatch:
    """JSON patch that puts `stamps` into the template at `base` (the path of its `metadata`)."""
    patch: JsonPatch = []
    meta = template.get("metadata")
    if meta is None:
        if all(stamp.value is None for stamp in stamps):
            return []
        patch.append({"op": "add", "path": pointer(*base), "value": {}})
        meta = {}
    for stamp in stamps:
        patch += _entry(meta, (*base, stamp.field), stamp)
    return patch


def _entry(meta: Mapping[str, Any], path: tuple[str, ...], stamp: Stamp) -> JsonPatch:
    current = meta.get(path[-1])
    if current is not None and stamp.key in current and current[stamp.key] not in stamp.ours:
        return []
    if stamp.value is None:
        return [{"op": "remove", "path": pointer(*path, stamp.key)}] if current and stamp.key in current else []
    if current is None:
        return [{"op": "add", "path": pointer(*path), "value": {stamp.key: stamp.value}}]
    if current.get(stamp.key) == stamp.value:
        return []
    return [{"op": "add", "path": pointer(*path, stamp.key), "value": stamp.value}]


def template_errors(
    template: Mapping[str, Any], path: str, *, accepts: Accepts, opted_in: bool
) -> list[errors.FieldError]:
    """Everything wrong with one pod template at `path` (`spec.leaderWorkerTemplate.workerTemplate`): reserved
    annotations and the scope label unless `accepts` them, a user claim named like or drawn from a channel claim
    (the latter while `opted_in`), and a `compute-domain-containers` that names missing containers."""
    meta = template.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = template.get("spec") or {}
    found: list[errors.FieldError] = []
    for key in keys.RESERVED_TEMPLATE_ANNOTATIONS:
        value = annotations.get(key)
        if value is not None and not accepts(key, value):
            found.append(
                errors.invalid(
                    errors.annotation_path(path, key),
                    value,
                    "this annotation is managed by the AutoComputeDomain feature; remove it from the template",
                )
            )
    scope = (meta.get("labels") or {}).get(keys.SCOPE_LABEL)
    if scope is not None and not accepts(keys.SCOPE_LABEL, scope):
        found.append(
            errors.invalid(
                f"{path}.metadata.labels[{keys.SCOPE_LABEL}]",
                scope,
                "this label is managed by the AutoComputeDomain feature; remove it from the template",
            )
        )
    for index, claim in enumerate(spec.get("resourceClaims") or []):
        claim_path = f"{path}.spec.resourceClaims[{index}]"
        if claim.get("name") == keys.CHANNEL_CLAIM_NAME:
            found.append(injection.reserved_claim_error(claim_path))
        elif opted_in and is_channel_claim_template(claim.get("resourceClaimTemplateName") or ""):
            found.append(
                errors.invalid(
                    f"{claim_path}.resourceClaimTemplateName",
                    claim["resourceClaimTemplateName"],
                    "this is a ComputeDomain channel claim template, reserved for the channel claim the "
                    "AutoComputeDomain feature injects automatically; remove the claim",
                )
            )
    if injection.named_containers(annotations) is not None:
        found += injection.target_containers(spec, annotations, path=path)[1]
    return found


def template_warnings(template: Mapping[str, Any], path: str) -> list[str]:
    """What is allowed in a template but probably not meant: named containers that leave its GPU containers
    without the channel claim."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    warning = injection.unclaimed_gpu_containers_warning(template.get("spec") or {}, annotations, path=path)
    return [] if warning is None else [warning]


def is_channel_claim_template(name: str) -> bool:
    """True for names shaped like `names.claim_template_name(...)`: `<domain>-channel`, or with a hash after it."""
    return _CHANNEL_CLAIM_TEMPLATE.search(name) is not None
