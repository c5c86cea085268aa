"""The admission of replica-scope pods (their webhook is the scope kit's): the fresh reads a pod's claim
injection rests on, and the pure decision (`rules`) on them. The decision itself never writes to the API; once a
leader is admitted with a new domain name, the domain's creation starts in the background (`start_domain`), so the
NVIDIA driver prepares it while the pod is being persisted and before its watch event reaches the planner."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import Any

from mnnvl_api import errors, keys, names
from mnnvl_api.decisions import domains, injection, opt_in, ownership, plans, references
from mnnvl_api.models import computedomain
from mnnvl_runtime import admission, controller, domain_writer, kube

from . import planner, rules, state


async def admit(context: controller.Context, stores: state.Stores, pod: dict[str, Any]) -> injection.PodAdmission:
    """The pod webhook's answer (`mnnvl_runtime.scopes`): with the gate off nothing is injected."""
    if not context.gate_enabled:
        return injection.PodAdmission(patch=[], errors=[])
    return await admit_pod(context.client, stores, pod, token=new_token())


async def admit_pod(
    client: kube.Api, stores: state.Stores, pod: dict[str, Any], *, token: str
) -> injection.PodAdmission:
    """The pod webhook's decision, with the fresh reads it rests on; raises `kopf.AdmissionError` to refuse.

    A leader gets a fresh domain for this incarnation; a worker gets its current leader's domain, found by
    fresh reads (the stores may lag behind a group restart). A pod joining an existing domain reads it
    afresh: a condemned or deleting domain admits no one (the fenced deletion relies on this), and only a
    ready one lets the pod run at once (else it is gated)."""
    position = rules.pod_position(pod)
    if isinstance(position, errors.FieldError):
        raise admission.reject([position])
    namespace = pod["metadata"].get("namespace", "")
    if position.is_leader and not await _opted_in(client, stores, namespace, position.lws, _revision_of(pod)):
        return injection.PodAdmission(patch=[], errors=[])  # not ours to manage: no claim, no gate
    domain = None if position.is_leader else await _leader_domain(client, stores, namespace, pod, position)
    found = rules.recorded_name_errors(pod, position, domain)
    if found:
        raise admission.reject(found)
    known = references.recorded_domain(pod) or domain
    ready = known is not None and await _bindable(client, stores, namespace, known, position.lws)
    admitted = rules.admit_pod(pod, domain=domain, new_token=token, domain_ready=ready)
    if admitted.errors:
        raise admission.reject(admitted.errors)
    return admitted


def start_domain(
    context: controller.Context, stores: state.Stores, pod: dict[str, Any], admitted: injection.PodAdmission
) -> Awaitable[bool] | None:
    """Create the domain a leader's admission named (`rules.domain_to_start`) for its LeaderWorkerSet as it is now,
    read afresh: the stores may still hold an earlier incarnation of that name, whose uid would make the domain
    another workload's (and the leader wait for ever). See `admission.create_domain`."""
    start = rules.domain_to_start(pod, admitted)
    if start is None:
        return None  # a worker, or a name already recorded: nothing to start, not even a task
    return create_for_leader(context.client, stores, start, component=context.identity.reporting_component)


async def create_for_leader(
    client: kube.Api, stores: state.Stores, start: rules.DomainStart, *, component: str
) -> bool:
    """`start_domain`'s work once it knows the domain to start; True when it created the domain."""
    fresh = await client.aget(keys.LWS_API_VERSION, keys.LWS_PLURAL, start.lws, namespace=start.namespace)
    workload = None if fresh is None else stores.workload_of(fresh)
    if workload is None or workload.deleting:
        return False
    domain = plans.to_create(workload, start.domain, planner.domain_labels(workload, start.group))
    return await admission.create_domain(
        client,
        computedomain.manifest(
            name=domain.name, namespace=domain.namespace, claim_template=domain.claim_template, labels=domain.labels
        ),
        scope=keys.SCOPE_REPLICA,
        workload=domain_writer.involved(
            keys.LWS_API_VERSION, "LeaderWorkerSet", workload.namespace, workload.name, workload.uid
        ),
        component=component,
        announcement=planner.created(domain),
    )


def new_token() -> str:
    return "".join(secrets.choice(names.INCARNATION_TOKEN_ALPHABET) for _ in range(names.INCARNATION_TOKEN_LENGTH))


async def _opted_in(client: kube.Api, stores: state.Stores, namespace: str, lws: str, revision: str | None) -> bool:
    """Whether the pod's LeaderWorkerSet opted in, or the pod's template revision did (it keeps its revision's
    semantics until the rollout replaces it): from the stores, confirmed afresh when they say no (they may lag
    behind an opt-in). A pod of a workload that did not opt in is left alone: nothing would ever ungate it."""
    known = stores.workload(namespace, lws)
    if known is not None and known.opted_in:
        return True
    fresh = await client.aget(keys.LWS_API_VERSION, keys.LWS_PLURAL, lws, namespace=namespace)
    if fresh is None:
        # Stamped for the replica scope, yet its LeaderWorkerSet is gone: its StatefulSet is about to be deleted by
        # the garbage collector, and its pod would run without the claim.
        raise admission.retry(
            f'LeaderWorkerSet "{lws}" of this pod no longer exists: no pod of it is created until the garbage '
            "collector deletes its StatefulSets"
        )
    annotations = (fresh.get("metadata") or {}).get("annotations") or {}
    if opt_in.is_opted_in(annotations, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION):
        return True
    return revision is not None and await _revision_opted_in(client, stores, fresh, revision)


def _revision_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(keys.LWS_TEMPLATE_REVISION_HASH_LABEL)


async def _revision_opted_in(client: kube.Api, stores: state.Stores, lws: dict[str, Any], revision: str) -> bool:
    """Whether upstream recorded the template revision `revision` of `lws` (this incarnation, by uid) stamped:
    from the stores, read afresh when they do not know it. The pod's label only names the revision: whether it
    was opted in is upstream's record, never the pod's own labels and annotations, which its creator chooses."""
    meta = lws["metadata"]
    namespace, name, uid = meta.get("namespace", ""), meta["name"], meta["uid"]
    if revision in stores.stamped_revisions(namespace, name, uid):
        return True
    selector = f"{keys.LWS_NAME_LABEL}={name},{keys.LWS_TEMPLATE_REVISION_HASH_LABEL}={revision}"
    page = await client.alist_page("apps/v1", "controllerrevisions", namespace=namespace, label_selector=selector)
    found = (rules.template_revision(item) for item in page.items)
    return rules.revision_opted_in(found, lws_uid=uid, revision_hash=revision)


async def _leader_domain(
    client: kube.Api, stores: state.Stores, namespace: str, worker: dict[str, Any], position: rules.PodPosition
) -> str | None:
    """The domain of the worker's current leader incarnation: its StatefulSet and the leader pod it names."""
    owner = ownership.controller_reference(worker["metadata"], "StatefulSet")
    statefulset = await client.aget("apps/v1", "statefulsets", owner["name"], namespace=namespace) if owner else None
    leader = await client.aget("v1", "pods", position.leader, namespace=namespace)
    binding = rules.worker_binding(worker, position, leader, statefulset)
    if binding is None and await _opted_in(client, stores, namespace, position.lws, _revision_of(worker)):
        # Its leader has no domain, yet the worker's workload opted in (now, or at its revision): run alone, it
        # would lack the claim it was stamped for.
        binding = rules.leader_without_domain(position)
    if isinstance(binding, rules.Retry):
        raise admission.retry(binding.message)
    return binding


async def _bindable(client: kube.Api, stores: state.Stores, namespace: str, domain: str, lws: str) -> bool:
    """Whether a pod joining `domain` may run at once: the domain, read afresh (refused when condemned or being
    deleted), is ready for the LeaderWorkerSet as it is now (`_workload_uid`)."""
    facts = await admission.joinable(client, namespace, domain)
    owner_uid = await _workload_uid(client, stores, namespace, lws, facts)
    return owner_uid is not None and domains.is_ready(
        facts,
        owner_uid=owner_uid,
        manager=planner.MANAGER,
        template_exists=stores.shared.template_exists(namespace, names.claim_template_name(domain)),
    )


async def _workload_uid(
    client: kube.Api, stores: state.Stores, namespace: str, lws: str, domain: domains.DomainFacts | None
) -> str | None:
    """The uid of the LeaderWorkerSet named `lws` (None: there is none): from the stores, read afresh when they do
    not know it or name another owner than `domain` does. The stores may still hold a previous LeaderWorkerSet
    of that name (deleted and recreated while a watch relist hid the deletion)."""
    known = stores.workload(namespace, lws)
    if domain is None or (known is not None and known.uid == domain.owner_uid):
        return None if known is None else known.uid
    fresh = await client.aget(keys.LWS_API_VERSION, keys.LWS_PLURAL, lws, namespace=namespace)
    uid = ((fresh or {}).get("metadata") or {}).get("uid")
    return str(uid) if uid else None
