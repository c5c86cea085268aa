"""Admission decisions for DisaggregatedSets, their LeaderWorkerSets and their pods: plain dicts in, JSON patches,
field errors or warnings out.

Each role's scope (`mnnvl_api.decisions.enrollment`) is stamped as the scope label into the role's pod templates:
upstream hashes the roles' `leaderWorkerTemplate`s into the DisaggregatedSet's revision, so enrolling or opting
out a role (at the set or at the role) rolls every group, while unset and `disabled` stamp nothing and give the
same revision. Upstream copies the stamped templates into the LeaderWorkerSet it creates per (slice, revision,
role), so the stamp tells which of them, and which of their pods, join the slice's ComputeDomain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pydantic

from mnnvl_api import errors, keys, models, names
from mnnvl_api.decisions import domains, enrollment, injection, opt_in, ownership, placement, templates
from mnnvl_api.decisions.patches import JsonPatch

from . import planner

#: The scope label each role scope stamps (none: no label).
STAMPS = {enrollment.RoleScope.SLICE: keys.SCOPE_SLICE, enrollment.RoleScope.REPLICA: keys.SCOPE_REPLICA}
#: Every value of the scope label that this controller writes into role templates.
OUR_SCOPES = (keys.SCOPE_SLICE, keys.SCOPE_REPLICA)
#: The opt-in annotations a role may carry (the set itself carries only the slice one).
OPT_IN_KEYS = (keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)


def parse(ds: Mapping[str, Any]) -> models.DisaggregatedSet | None:
    """The DisaggregatedSet as a model; None for a shape the API server's schema would reject (a mutating webhook
    sees objects before schema validation does, and answers them with nothing)."""
    try:
        return models.DisaggregatedSet.model_validate(ds)
    except pydantic.ValidationError:
        return None


def _roles(ds: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((ds.get("spec") or {}).get("roles") or [])


def _role_templates(role: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return templates.templates_of((role.get("spec") or {}).get("leaderWorkerTemplate"))


def _scope_label(template: Mapping[str, Any]) -> str | None:
    return ((template.get("metadata") or {}).get("labels") or {}).get(keys.SCOPE_LABEL)


# --- DisaggregatedSet: stamping ----------------------------------------------------------------------------


def ds_patch(ds: Mapping[str, Any], env: opt_in.Environment) -> JsonPatch:
    """Stamp every role's templates with the role's scope, unstamp those of roles without one; nothing while the
    gate is off (toggling the gate changes no template, so running groups are never restarted by it)."""
    model = parse(ds)
    if not env.gate_enabled or model is None:
        return []
    scopes = enrollment.enroll_roles(model).scopes
    patch: JsonPatch = []
    for index, role in enumerate(_roles(ds)):
        stamp = templates.Stamp(
            field="labels", key=keys.SCOPE_LABEL, value=STAMPS.get(scopes[str(role.get("name"))]), ours=OUR_SCOPES
        )
        for field, template in _role_templates(role):
            base = ("spec", "roles", str(index), "spec", "leaderWorkerTemplate", field, "metadata")
            patch += templates.stamp_patch(template, base, (stamp,))
    return patch


# --- DisaggregatedSet: validation and advice ---------------------------------------------------------------


def _opt_ins(ds: models.DisaggregatedSet | None) -> dict[tuple[str | None, str], str]:
    """Every `enabled` opt-in annotation of the set (role None) and of its roles, by (role, key), with its path.
    Roles are told apart by name, not position: reordering them opts nothing in."""
    if ds is None:
        return {}
    found: dict[tuple[str | None, str], str] = {}
    if opt_in.is_opted_in(ds.metadata.annotations, keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION):
        found[(None, keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION)] = errors.annotation_path(
            "", keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION
        )
    for index, role in enumerate(ds.spec.roles):
        for key in OPT_IN_KEYS:
            if opt_in.is_opted_in(role.metadata.annotations, key):
                found[(role.name, key)] = errors.annotation_path(f"spec.roles[{index}]", key)
    return found


def _old_scope_labels(old: Mapping[str, Any] | None) -> dict[tuple[str, str], str | None]:
    """The scope label of each (role, template field) of the object before the update."""
    return {
        (str(role.get("name")), field): _scope_label(template)
        for role in _roles(old or {})
        for field, template in _role_templates(role)
    }


def ds_errors(ds: Mapping[str, Any], old: Mapping[str, Any] | None, env: opt_in.Environment) -> list[errors.FieldError]:
    """Everything wrong with a DisaggregatedSet, as the user wrote it (after mutation), in one list.

    New opt-ins are refused while the gate is off or ComputeDomains are not served; objects that opted in
    earlier stay updatable. With the gate on, each role template's scope label is exactly the role's stamp;
    with the gate off, stamps are neither added nor removed, so a label stays valid as long as it is unchanged.
    """
    model = parse(ds)
    if model is None:
        return []
    old_model = parse(old) if old is not None else None
    enrolled = enrollment.enroll_roles(model)
    found = list(enrolled.errors)
    earlier = _opt_ins(old_model)
    for key, path in _opt_ins(model).items():
        if key not in earlier:
            found += opt_in.opt_in_refusals(path, env)
    old_labels = _old_scope_labels(old)
    for index, role in enumerate(_roles(ds)):
        name = str(role.get("name"))
        scope = enrolled.scopes[name]
        for field, template in _role_templates(role):
            # With the gate off nothing is stamped or unstamped: a label is valid while it stays as it was.
            stamp = STAMPS.get(scope) if env.gate_enabled else old_labels.get((name, field))
            path = f"spec.roles[{index}].spec.leaderWorkerTemplate.{field}"
            found += templates.template_errors(
                template, path, accepts=_only_scope(stamp), opted_in=scope is not enrollment.RoleScope.NONE
            )
    return found


def _only_scope(stamp: str | None) -> templates.Accepts:
    """Accepts the scope label with the value `stamp`, and no reserved annotation: mnnvl-ds stamps none into
    role templates (upstream's LeaderWorkerSets get theirs from mnnvl-lws, per replica)."""

    def accepts(key: str, value: str) -> bool:
        return key == keys.SCOPE_LABEL and value == stamp

    return accepts


def ds_warnings(ds: Mapping[str, Any]) -> list[str]:
    """Advice that does not refuse: placement that keeps pods sharing a ComputeDomain within one NVLink clique,
    and named containers that leave an enrolled role's GPU containers without the channel claim."""
    model = parse(ds)
    if model is None:
        return []
    scopes = enrollment.enroll_roles(model).scopes
    found: list[str] = []
    if enrollment.RoleScope.SLICE in scopes.values():
        advice = placement.slice_placement_warning(model)
        if advice is not None:
            found.append(advice)
    placed = placement.places_slices_on_cliques(model)
    for index, role in enumerate(model.spec.roles):
        path = f"spec.roles[{index}]"
        if scopes[role.name] is enrollment.RoleScope.REPLICA:
            advice = placement.replica_placement_warning(
                role.metadata.annotations,
                path,
                placed=placed,
                exclusive_topology_allowed=not placement.has_placement_policy(model),
            )
            if advice is not None:
                found.append(advice)
        if scopes[role.name] is not enrollment.RoleScope.NONE:
            for field, template in _role_templates(_roles(ds)[index]):
                found += templates.template_warnings(template, f"{path}.spec.leaderWorkerTemplate.{field}")
    return found


# --- the LeaderWorkerSets of a DisaggregatedSet ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Position:
    """Where a LeaderWorkerSet (or a pod of it) sits in its DisaggregatedSet, from upstream's labels. A missing
    slice label is slice 0: LeaderWorkerSets adopted from before slices existed carry none."""

    ds: str
    slice: int
    revision: str
    role: str

    @property
    def domain(self) -> str:
        """The ComputeDomain of this (slice, revision)."""
        return names.slice_domain_name(self.ds, self.slice, self.revision)


def child_position(meta: Mapping[str, Any]) -> Position | None:
    """The position the labels in `meta` give; None when they give none (not of a DisaggregatedSet)."""
    labels = meta.get("labels") or {}
    ds = labels.get(keys.DS_NAME_LABEL)
    revision = labels.get(keys.DS_REVISION_LABEL)
    slice_label = labels.get(keys.DS_SLICE_LABEL, "0")
    if not ds or not revision or not slice_label.isdigit():
        return None
    return Position(ds=ds, slice=int(slice_label), revision=revision, role=labels.get(keys.DS_ROLE_LABEL, ""))


def stores_agree(pod: Mapping[str, Any], child: planner.Child, workload: planner.DisaggregatedSetFacts | None) -> bool:
    """Whether the LeaderWorkerSet and DisaggregatedSet the stores hold are the ones `pod` belongs to: its set
    labels give the child's position, its scope stamp is the child's, and the stored DisaggregatedSet is the one
    controlling the child (same uid). A disagreement means a store lags behind the API (an object deleted and
    recreated under its name while a relist hid the deletion); fresh reads decide then, not the stores."""
    meta = pod.get("metadata") or {}
    stored = Position(ds=child.ds_name, slice=child.slice, revision=child.revision, role=child.role)
    stamped = (meta.get("labels") or {}).get(keys.SCOPE_LABEL) == keys.SCOPE_SLICE
    return (
        child_position(meta) == stored
        and stamped == child.slice_scope
        and workload is not None
        and workload.uid == child.owner_uid
    )


def in_slice_scope(lws: Mapping[str, Any]) -> bool:
    """Whether the LeaderWorkerSet's templates carry the slice-scope stamp: its pods join the slice's domain."""
    leader_worker_template = (lws.get("spec") or {}).get("leaderWorkerTemplate")
    return any(
        _scope_label(template) == keys.SCOPE_SLICE for _, template in templates.templates_of(leader_worker_template)
    )


def _replicas(lws: Mapping[str, Any] | None) -> int:
    replicas = ((lws or {}).get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) else 1


def child_errors(
    lws: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    *,
    gate_enabled: bool,
    role_enrolled: bool,
    domain: domains.DomainFacts | None,
) -> list[errors.FieldError]:
    """Why a slice-scope LeaderWorkerSet of a DisaggregatedSet may not be created (`old` None) or scaled up now.

    `role_enrolled`: its DisaggregatedSet enrolls its role in the slice domain now; `domain`: the ComputeDomain
    of its (slice, revision), read afresh. While the gate is off, a new LeaderWorkerSet of an enrolled role, or
    new groups of one, would lack the claim the slice's others carry; while a domain we did not create for this
    DisaggregatedSet holds the generated name, the slice stays unscaled. Upstream reports either refusal as a
    reconcile error and tries again. Scaling down, and everything else, is always allowed.
    """
    meta = lws.get("metadata") or {}
    position = child_position(meta)
    owner = ownership.disaggregated_set_reference(meta)
    if position is None or owner is None or not in_slice_scope(lws):
        return []
    creating = old is None
    if not creating and _replicas(lws) <= _replicas(old):
        return []
    path = "metadata.name" if creating else "spec.replicas"
    slice_text = f'slice {position.slice} of DisaggregatedSet "{position.ds}"'
    if not gate_enabled:
        if not role_enrolled:
            return []
        added = "a new LeaderWorkerSet" if creating else "new groups of this LeaderWorkerSet"
        return [errors.forbidden(path, _gate_off_refusal(position, f"{added} would lack"))]
    if domain is not None and not domains.is_owned_by(
        domain, owner_uid=str(owner.get("uid")), manager=keys.DS_CONTROLLER
    ):
        return [
            errors.forbidden(
                path,
                f"ComputeDomain {domain.name} already exists and is {domains.describe_owner(domain)}; it is not "
                f"adopted and "
                f"{slice_text} stays unscaled: delete or rename that ComputeDomain",
            )
        ]
    return []


def _gate_off_refusal(position: Position, lacking: str) -> str:
    """Why something new of an enrolled role is refused while the gate is off, and the two ways out."""
    return (
        f'role "{position.role}" of slice {position.slice} of DisaggregatedSet "{position.ds}" is enrolled in slice '
        f"ComputeDomains and the AutoComputeDomain feature gate is disabled: {lacking} the ComputeDomain channel the "
        "slice's others carry; set featureGates.AutoComputeDomain=true (Helm) or AutoComputeDomain: true "
        f"(Configuration), or remove {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION} from the DisaggregatedSet"
    )


# --- pods ------------------------------------------------------------------------------------------------


def gate_off_pod_refusal(position: Position) -> str:
    """Why a pod of an enrolled role's LeaderWorkerSet is refused while the gate is off: no claim is injected."""
    return _gate_off_refusal(position, "this pod would run without")


def admit_pod(pod: Mapping[str, Any], *, domain: str, domain_ready: bool) -> injection.PodAdmission:
    """Claim injection and gating for a pod of a slice-scope LeaderWorkerSet joining `domain`, the domain of its
    (slice, revision). A domain already recorded on the pod must be that one: anything else is refused, never
    trusted. The pod is gated until the domain is ready."""
    recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    if recorded is not None and recorded != domain:
        path = errors.annotation_path("", keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        detail = (
            f"not the ComputeDomain of this pod's slice and revision ({domain}); remove the annotation, it is set "
            "automatically"
        )
        return injection.PodAdmission(patch=[], errors=[errors.invalid(path, recorded, detail)])
    return injection.join_domain(pod, domain=domain, gate=not domain_ready)


def orphan_pod_refusal(lws: str, ds: str) -> str:
    """Why a pod of a slice-scope LeaderWorkerSet whose DisaggregatedSet is gone is not created."""
    return (
        f'LeaderWorkerSet "{lws}" was made for DisaggregatedSet "{ds}", which no longer exists (or was made again '
        "under its name): its pods would lack the slice's channel claim, so none is created until the garbage "
        "collector deletes the LeaderWorkerSet"
    )
