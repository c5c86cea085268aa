"""Admission decisions for LeaderWorkerSets and their pods: plain dicts in, JSON patches or field errors out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from mnnvl_api import errors, keys, names
from mnnvl_api.decisions import injection, opt_in, ownership, placement, references, templates
from mnnvl_api.decisions.patches import JsonPatch


def _templates(lws: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return templates.templates_of((lws.get("spec") or {}).get("leaderWorkerTemplate"))


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class TemplateRevision:
    """One template revision of a LeaderWorkerSet, as upstream records it in a ControllerRevision."""

    lws: str
    lws_uid: str
    hash: str
    #: Its templates carry our stamp: the LeaderWorkerSet was opted in when the revision was made.
    stamped: bool


def template_revision(revision: Mapping[str, Any]) -> TemplateRevision | None:
    """What upstream's ControllerRevision of a LeaderWorkerSet says; None for any other ControllerRevision (a
    StatefulSet's carries the same hash label).

    Upstream LWS writes one per template revision, controlled by the LeaderWorkerSet, labelled with the
    revision's hash, its data holding that revision's `spec.leaderWorkerTemplate`. Its data cannot be changed
    once written, and only controllers write ControllerRevisions (Kubernetes' `edit` role may only read them),
    so unlike a pod's labels it tells what the revision really was."""
    meta = revision.get("metadata") or {}
    owner = ownership.controller_reference(meta, "LeaderWorkerSet")
    revision_hash = (meta.get("labels") or {}).get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)
    if owner is None or str(owner.get("apiVersion", "")).partition("/")[0] != keys.LWS_GROUP or not revision_hash:
        return None
    return TemplateRevision(
        lws=str(owner.get("name")),
        lws_uid=str(owner.get("uid")),
        hash=revision_hash,
        stamped=_stamped(revision.get("data") or {}),
    )


def revision_opted_in(revisions: Iterable[TemplateRevision | None], *, lws_uid: str, revision_hash: str) -> bool:
    """Whether the revision `revision_hash` of the LeaderWorkerSet with `lws_uid` was opted in (stamped).

    A pod of such a revision keeps its revision's semantics (the channel claim, its group's domain) until the
    rollout replaces it, even after the LeaderWorkerSet opted out: upstream recreates a restarted group of a
    revision the rollout has not reached from that revision's stamped templates."""
    return any(
        found is not None and found.stamped and found.lws_uid == lws_uid and found.hash == revision_hash
        for found in revisions
    )


def template_patch(lws: Mapping[str, Any], env: opt_in.Environment) -> JsonPatch:
    """Stamp the templates of an opted-in LWS, unstamp those of one that is not; nothing while the gate is off.

    Unset and `disabled` both mean "not stamped", so they give the same revision. An LWS whose opt-in is
    rejected (API not served) is left as is; one stamped earlier keeps its stamps. A slice scope stamped by
    mnnvl-ds (on the LWS of a DisaggregatedSet) is not ours to change.
    """
    if not env.gate_enabled:
        return []
    want = _opted_in(lws) and (env.api_served or _stamped(lws))
    value = stamp_value(lws)
    stamps = (
        templates.Stamp(
            field="annotations", key=keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION, value=value if want else None, ours=(value,)
        ),
        templates.Stamp(
            field="labels",
            key=keys.SCOPE_LABEL,
            value=keys.SCOPE_REPLICA if want else None,
            ours=(keys.SCOPE_REPLICA,),
        ),
    )
    patch: JsonPatch = []
    for field, template in _templates(lws):
        patch += templates.stamp_patch(template, ("spec", "leaderWorkerTemplate", field, "metadata"), stamps)
    return patch


def lws_errors(
    lws: Mapping[str, Any], old: Mapping[str, Any] | None, env: opt_in.Environment
) -> list[errors.FieldError]:
    """Everything wrong with an LWS, as the user wrote it (after mutation), in one list."""
    meta = lws.get("metadata") or {}
    found: list[errors.FieldError] = []
    read = opt_in.read_opt_in(meta.get("annotations") or {}, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION)
    if isinstance(read, errors.FieldError):
        found.append(read)
    elif read is opt_in.OptIn.ENABLED and not _opted_in(old):
        found += opt_in.opt_in_refusals(errors.annotation_path("", keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION), env)
    stamp = stamp_value(lws)
    owned_by_ds = ownership.controlled_by_disaggregated_set(meta)
    # mnnvl-ds stamps the slice scope and the domain name on the LWS of a DisaggregatedSet, and validates them.
    allowed_scopes = (keys.SCOPE_REPLICA, keys.SCOPE_SLICE) if owned_by_ds else (keys.SCOPE_REPLICA,)

    def accepts(key: str, value: str) -> bool:
        if key == keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION:
            return value == stamp
        if key == keys.SCOPE_LABEL:
            return value in allowed_scopes
        return owned_by_ds

    for field, template in _templates(lws):
        path = f"spec.leaderWorkerTemplate.{field}"
        found += templates.template_errors(template, path, accepts=accepts, opted_in=_opted_in(lws))
    return found


def lws_warnings(lws: Mapping[str, Any]) -> list[str]:
    """What is allowed but probably not meant: an opted-in LWS whose groups nothing keeps within one NVLink
    clique (the LWS of a DisaggregatedSet is advised on its set instead), and templates whose named containers
    leave their GPU containers without the channel claim."""
    meta = lws.get("metadata") or {}
    found: list[str] = []
    if _opted_in(lws) and not ownership.controlled_by_disaggregated_set(meta):
        advice = placement.replica_placement_warning(meta.get("annotations") or {}, "", placed=False)
        if advice is not None:
            found.append(advice)
    return found + [
        warning
        for field, template in _templates(lws)
        for warning in templates.template_warnings(template, f"spec.leaderWorkerTemplate.{field}")
    ]


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


def worker_binding(
    worker: Mapping[str, Any],
    position: PodPosition,
    leader: Mapping[str, Any] | None,
    statefulset: Mapping[str, Any] | None,
) -> str | Retry | None:
    """The domain a worker at `position` joins: the one recorded by the current incarnation of its leader, read
    afresh, and checked as the leader's own was at its admission (`leader_domain`).

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
    owner = ownership.controller_reference(meta, "StatefulSet")
    if owner is not None:
        sts_meta = (statefulset or {}).get("metadata") or {}
        if sts_meta.get("uid") != owner.get("uid"):
            return Retry(message=f'StatefulSet "{owner.get("name")}" of this pod is gone or was replaced')
        leader_ref = ownership.controller_reference(sts_meta, "Pod")
        if leader_ref is not None and leader_ref.get("uid") != leader_meta.get("uid"):
            return Retry(
                message=f'this pod belongs to a previous incarnation of leader pod "{leader_name}", not the current one'
            )
    if leader_meta.get("deletionTimestamp") or not references.is_non_terminal(leader):
        return Retry(message=f'leader pod "{leader_name}" is finished or being deleted; its group is being restarted')
    return leader_domain(leader, position)


def leader_domain(leader: Mapping[str, Any], worker: PodPosition) -> str | Retry | None:
    """The domain `leader` records, when it is still what the replica scope gave it: a domain name of the worker's
    group (as the leader's own admission checks, `recorded_name_errors`) that agrees with the channel claim the
    leader holds. The annotation can be edited after admission; the claim cannot. A leader whose record was
    changed admits no worker: the worker would join a domain its group does not use. None: the leader records
    no domain and holds no channel claim (it started while the gate was off).

    A leader made from a template without the replica scope admits no worker that carries the scope: the worker
    would run without the channel it was stamped for. Upstream LWS v0.10.0 builds a group's workers from the
    ControllerRevision under the leader's hash, and when that revision is missing it makes it again from the
    *live* spec under the old hash: after an opt-in, an unstamped leader then gets stamped workers."""
    recorded = references.recorded_domain(leader)
    held = references.channel_claim_template(leader)
    if recorded is None and held is None:
        if ((leader.get("metadata") or {}).get("labels") or {}).get(keys.SCOPE_LABEL) != keys.SCOPE_REPLICA:
            return Retry(
                message=(
                    f'leader pod "{worker.leader}" was made from a template of LeaderWorkerSet "{worker.lws}" that '
                    f"had not opted in, this pod from one that has; {_RESTART_THE_GROUP}"
                )
            )
        return None
    as_admitted = PodPosition(lws=worker.lws, group=worker.group, pod=worker.leader, leader=worker.leader)
    if (
        recorded is None
        or recorded_name_errors(leader, as_admitted, None)
        or (held is not None and held != names.claim_template_name(recorded))
    ):
        path = errors.annotation_path("", keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        return Retry(
            message=(
                f'{path} of leader pod "{worker.leader}" ({recorded or "missing"}) is not the ComputeDomain mnnvl gave '
                f'group {worker.group} of LeaderWorkerSet "{worker.lws}"'
                + (f" (its channel claim uses {held})" if held is not None else "")
                + "; it was changed after admission: restore it, or delete the leader pod to restart the group"
            )
        )
    return recorded


_RESTART_THE_GROUP = (
    "it is created once the leader is replaced (the leader StatefulSet rolls it to the current template unless a "
    "rollout partition holds it; lower the partition or delete the leader pod to restart the group)"
)


def leader_without_domain(worker: PodPosition) -> Retry:
    """A worker whose workload opted in (now, or at its revision) and whose leader has no domain (it was admitted
    while the gate was off, or while its LeaderWorkerSet was not opted in): it waits rather than run without the
    claim it was stamped for."""
    return Retry(
        message=(
            f'leader pod "{worker.leader}" has no ComputeDomain while LeaderWorkerSet "{worker.lws}" is opted in; '
            f"{_RESTART_THE_GROUP}"
        )
    )


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


def admit_pod(
    pod: Mapping[str, Any], *, domain: str | None, new_token: str, domain_ready: bool
) -> injection.PodAdmission:
    """Injection and gating for one replica-scope pod.

    `domain` is the pod's domain if already known: recorded on the pod itself (a reinvocation), or, for a
    worker, its leader's. A leader without one gets a fresh domain for this incarnation (`new_token`).
    A worker whose leader has no domain gets nothing, like its leader (the shell has refused it when its workload
    opted in: `leader_without_domain`).
    """
    position = pod_position(pod)
    if isinstance(position, errors.FieldError):
        return injection.PodAdmission(patch=[], errors=[position])
    meta = pod.get("metadata") or {}
    recorded = (meta.get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    chosen = recorded or domain
    if chosen is None and position.is_leader:
        chosen = names.replica_domain_name(position.lws, position.group, new_token)
    if chosen is None:
        return injection.PodAdmission(patch=[], errors=[])
    return injection.join_domain(pod, domain=chosen, gate=position.is_leader or not domain_ready)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainStart:
    """A domain a leader's admission named for the first time, whose creation may start at once."""

    namespace: str
    lws: str
    group: int
    domain: str


def domain_to_start(pod: Mapping[str, Any], admitted: injection.PodAdmission) -> DomainStart | None:
    """The domain to create at once for a leader admitted with a domain name new to it (none was recorded on the pod
    before): the planner would create it only once the leader's watch event reaches it. None for any other
    admission (a worker, a refusal, a reinvocation that finds its name recorded)."""
    position = pod_position(pod)
    if isinstance(position, errors.FieldError) or not position.is_leader or admitted.errors or admitted.domain is None:
        return None
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION):
        return None
    return DomainStart(
        namespace=meta.get("namespace", ""), lws=position.lws, group=position.group, domain=admitted.domain
    )
