"""Admission webhooks: LeaderWorkerSet stamping and validation, and claim injection into replica-scope pods.

Each handler turns the request into a pure decision (`decisions`) and answers with one patch or one error.
Webhooks have no side effects: they never write to the API.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jsonpatch
import kopf

from mnnvl_api import errors, keys, names
from mnnvl_runtime import kube, metrics, operator, preflight

from . import decisions, state

log = logging.getLogger(__name__)
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
API_CHECK_SECONDS = 10.0


class ApiAvailability:
    """Whether ComputeDomains are served, re-checked at most every few seconds (admission must stay fast)."""

    def __init__(self) -> None:
        self._checked_at = float("-inf")
        self._served = False

    def served(self, client: kube.Kube) -> bool:
        if time.monotonic() - self._checked_at > API_CHECK_SECONDS:
            self._served = preflight.is_served(client, preflight.CD_API, keys.COMPUTE_DOMAIN_PLURAL)
            self._checked_at = time.monotonic()
        return self._served


AVAILABILITY = ApiAvailability()


def environment(context: operator.Context) -> decisions.Environment:
    served = AVAILABILITY.served(context.client) if context.gate_enabled else False
    return decisions.Environment(gate_enabled=context.gate_enabled, api_served=served)


class Outcome:
    """The result label of one admission request: allowed unless the handler patched, denied or failed."""

    def __init__(self) -> None:
        self.result = "allowed"


@contextmanager
def measured(webhook: str, operation: str | None) -> Iterator[Outcome]:
    started = time.monotonic()
    outcome = Outcome()
    try:
        yield outcome
    except kopf.AdmissionError:
        outcome.result = "denied"
        raise
    except Exception:
        outcome.result = "error"
        raise
    finally:
        metrics.ADMISSION_DURATION.labels(webhook=webhook).observe(time.monotonic() - started)
        metrics.ADMISSION_REQUESTS.labels(webhook=webhook, operation=operation or "", result=outcome.result).inc()


def reject(found: list[errors.FieldError]) -> kopf.AdmissionError:
    message = errors.join(found)
    log.info("admission denied", extra={"errors": message})
    return kopf.AdmissionError(message, code=422)


def transform(operations: list[dict[str, Any]]) -> Callable[[Any], None]:
    """A kopf patch transformation applying JSON-patch `operations` to the body being admitted."""

    def apply(body: Any) -> None:
        jsonpatch.apply_patch(body, operations, in_place=True)

    return apply


@kopf.on.mutate(*LWS, id="mutate-leaderworkerset", registry=state.registry)
def mutate_leaderworkerset(body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    with measured("mutate-leaderworkerset", operation) as outcome:
        operations = decisions.template_patch(dict(body), environment(operator.context_of(memo)))
        if operations:
            patch.fns.append(transform(operations))
            outcome.result = "patched"


@kopf.on.validate(*LWS, id="validate-leaderworkerset", registry=state.registry)
def validate_leaderworkerset(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    old: kopf.Body | None = kwargs.get("old")
    with measured("validate-leaderworkerset", operation):
        if operation == "DELETE":
            return
        found = decisions.lws_errors(dict(body), dict(old) if old else None, environment(operator.context_of(memo)))
        if found:
            raise reject(found)


# async: it reads the watch stores, which only the event loop thread may touch (LWS handlers above run in
# kopf's thread pool and never do).
@kopf.on.mutate("pods", id="mutate-pod", registry=state.registry)
async def mutate_pod(body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    operation: str | None = kwargs.get("operation")
    with measured("mutate-pod", operation) as outcome:
        context = operator.context_of(memo)
        if operation != "CREATE" or not context.gate_enabled:
            return
        pod = dict(body)
        position = decisions.pod_position(pod)
        if isinstance(position, errors.FieldError):
            raise reject([position])
        namespace = pod["metadata"].get("namespace", "")
        domain = None if position.is_leader else await _leader_domain(context, namespace, position.leader)
        recorded = (pod["metadata"].get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        known = recorded or domain
        ready = known is not None and state.STORES.domain_ready(namespace, known, position.lws)
        admission = decisions.admit_pod(pod, domain=domain, new_token=new_token(), domain_ready=ready)
        if admission.errors:
            raise reject(admission.errors)
        if admission.patch:
            patch.fns.append(transform(admission.patch))
            outcome.result = "patched"
            log.info(
                "pod admitted",
                extra={
                    "namespace": namespace,
                    "pod": pod["metadata"].get("name"),
                    "compute_domain": admission.domain,
                    "containers": list(admission.targets),
                    "gated": admission.gated,
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
