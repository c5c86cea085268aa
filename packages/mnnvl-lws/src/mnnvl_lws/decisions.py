"""Admission decisions for LeaderWorkerSets and their pods: plain dicts in, JSON patches or field errors out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from mnnvl_api import errors, keys, names
from mnnvl_api.decisions import injection, opt_in, references

JsonPatch = list[dict[str, Any]]
TEMPLATE_FIELDS = ("leaderTemplate", "workerTemplate")
_CHANNEL_CLAIM_TEMPLATE = re.compile(rf"-{re.escape(names.CLAIM_TEMPLATE_SUFFIX)}(-[0-9a-f]{{{names.HASH_LENGTH}}})?$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Environment:
    """What admission depends on besides the object: the feature gate and whether ComputeDomains are served."""

    gate_enabled: bool
    api_served: bool


def _pointer(*parts: str) -> str:
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)


def _templates(lws: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return [(field, template[field]) for field in TEMPLATE_FIELDS if template.get(field) is not None]


def stamp_value(lws: Mapping[str, Any]) -> str:
    """The `compute-domain-prefix` stamp: the LWS's `generateName` when it has one, else its name.

    A stable input, so the revision never drifts: an LWS created with `generateName` has no name yet when it
    is stamped at CREATE, and keeps its `generateName` after the API server generated the name.
    """
    meta = lws.get("metadata") or {}
    return str(meta.get("generateName") or meta.get("name") or "")


def _opted_in(lws: Mapping[str, Any] | None) -> bool:
    return lws is not None and opt_in.is_opted_in(
        (lws.get("metadata") or {}).get("annotations") or {}, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION
    )


def _stamped(lws: Mapping[str, Any]) -> bool:
    return any(
        keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION in ((template.get("metadata") or {}).get("annotations") or {})
        for _, template in _templates(lws)
    )


def template_patch(lws: Mapping[str, Any], env: Environment) -> JsonPatch:
    """Stamp the templates of an opted-in LWS, unstamp those of one that is not; nothing while the gate is off.

    Unset and `disabled` both mean "not stamped", so they give the same revision. An LWS whose opt-in is
    rejected (API not served) is left as is; one stamped earlier keeps its stamps.
    """
    if not env.gate_enabled:
        return []
    want = _opted_in(lws) and (env.api_served or _stamped(lws))
    value = stamp_value(lws)
    patch: JsonPatch = []
    for field, template in _templates(lws):
        base = ("spec", "leaderWorkerTemplate", field, "metadata")
        meta = template.get("metadata") or {}
        if "metadata" not in template:
            if not want:
                continue
            patch.append({"op": "add", "path": _pointer(*base), "value": {}})
        stamp = value if want else None
        patch += _entry(meta, (*base, "annotations"), keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION, stamp, value)
        scope = keys.SCOPE_REPLICA if want else None
        patch += _entry(meta, (*base, "labels"), keys.SCOPE_LABEL, scope, keys.SCOPE_REPLICA)
    return patch


def _entry(meta: Mapping[str, Any], path: tuple[str, ...], key: str, value: str | None, ours: str) -> JsonPatch:
    """Ops that set `key` to `value` in the map at `path` (or remove it for None).

    Only a missing entry or our own value (`ours`) is changed: a different value was put there by a user,
    and is left for validation to reject, so the user learns of it instead of seeing it silently replaced.
    """
    current = meta.get(path[-1])
    if current is not None and key in current and current[key] != ours:
        return []
    if value is None:
        return [{"op": "remove", "path": _pointer(*path, key)}] if current and key in current else []
    if current is None:
        return [{"op": "add", "path": _pointer(*path), "value": {key: value}}]
    if current.get(key) == value:
        return []
    return [{"op": "add", "path": _pointer(*path, key), "value": value}]


def lws_errors(lws: Mapping[str, Any], old: Mapping[str, Any] | None, env: Environment) -> list[errors.FieldError]:
    """Everything wrong with an LWS, as the user wrote it (after mutation), in one list."""
    meta = lws.get("metadata") or {}
    found: list[errors.FieldError] = []
    read = opt_in.read_opt_in(meta.get("annotations") or {}, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    if isinstance(read, errors.FieldError):
        found.append(read)
    elif read is opt_in.OptIn.ENABLED and not _opted_in(old):
        found += _opt_in_refusals(env)
    owned_by_ds = _controlled_by_disaggregated_set(meta)
    for field, template in _templates(lws):
        path = f"spec.leaderWorkerTemplate.{field}"
        found += _template_errors(
            template, path, stamp=stamp_value(lws), owned_by_ds=owned_by_ds, opted_in=_opted_in(lws)
        )
    return found


def lws_warnings(lws: Mapping[str, Any]) -> list[str]:
    """What is allowed but probably not meant: templates whose named containers leave their GPU containers
    without the channel claim."""
    found = []
    for field, template in _templates(lws):
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        path = f"spec.leaderWorkerTemplate.{field}"
        warning = injection.unclaimed_gpu_containers_warning(template.get("spec") or {}, annotations, path=path)
        if warning is not None:
            found.append(warning)
    return found


def _controlled_by_disaggregated_set(meta: Mapping[str, Any]) -> bool:
    """True when the LWS's controller is the DisaggregatedSet its `disaggregatedset.x-k8s.io/name` label names.

    Anyone may write an ownerReference, so only the controller reference of the DisaggregatedSet API group
    that agrees with the label counts.
    """
    ds_name = (meta.get("labels") or {}).get(keys.DS_NAME_LABEL)
    return ds_name is not None and any(
        ref.get("controller") is True
        and ref.get("kind") == keys.DS_KIND
        and str(ref.get("apiVersion", "")).partition("/")[0] == keys.DS_GROUP
        and ref.get("name") == ds_name
        for ref in meta.get("ownerReferences") or []
    )


def _opt_in_refusals(env: Environment) -> list[errors.FieldError]:
    path = errors.annotation_path("", keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    if not env.gate_enabled:
        return [
            errors.forbidden(
                path,
                "the AutoComputeDomain feature gate is disabled; set featureGates.AutoComputeDomain=true (Helm) "
                "or AutoComputeDomain: true (Configuration), or remove the annotation",
            )
        ]
    if not env.api_served:
        return [
            errors.forbidden(
                path,
                "the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served; install the "
                "NVIDIA DRA driver with ComputeDomain support, or remove the annotation",
            )
        ]
    return []


def _template_errors(
    template: Mapping[str, Any], path: str, *, stamp: str, owned_by_ds: bool, opted_in: bool
) -> list[errors.FieldError]:
    meta = template.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = template.get("spec") or {}
    found: list[errors.FieldError] = []
    prefix = annotations.get(keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION)
    if prefix is not None and prefix != stamp:
        found.append(_reserved(path, keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION, prefix))
    name = annotations.get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    if name is not None and not owned_by_ds:  # mnnvl-ds stamps it on the LWS it manages, and validates it there
        found.append(_reserved(path, keys.COMPUTE_DOMAIN_NAME_ANNOTATION, name))
    scope = (meta.get("labels") or {}).get(keys.SCOPE_LABEL)
    allowed_scopes = (keys.SCOPE_REPLICA, keys.SCOPE_SLICE) if owned_by_ds else (keys.SCOPE_REPLICA,)
    if scope is not None and scope not in allowed_scopes:
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
        elif opted_in and _is_channel_claim_template(claim.get("resourceClaimTemplateName") or ""):
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


def _is_channel_claim_template(name: str) -> bool:
    """True for names shaped like `names.claim_template_name(...)`: `<domain>-channel`, or with a hash after it."""
    return _CHANNEL_CLAIM_TEMPLATE.search(name) is not None


def _reserved(path: str, key: str, value: str) -> errors.FieldError:
    return errors.invalid(
        errors.annotation_path(path, key),
        value,
        "this annotation is managed by the AutoComputeDomain feature; remove it from the template",
    )


# --- pods ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodPosition:
    """Where a replica-scope pod sits in its LeaderWorkerSet, derived from its name and annotations only,
    so the decision does not depend on whether upstream's webhook has labelled the pod yet."""

    lws: str
    group: int
    pod: str
    leader: str  # the leader pod's name (the pod itself for a leader)

    @property
    def is_leader(self) -> bool:
        return self.pod == self.leader


def pod_position(pod: Mapping[str, Any]) -> PodPosition | errors.FieldError:
    meta = pod.get("metadata") or {}
    lws = (meta.get("labels") or {}).get(keys.LWS_NAME_LABEL)
    name = meta.get("name") or ""
    leader = (meta.get("annotations") or {}).get(keys.LWS_LEADER_NAME_ANNOTATION, name)
    if not lws:
        return errors.forbidden(
            f"metadata.labels[{keys.LWS_NAME_LABEL}]", "a replica-scope pod must belong to a LeaderWorkerSet"
        )
    match = re.fullmatch(re.escape(lws) + r"-(\d+)", leader)
    if match is None:
        return errors.invalid("metadata.name", name, f'cannot tell the group of this pod of LeaderWorkerSet "{lws}"')
    return PodPosition(lws=lws, group=int(match.group(1)), pod=name, leader=leader)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Retry:
    """The pod cannot be admitted now; its creator (the worker StatefulSet) retries, and a later try succeeds."""

    message: str


def controller_reference(meta: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The controller ownerReference of `kind` in `meta`, if any."""
    return next(
        (ref for ref in meta.get("ownerReferences") or () if ref.get("controller") and ref.get("kind") == kind), None
    )


def worker_binding(
    worker: Mapping[str, Any], leader: Mapping[str, Any] | None, statefulset: Mapping[str, Any] | None
) -> str | Retry | None:
    """The domain a worker joins: the one recorded by the current incarnation of its leader, read afresh.

    Upstream LWS ties a worker to its leader by uid: worker → its StatefulSet (controller reference) → the
    leader pod (controller reference). A worker of a previous incarnation, or of a leader that is finished or
    being deleted, is not admitted now: binding it would split a group across two IMEX domains or put it on a
    domain about to go. None: the leader records no domain (it started while the gate was off).
    """
    meta = worker.get("metadata") or {}
    leader_name = (meta.get("annotations") or {}).get(keys.LWS_LEADER_NAME_ANNOTATION, "")
    if leader is None:
        return Retry(message=f'leader pod "{leader_name}" not found; the pod is created again once its leader exists')
    leader_meta = leader.get("metadata") or {}
    owner = controller_reference(meta, "StatefulSet")
    if owner is not None:
        sts_meta = (statefulset or {}).get("metadata") or {}
        if sts_meta.get("uid") != owner.get("uid"):
            return Retry(message=f'StatefulSet "{owner.get("name")}" of this pod is gone or was replaced')
        leader_ref = controller_reference(sts_meta, "Pod")
        if leader_ref is not None and leader_ref.get("uid") != leader_meta.get("uid"):
            return Retry(
                message=f'this pod belongs to a previous incarnation of leader pod "{leader_name}", not the current one'
            )
    if leader_meta.get("deletionTimestamp") or not references.is_non_terminal(leader):
        return Retry(message=f'leader pod "{leader_name}" is finished or being deleted; its group is being restarted')
    return references.recorded_domain(leader)


def recorded_name_errors(
    pod: Mapping[str, Any], position: PodPosition, leader_domain: str | None
) -> list[errors.FieldError]:
    """A `compute-domain-name` already on the pod must be what the replica scope derives: for a leader, a name of
    its group; for a worker, its leader's domain. Anything else is refused, never trusted."""
    recorded = references.recorded_domain(pod)
    if recorded is None:
        return []
    path = errors.annotation_path("", keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    if position.is_leader and names.replica_domain_token(recorded, position.lws, position.group) is None:
        return [
            errors.invalid(
                path,
                recorded,
                f'not a ComputeDomain name of group {position.group} of LeaderWorkerSet "{position.lws}"; '
                "remove the annotation, it is set automatically",
            )
        ]
    if not position.is_leader and recorded != leader_domain:
        return [
            errors.invalid(
                path,
                recorded,
                f'not the ComputeDomain of leader pod "{position.leader}" ({leader_domain or "none"}); '
                "remove the annotation, it is set automatically",
            )
        ]
    return []


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodAdmission:
    patch: JsonPatch
    errors: list[errors.FieldError]
    domain: str | None = None
    targets: tuple[str, ...] = ()
    gated: bool = False


def admit_pod(pod: Mapping[str, Any], *, domain: str | None, new_token: str, domain_ready: bool) -> PodAdmission:
    """Injection and gating for one replica-scope pod.

    `domain` is the pod's domain if already known: recorded on the pod itself (a reinvocation), or, for a
    worker, its leader's. A leader without one gets a fresh domain for this incarnation (`new_token`).
    A worker whose leader has no domain (it started while the gate was off) gets nothing, like its leader.
    """
    position = pod_position(pod)
    if isinstance(position, errors.FieldError):
        return PodAdmission(patch=[], errors=[position])
    meta = pod.get("metadata") or {}
    recorded = (meta.get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    chosen = recorded or domain
    if chosen is None and position.is_leader:
        chosen = names.replica_domain_name(position.lws, position.group, new_token)
    if chosen is None:
        return PodAdmission(patch=[], errors=[])
    gate = position.is_leader or not domain_ready
    steps = injection.pod_steps(pod, domain=chosen, gate=gate)
    if steps.errors:
        return PodAdmission(patch=[], errors=steps.errors)
    return PodAdmission(
        patch=steps.patch, errors=[], domain=chosen, targets=tuple(t.name for t in steps.targets), gated=gate
    )
