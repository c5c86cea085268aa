"""The slice scope's admission beyond its workload rules (those are the scope kit's webhooks): refusal of new or
scaled-up slice-scope LeaderWorkerSets of a DisaggregatedSet while the gate is off or their domain's name is taken;
claim injection into slice-scope pods (their webhook is the kit's), and refusal of enrolled roles' pods while the
gate is off. Each turns fresh reads into a pure decision (`rules`); none writes to the API."""

from __future__ import annotations

from typing import Any

import kopf

from mnnvl_api import errors, keys, names
from mnnvl_api.decisions import domains, enrollment, injection, ownership
from mnnvl_runtime import admission, controller, kube

from . import planner, rules, state

LWS = (keys.LWS_GROUP, keys.LWS_VERSION, keys.LWS_PLURAL)


# async: its fresh reads are awaited on the client's own pool instead of holding one of kopf's threads.
@kopf.on.validate(*LWS, id="validate-leaderworkerset", registry=state.registry)
async def validate_leaderworkerset(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    old: kopf.Body | None = kwargs.get("old")
    with admission.measured("validate-leaderworkerset", operation):
        if operation not in ("CREATE", "UPDATE"):
            return
        context = controller.context_of(memo)
        found = await child_errors(
            context.client, dict(body), dict(old) if old else None, gate_enabled=context.gate_enabled
        )
        if found:
            raise admission.reject(found, code=403)


async def child_errors(
    client: kube.Api, lws: dict[str, Any], old: dict[str, Any] | None, *, gate_enabled: bool
) -> list[errors.FieldError]:
    """The LeaderWorkerSet webhook's decision, with the fresh reads it rests on: the ComputeDomain its (slice,
    revision) gets, and, while the gate is off, whether its DisaggregatedSet still enrolls its role."""
    meta = lws.get("metadata") or {}
    position = rules.child_position(meta)
    if position is None or not rules.in_slice_scope(lws):
        return []
    namespace = meta.get("namespace", "")
    found = await client.aget(
        keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, position.domain, namespace=namespace
    )
    owner = ownership.disaggregated_set_reference(meta)
    role_enrolled = (
        not gate_enabled
        and owner is not None
        and await _role_enrolled(client, namespace, position.ds, position.role, owner_uid=str(owner.get("uid")))
    )
    return rules.child_errors(
        lws,
        old,
        gate_enabled=gate_enabled,
        role_enrolled=role_enrolled,
        domain=domains.facts_of(found) if found is not None else None,
    )


async def admit(context: controller.Context, stores: state.Stores, pod: dict[str, Any]) -> injection.PodAdmission:
    """The pod webhook's answer (`mnnvl_runtime.scopes`)."""
    return await admit_pod(context.client, stores, pod, gate_enabled=context.gate_enabled)


async def admit_pod(
    client: kube.Api, stores: state.Stores, pod: dict[str, Any], *, gate_enabled: bool = True
) -> injection.PodAdmission:
    """The pod webhook's decision, with the fresh reads it rests on; raises `kopf.AdmissionError` to refuse.

    The pod joins the domain of its LeaderWorkerSet's (slice, revision) when that LeaderWorkerSet is in the slice
    scope and its DisaggregatedSet opted in; otherwise it is left alone (no claim, and no gate that nothing would
    lift), and only on fresh reads (`_slice_workload`). The domain is read afresh: a condemned or deleting one
    admits no one, and only a ready one lets the pod run at once (else it is gated). With the gate off nothing is
    injected, and a pod of a role its set still enrolls is refused."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace", "")
    lws_name = (meta.get("labels") or {}).get(keys.LWS_NAME_LABEL)
    if not lws_name:
        path = f"metadata.labels[{keys.LWS_NAME_LABEL}]"
        raise admission.reject(
            [errors.forbidden(path, "a slice-scope pod must belong to a LeaderWorkerSet of a DisaggregatedSet")]
        )
    if not gate_enabled:
        await _refuse_while_gate_off(client, namespace, await _fresh_child(client, namespace, lws_name))
        return injection.PodAdmission(patch=[], errors=[])
    found = await _slice_workload(client, stores, pod, namespace, lws_name)
    if found is None:
        return injection.PodAdmission(patch=[], errors=[])
    child, workload = found
    domain = planner.domain_name(workload.name, (child.slice, child.revision))
    ready = await admission.bindable(
        client,
        namespace,
        domain,
        owner_uid=workload.uid,
        manager=planner.MANAGER,
        template_exists=stores.shared.template_exists(namespace, names.claim_template_name(domain)),
    )
    admitted = rules.admit_pod(pod, domain=domain, domain_ready=ready)
    if admitted.errors:
        raise admission.reject(admitted.errors)
    return admitted


async def _slice_workload(
    client: kube.Api, stores: state.Stores, pod: dict[str, Any], namespace: str, lws_name: str
) -> tuple[planner.Child, planner.DisaggregatedSetFacts] | None:
    """The pod's LeaderWorkerSet and its opted-in DisaggregatedSet; None: the pod is not the slice scope's.

    The stores answer only when they hold what the pod says it belongs to (`rules.stores_agree`) and the
    answer is to manage the pod. Otherwise (the stores do not know the LeaderWorkerSet yet, hold a stale one, or
    would leave the pod alone) its LeaderWorkerSet is read afresh and decides: a pod goes without its claim only
    on what the API says now, never on a store that may lag behind a DisaggregatedSet deleted and recreated."""
    stored = stores.child(namespace, lws_name)
    known = stores.workload(namespace, stored.ds_name) if stored is not None else None
    # Agreeing, the stores hold the set controlling the stamped child (same uid): it keeps the child's slice
    # domain, opted in or not (`_opted_in_workload`).
    if stored is not None and known is not None and stored.slice_scope and rules.stores_agree(pod, stored, known):
        return stored, known
    child = await _fresh_child(client, namespace, lws_name)
    if child is None or not child.slice_scope:
        return None
    workload = await _opted_in_workload(client, stores, namespace, child)
    if workload is None:
        # Stamped for the slice scope, yet its DisaggregatedSet is gone (or another incarnation holds the name):
        # an orphan the garbage collector is about to delete. Its pod would run without the claim its slice's
        # pods carry, so it is refused until the collector removes its LeaderWorkerSet.
        raise admission.retry(rules.orphan_pod_refusal(lws_name, child.ds_name))
    return child, workload


async def _fresh_child(client: kube.Api, namespace: str, lws_name: str) -> planner.Child | None:
    """The pod's LeaderWorkerSet, read afresh (None: not one of a DisaggregatedSet); refused for retry while it
    is not found."""
    fresh = await client.aget(keys.LWS_API_VERSION, keys.LWS_PLURAL, lws_name, namespace=namespace)
    if fresh is None:
        raise admission.retry(f'LeaderWorkerSet "{lws_name}" of this pod is not found')
    return state.child_facts(fresh)


async def _refuse_while_gate_off(client: kube.Api, namespace: str, child: planner.Child | None) -> None:
    """With the gate off no claim is injected, so a pod of a slice-scope LeaderWorkerSet whose role its
    DisaggregatedSet still enrolls would run without the channel its slice's other pods carry: it is refused,
    and its StatefulSet creates it again, until the gate is re-enabled or the annotation removed. Any other pod
    is left alone."""
    if child is None or not child.slice_scope:
        return
    if await _role_enrolled(client, namespace, child.ds_name, child.role, owner_uid=child.owner_uid):
        position = rules.Position(ds=child.ds_name, slice=child.slice, revision=child.revision, role=child.role)
        raise admission.retry(rules.gate_off_pod_refusal(position))


async def _role_enrolled(client: kube.Api, namespace: str, ds: str, role: str, *, owner_uid: str) -> bool:
    """Whether the DisaggregatedSet `ds` of `owner_uid`, read afresh, enrolls `role` in slice domains now."""
    fresh = await client.aget(keys.DS_API_VERSION, keys.DS_PLURAL, ds, namespace=namespace)
    model = rules.parse(fresh) if fresh is not None else None
    return (
        model is not None
        and model.metadata.uid == owner_uid
        and enrollment.enroll_roles(model).scopes.get(role) is enrollment.RoleScope.SLICE
    )


async def _opted_in_workload(
    client: kube.Api, stores: state.Stores, namespace: str, child: planner.Child
) -> planner.DisaggregatedSetFacts | None:
    """The DisaggregatedSet that controls `child` (a slice-scope LeaderWorkerSet), when it opted in, or when it
    opted out since (a stamped child keeps its revision's slice domain until the rollout drains it: upstream
    never updates a child's templates): from the stores, confirmed afresh when they say no (they may lag
    behind an opt-in or a new DisaggregatedSet)."""

    def fits(workload: planner.DisaggregatedSetFacts | None) -> bool:
        return workload is not None and workload.uid == child.owner_uid and (workload.opted_in or child.slice_scope)

    known = stores.workload(namespace, child.ds_name)
    if fits(known):
        return known
    fresh = await client.aget(keys.DS_API_VERSION, keys.DS_PLURAL, child.ds_name, namespace=namespace)
    found = state.workload_facts(fresh) if fresh is not None else None
    return found if fits(found) else None
