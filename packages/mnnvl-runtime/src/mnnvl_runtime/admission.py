"""The admission kit every controller's webhooks share: measured answers, one-error refusals, JSON-patch
mutations, whether the ComputeDomain API is served (re-checked at most every few seconds), and whether a pod
may join a domain, read afresh."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import jsonpatch
import kopf

from mnnvl_api import errors, events, keys
from mnnvl_api.decisions import domains, field_managers, injection, opt_in
from mnnvl_api.decisions.patches import JsonPatch

from . import controller, kube, metrics, posting, preflight, webhooks

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadRules:
    """A scope's own rules for its workload kind, pure functions of the object as written, which the kit serves as
    the `mutate-<kind>` and `validate-<kind>` webhooks."""

    plural: str
    #: The JSON patch stamping (or unstamping) the workload's templates.
    stamp: Callable[[Mapping[str, Any], opt_in.Environment], JsonPatch]
    #: Every field error of the workload (after mutation), given the object before an update (None on create).
    errors: Callable[[Mapping[str, Any], Mapping[str, Any] | None, opt_in.Environment], list[errors.FieldError]]
    #: What is allowed but probably not meant: admitted, with these warnings.
    warnings: Callable[[Mapping[str, Any]], list[str]]
    #: CEL: whether the object in a variable (`object` or `oldObject`, null when the request has none) concerns
    #: AutoComputeDomain. Only such workloads, before or after the change, reach the webhooks, so no other
    #: workload depends on this controller being available. It must never fail to evaluate.
    concerns: Callable[[str], str]


def workload_webhook_ids(kind: str) -> tuple[str, str]:
    """The ids (and paths) of a workload kind's mutating and validating webhooks."""
    return f"mutate-{kind.lower()}", f"validate-{kind.lower()}"


def register_workload_webhooks(
    registry: kopf.OperatorRegistry, api_version: str, kind: str, rules: WorkloadRules
) -> None:
    """Registers on `registry` a scope's workload webhooks: its `rules`, answered with one patch, or every field
    error in one refusal. They have no side effects: they never write to the API."""
    group, _, version = api_version.rpartition("/")
    mutate_id, validate_id = workload_webhook_ids(kind)
    availability = ApiAvailability()

    @kopf.on.mutate(group, version, rules.plural, id=mutate_id, registry=registry)
    def mutate(body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
        def stamp() -> JsonPatch:
            return rules.stamp(dict(body), availability.environment(controller.context_of(memo)))

        mutate_workload(mutate_id, kwargs.get("operation"), patch, stamp)

    @kopf.on.validate(group, version, rules.plural, id=validate_id, registry=registry)
    def validate(body: kopf.Body, memo: Any, warnings: list[str], **kwargs: Any) -> None:
        old: kopf.Body | None = kwargs.get("old")

        def check() -> tuple[list[errors.FieldError], list[str]]:
            environment = availability.environment(controller.context_of(memo))
            workload = dict(body)
            return rules.errors(workload, dict(old) if old else None, environment), rules.warnings(workload)

        validate_workload(validate_id, kwargs.get("operation"), warnings, check)


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


#: What a scope starts once a pod is admitted (not for a dry run), in the background: given the pod as it came and
#: the admission, the work that creates the domain the admission named, or None when there is none to create (no
#: task is started then).
StartDomain = Callable[[controller.Context, dict[str, Any], injection.PodAdmission], Awaitable[object] | None]


class Background:
    """Tasks an admission starts and does not wait for: each is kept until it ends (asyncio holds only weak
    references to tasks), and a failure is logged, never raised into anyone's request."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[object]] = set()

    def start(self, work: Awaitable[object], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[object]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background admission work failed", extra={"task": task.get_name()}, exc_info=task.exception())


def register_pod_webhook(
    registry: kopf.OperatorRegistry,
    admit: Callable[[controller.Context, dict[str, Any]], Awaitable[injection.PodAdmission]],
    *,
    start_domain: StartDomain | None = None,
) -> None:
    """Registers on `registry` a scope's pod webhook (`mutate-pod`): `admit`'s patch (the claim, the recorded domain,
    the scheduling gate) for a pod being created, or its refusal; then, unless the request is a dry run,
    `start_domain` in the background (its webhook says `sideEffects: NoneOnDryRun`)."""
    background = Background()

    # async: it reads the watch stores, which only the event loop thread may touch.
    @kopf.on.mutate("pods", id=webhooks.POD_WEBHOOK, registry=registry)
    async def mutate_pod(body: kopf.Body, patch: kopf.Patch, memo: Any, dryrun: bool, **kwargs: Any) -> None:
        operation: str | None = kwargs.get("operation")
        with measured(webhooks.POD_WEBHOOK, operation) as outcome:
            if operation != "CREATE":
                return
            pod = dict(body)
            context = controller.context_of(memo)
            admitted = await admit(context, pod)
            work = start_domain(context, pod, admitted) if start_domain is not None and not dryrun else None
            if work is not None:
                background.start(work, f"start-domain-{admitted.domain}")
            if admitted.patch:
                patch.fns.append(transform(admitted.patch))
                outcome.result = "patched"
                log.info(
                    "pod admitted",
                    extra={
                        "namespace": pod["metadata"].get("namespace", ""),
                        "pod": pod["metadata"].get("name"),
                        "compute_domain": admitted.domain,
                        "containers": list(admitted.targets),
                        "gated": admitted.gated,
                    },
                )


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


async def create_domain(
    client: kube.Api,
    manifest: kube.Object,
    *,
    scope: str,
    workload: kube.Object,
    component: str,
    announcement: str,
) -> bool:
    """Create a domain an admission named, without the Lease: any replica may serve the webhook. Only a create,
    which changes nothing that exists (409: it exists, made by the planner or anyone, whose next pass tells which);
    a domain whose pod is then refused is not recorded by any pod and goes by the planner's fenced deletion. A
    failure is logged and left to the planner, which creates the domain once the pod's watch event reaches it.
    True when created."""
    meta = manifest["metadata"]
    fields = {"namespace": meta["namespace"], "compute_domain": meta["name"]}
    try:
        await client.acreate(manifest, keys.COMPUTE_DOMAIN_PLURAL)
    except kube.ApiError as error:
        if error.status != 409:
            log.warning("compute domain not created at admission", extra={**fields, "error": str(error)})
        return False
    metrics.DOMAINS_CREATED_AT_ADMISSION.labels(scope=scope).inc()
    log.info("compute domain created at admission", extra=fields)
    await posting.post(
        client,
        posting.event_for(
            workload,
            reason=events.COMPUTE_DOMAIN_CREATED_REASON,
            message=announcement,
            warning=False,
            component=component,
        ),
    )
    return True
