"""Admission webhooks: LeaderWorkerSet stamping and validation, and claim injection into replica-scope pods.

Each handler turns the request into a pure decision (`decisions`) and answers with one patch or one error.
Webhooks have no side effects: they never write to the API.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import kopf

from mnnvl_api import errors, keys, names
from mnnvl_runtime import admission, operator

from . import decisions, state

log = logging.getLogger(__name__)
LWS = (keys.LWS_GROUP, keys.LWS_VERSION, keys.LWS_PLURAL)


AVAILABILITY = admission.ApiAvailability()


def environment(context: operator.Context) -> decisions.Environment:
    served = AVAILABILITY.served(context.client) if context.gate_enabled else False
    return decisions.Environment(gate_enabled=context.gate_enabled, api_served=served)


@kopf.on.mutate(*LWS, id="mutate-leaderworkerset", registry=state.registry)
def mutate_leaderworkerset(body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    with admission.measured("mutate-leaderworkerset", operation) as outcome:
        operations = decisions.template_patch(dict(body), environment(operator.context_of(memo)))
        if operations:
            patch.fns.append(admission.transform(operations))
            outcome.result = "patched"


@kopf.on.validate(*LWS, id="validate-leaderworkerset", registry=state.registry)
def validate_leaderworkerset(body: kopf.Body, memo: Any, warnings: list[str], **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    old: kopf.Body | None = kwargs.get("old")
    with admission.measured("validate-leaderworkerset", operation):
        if operation == "DELETE":
            return
        lws = dict(body)
        found = decisions.lws_errors(lws, dict(old) if old else None, environment(operator.context_of(memo)))
        if found:
            raise admission.reject(found)
        warnings.extend(decisions.lws_warnings(lws))


# async: it reads the watch stores, which only the event loop thread may touch (LWS handlers above run in
# kopf's thread pool and never do).
@kopf.on.mutate("pods", id="mutate-pod", registry=state.registry)
async def mutate_pod(body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    with admission.measured("mutate-pod", operation) as outcome:
        context = operator.context_of(memo)
        if operation != "CREATE" or not context.gate_enabled:
            return
        pod = dict(body)
        position = decisions.pod_position(pod)
        if isinstance(position, errors.FieldError):
            raise admission.reject([position])
        namespace = pod["metadata"].get("namespace", "")
        domain = None if position.is_leader else await _leader_domain(context, namespace, position.leader)
        recorded = (pod["metadata"].get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        known = recorded or domain
        ready = known is not None and state.STORES.domain_ready(namespace, known, position.lws)
        admitted = decisions.admit_pod(pod, domain=domain, new_token=new_token(), domain_ready=ready)
        if admitted.errors:
            raise admission.reject(admitted.errors)
        if admitted.patch:
            patch.fns.append(admission.transform(admitted.patch))
            outcome.result = "patched"
            log.info(
                "pod admitted",
                extra={
                    "namespace": namespace,
                    "pod": pod["metadata"].get("name"),
                    "compute_domain": admitted.domain,
                    "containers": list(admitted.targets),
                    "gated": admitted.gated,
                },
            )


def new_token() -> str:
    return "".join(secrets.choice(names.INCARNATION_TOKEN_ALPHABET) for _ in range(names.INCARNATION_TOKEN_LENGTH))


async def _leader_domain(context: operator.Context, namespace: str, leader: str) -> str | None:
    """The domain recorded on the worker's leader pod: from the watch cache, else read from the API.

    A leader being deleted in the cache may already have a successor the cache has not seen: ask the API.
    """
    for facts in state.STORES.pods.get((namespace, leader.rsplit("-", 1)[0])).values():
        if facts.name == leader and facts.domain and not facts.deleting:
            return facts.domain
    pod = await context.client.aget("v1", "pods", leader, namespace=namespace)
    if pod is None:
        raise kopf.AdmissionError(
            f'leader pod "{leader}" not found; the pod is retried once its leader exists', code=409
        )
    recorded: str | None = (pod["metadata"].get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    return recorded
