"""The admission kit every controller's webhooks share: measured answers, one-error refusals, JSON-patch
mutations, whether the ComputeDomain API is served (re-checked at most every few seconds), and whether a pod
may join a domain, read afresh."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jsonpatch
import kopf

from mnnvl_api import errors, keys
from mnnvl_api.decisions import domains, field_managers, opt_in

from . import controller, kube, metrics, preflight, webhooks

log = logging.getLogger(__name__)
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

    def environment(self, context: controller.Context) -> opt_in.Environment:
        """What admission decisions depend on besides the object; the API is not asked while the gate is off."""
        gate_enabled = context.gate_enabled
        return opt_in.Environment(gate_enabled=gate_enabled, api_served=gate_enabled and self.served(context.client))


class Outcome:
    """The result label of one admission request: allowed unless the handler patched, denied or failed."""

    def __init__(self) -> None:
        self.result = "allowed"


@contextmanager
def measured(webhook: str, operation: str | None) -> Iterator[Outcome]:
    """Counts and times one admission request under `webhook`, labelled with how it ended."""
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


def reject(found: list[errors.FieldError], *, code: int = 422) -> kopf.AdmissionError:
    """One refusal carrying every field error, in the apimachinery shape."""
    message = errors.join(found)
    log.info("admission denied", extra={"errors": message})
    return kopf.AdmissionError(message, code=code)


def transform(operations: list[dict[str, Any]]) -> Callable[[Any], None]:
    """A kopf patch transformation applying JSON-patch `operations` to the body being admitted."""

    def apply(body: Any) -> None:
        jsonpatch.apply_patch(body, operations, in_place=True)

    return apply


def mutate_workload(
    webhook: str, operation: str | None, patch: kopf.Patch, operations: Callable[[], list[dict[str, Any]]]
) -> None:
    """A workload's (LWS, DisaggregatedSet) mutating webhook: measured, applying the JSON patch `operations`
    computes, if any."""
    with measured(webhook, operation) as outcome:
        found = operations()
        if found:
            patch.fns.append(transform(found))
            outcome.result = "patched"


def validate_workload(
    webhook: str,
    operation: str | None,
    warnings: list[str],
    check: Callable[[], tuple[list[errors.FieldError], list[str]]],
) -> None:
    """A workload's validating webhook: measured; refuses with every field error `check` finds, else admits with
    its warnings. A deletion is never refused."""
    with measured(webhook, operation):
        if operation == "DELETE":
            return
        found, advice = check()
        if found:
            raise reject(found)
        warnings.extend(advice)


class OwnUser:
    """The user this process's requests are made as (a SelfSubjectReview), asked once: the user the API server
    names in the admission requests of this process's own writes."""

    def __init__(self) -> None:
        self._name: str | None = None

    async def name(self, client: kube.Api) -> str:
        if self._name is None:
            review = await client.arequest(
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
            found = ((review.get("status") or {}).get("userInfo") or {}).get("username")
            if not found:
                raise kopf.AdmissionError("this controller cannot tell which user it runs as (SelfSubjectReview)")
            self._name = str(found)
        return self._name


async def refuse_impersonation(
    manager: str,
    client: kube.Api,
    own_user: OwnUser,
    *,
    operation: str | None,
    requester: str,
    body: dict[str, Any],
    old: dict[str, Any] | None,
) -> None:
    """The ComputeDomain identity webhook of the controller whose field manager is `manager`: a write as `manager`
    by any user but this controller's own is refused (`field_managers.impersonation_refusal`)."""
    with measured(webhooks.DOMAIN_IDENTITY_WEBHOOK, operation):
        meta, old_meta = body.get("metadata") or {}, (old or {}).get("metadata")
        if operation not in ("CREATE", "UPDATE") or not field_managers.wrote_as(manager, meta, old_meta):
            return
        own = await own_user.name(client)
        refusal = field_managers.impersonation_refusal(
            manager, requester=requester, own_user=own, meta=meta, old_meta=old_meta
        )
        if refusal is not None:
            log.info("impersonation refused", extra={"requester": requester, "compute_domain": meta.get("name")})
            raise kopf.AdmissionError(refusal, code=403)


def register_domain_identity(registry: kopf.OperatorRegistry, manager: str) -> None:
    """Registers on `registry` the ComputeDomain identity webhook (`refuse_impersonation`) of the controller whose
    field manager is `manager`."""
    own_user = OwnUser()

    # async: it asks afresh, once, which user this process is.
    @kopf.on.validate(
        keys.COMPUTE_DOMAIN_GROUP,
        keys.COMPUTE_DOMAIN_VERSION,
        keys.COMPUTE_DOMAIN_PLURAL,
        id=webhooks.DOMAIN_IDENTITY_WEBHOOK,
        registry=registry,
    )
    async def validate_computedomain(body: kopf.Body, memo: Any, userinfo: kopf.UserInfo, **kwargs: Any) -> None:
        old: kopf.Body | None = kwargs.get("old")
        await refuse_impersonation(
            manager,
            controller.context_of(memo).client,
            own_user,
            operation=kwargs.get("operation"),
            requester=str(userinfo.get("username") or ""),
            body=dict(body),
            old=dict(old) if old else None,
        )


def retry(message: str) -> kopf.AdmissionError:
    """A refusal of a pod that its creator (a StatefulSet) retries, and that a later try gets past."""
    log.info("admission deferred", extra={"reason": message})
    return kopf.AdmissionError(f"{message}; the pod is created again by its controller", code=409)


async def joinable(client: kube.Api, namespace: str, domain: str) -> domains.DomainFacts | None:
    """`domain` read afresh for a pod about to join it (None: it does not exist). Raises `retry` when the domain
    is condemned or being deleted: a pod bound to it would run without IMEX, and the fenced deletion relies on no
    pod being admitted onto it."""
    fresh = await client.aget(keys.COMPUTE_DOMAIN_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, domain, namespace=namespace)
    facts = domains.facts_of(fresh) if fresh is not None else None
    refusal = domains.admission_refusal(facts)
    if refusal is not None:
        raise retry(refusal)
    return facts


async def bindable(
    client: kube.Api, namespace: str, domain: str, *, owner_uid: str | None, manager: str, template_exists: bool
) -> bool:
    """Whether a pod joining `domain` may run at once: the domain, read afresh (`joinable`, which refuses a
    condemned or deleting one), is ready for the workload with `owner_uid` (None: no live workload)."""
    facts = await joinable(client, namespace, domain)
    return owner_uid is not None and domains.is_ready(
        facts, owner_uid=owner_uid, manager=manager, template_exists=template_exists
    )
