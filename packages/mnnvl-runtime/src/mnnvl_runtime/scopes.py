"""The scope kit: what makes a scope controller (replica, slice) out of its position rule and its planner.

A scope package describes itself once (`Scope`: its workload kind, its stores, its pure planner, its event texts,
its pod admission, its workload's stamping and validation rules) and `register` builds the rest on its kopf
registry: the watch handlers of every store (`watches`), the reconciler (stores → snapshot → plan →
`ScopeExecutor`), the workload webhooks, the pod webhook and the ComputeDomain identity webhook (their handlers
are `admission`'s), and the webhook configurations that reach them (`Registered.configurations`). `main` is its
console script.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import domains as facts
from mnnvl_api.decisions import injection, plans

from . import (
    admission,
    controller,
    domain_writer,
    executing,
    identity,
    kube,
    operator,
    preflight,
    reconciling,
    stores,
    watches,
    webhooks,
)

Snapshot = TypeVar("Snapshot", bound=plans.ScopeSnapshot[Any, Any])
Snapshot_contra = TypeVar("Snapshot_contra", bound=plans.ScopeSnapshot[Any, Any], contravariant=True)
Stores = TypeVar("Stores", bound=stores.ScopeStores[Any, Any])
log = logging.getLogger(__name__)
#: What every scope controller does to ComputeDomains.
COMPUTE_DOMAIN_VERBS = ("get", "list", "watch", "create", "delete", "patch")


#: What a scope starts in the background once a pod is admitted, given its stores, the pod and the admission.
StartDomain = Callable[[controller.Context, Stores, dict[str, Any], injection.PodAdmission], Awaitable[object] | None]


class FollowUp(Protocol[Snapshot_contra]):
    """What a scope does beyond its plan, after each pass over a workload (the slice scope asks upstream to retry
    LeaderWorkerSets it refused); it may make a domain's deletion news for workloads it names."""

    async def after(self, snapshot: Snapshot_contra) -> None: ...

    def on_domain_deleted(self, namespace: str, name: str) -> list[stores.NamespacedName]: ...

    def on_lease_change(self, leading: bool) -> None: ...


def no_webhooks(client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
    return []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scope(Generic[Snapshot, Stores]):
    #: The controller's name: its field manager and the manager its domains name.
    name: str
    #: The value of the scope label on its pods and domains.
    scope: str
    #: The workload whose domains it manages, as Events refer to it.
    workload_api_version: str
    workload_kind: str
    registry: kopf.OperatorRegistry
    stores: Stores
    plan: Callable[[Snapshot], plans.Plan]
    #: Whether a domain, read afresh, is one the scope made for a workload of this name (identity, not labels).
    is_ours: Callable[[facts.DomainFacts, str], bool]
    #: The Event messages announcing a domain created, and one deleted (by name) for the snapshot's workload.
    created: Callable[[plans.DomainToCreate], str]
    deleted: Callable[[Snapshot, str], str]
    #: The pod webhook's decision, with the fresh reads it rests on; raises `kopf.AdmissionError` to refuse.
    admit_pod: Callable[[controller.Context, Stores, dict[str, Any]], Awaitable[injection.PodAdmission]]
    workload_rules: admission.WorkloadRules
    #: Started in the background after a pod's admission (never for a dry run): creates the domain the admission
    #: named, when the scope can tell at once (`admission.create_domain`).
    start_domain: StartDomain[Stores] | None = None
    #: Validating webhooks of its own beyond the kit's (their handlers are the scope's), by their client config.
    more_validating: Callable[[webhooks.ClientConfig], list[dict[str, Any]]] = no_webhooks
    #: What its webhooks read beside ComputeDomains, for the start-up check.
    reads: tuple[preflight.Access, ...] = ()
    follow_up: Callable[[controller.Context], FollowUp[Snapshot]] | None = None

    @property
    def identity(self) -> identity.Identity:
        return identity.Identity(self.name)

    @property
    def workload_webhook_ids(self) -> tuple[str, str]:
        """The ids (and paths) of its workload's mutating and validating webhooks."""
        return admission.workload_webhook_ids(self.workload_kind)


class ScopeExecutor(Generic[Snapshot]):
    """Applies a scope's plan through the shared executor (`executing`): which domains the plan may touch, what
    the Events on the workload say; then the scope's follow-up, if any."""

    def __init__(
        self, scope: Scope[Snapshot, Any], writer: domain_writer.DomainWriter, follow_up: FollowUp[Snapshot] | None
    ):
        self.scope = scope
        self.applying = executing.Executor(writer)
        self.follow_up = follow_up

    async def apply(self, snapshot: Snapshot, plan: plans.Plan) -> float | None:
        """Apply `plan`; returns in how many seconds this workload must be looked at again (a deletion fence)."""
        scope = self.scope
        if plan.create and not await self.still_current(snapshot):
            plan = dataclasses.replace(plan, create=())

        def deleted(name: str) -> tuple[str, str]:
            gone = snapshot.workload is None or snapshot.workload.uid != snapshot.domains[name].owner_uid
            return "workload_deleted" if gone else "obsolete", scope.deleted(snapshot, name)

        workload = executing.Target(
            namespace=snapshot.namespace,
            reference=self.reference(snapshot),
            belongs=lambda domain: scope.is_ours(domain, snapshot.workload_name),
            created=scope.created,
            deleted=deleted,
        )
        come_back = await self.applying.apply(plan, workload)
        if self.follow_up is not None:
            await self.follow_up.after(snapshot)
        return come_back

    async def still_current(self, snapshot: Snapshot) -> bool:
        """Whether the workload the snapshot names, read afresh, is that incarnation and not being deleted. The
        stores may still hold an earlier workload of that name (deleted and created again while a watch lagged or
        relisted): a domain labelled with its uid would never be the new workload's, and its group would stay
        gated. The watch event of the new workload brings another pass, which creates the domain."""
        if snapshot.workload is None:
            return False
        resource = self.scope.stores.workload_resource
        fresh = await self.applying.writer.client.aget(
            resource.api_version, resource.plural, snapshot.workload_name, namespace=snapshot.namespace
        )
        meta = (fresh or {}).get("metadata") or {}
        current = meta.get("uid") == snapshot.workload.uid and not meta.get("deletionTimestamp")
        if not current:
            log.info(
                "domains not created: the workload was replaced or is being deleted",
                extra={"namespace": snapshot.namespace, "workload": snapshot.workload_name},
            )
        return current

    def reference(self, snapshot: Snapshot) -> kube.Object | None:
        if snapshot.workload is None:
            return None
        return domain_writer.involved(
            self.scope.workload_api_version,
            self.scope.workload_kind,
            snapshot.namespace,
            snapshot.workload_name,
            snapshot.workload.uid,
        )


@dataclasses.dataclass
class Registered(Generic[Snapshot]):
    """A scope controller registered on its registry: the selectors of its watches, and, once kopf runs, its
    reconciler and follow-up."""

    scope: Scope[Snapshot, Any]
    watch_selectors: controller.WatchSelectors = dataclasses.field(default_factory=dict)
    reconciler: reconciling.ScopeReconciler[Snapshot] | None = None
    follow_up: FollowUp[Snapshot] | None = None

    def running(self) -> reconciling.ScopeReconciler[Snapshot]:
        assert self.reconciler is not None, f"{self.scope.name} has not started"
        return self.reconciler

    def configurations(self, client_config: webhooks.ClientConfig) -> list[dict[str, Any]]:
        """Its webhook configurations, for installers (chart, kustomize, testbed) to register; paths are kopf's
        handler ids. The workload webhooks see only workloads that concern AutoComputeDomain (`concerns`), the pod
        webhook only pods stamped for the scope; those still fail closed."""
        scope = self.scope
        rule = webhooks.rule(scope.workload_api_version, scope.workload_rules.plural)
        concerns = scope.workload_rules.concerns
        conditions = (
            webhooks.match_condition(
                "concerns-auto-compute-domain", f"({concerns('object')}) || ({concerns('oldObject')})"
            ),
        )
        mutate, validate = scope.workload_webhook_ids
        return webhooks.scope_configurations(
            scope.name,
            client_config,
            scope=scope.scope,
            mutating=[
                webhooks.entry(
                    scope.name, mutate, rule, client_config, match_conditions=conditions, reinvocationPolicy="Never"
                )
            ],
            validating=[
                webhooks.entry(scope.name, validate, rule, client_config, match_conditions=conditions),
                *scope.more_validating(client_config),
            ],
        )


def register(scope: Scope[Snapshot, Stores]) -> Registered[Snapshot]:
    """Registers everything the scope controller runs on its registry."""
    registered: Registered[Snapshot] = Registered(scope=scope)

    @kopf.on.startup(registry=scope.registry, id="start-reconciler")
    async def start_reconciler(memo: kopf.Memo, **_: Any) -> None:
        context = controller.context_of(memo)
        follow_up = scope.follow_up(context) if scope.follow_up is not None else None
        if follow_up is not None:
            context.elector.on_change.append(follow_up.on_lease_change)
        reconciler = reconciling.ScopeReconciler(
            context,
            scope.stores,
            scope.plan,
            lambda writer: ScopeExecutor(scope, writer, follow_up),
            kind=scope.workload_kind,
            scope=scope.scope,
            resync_seconds=context.configuration.reconciliation.resync_seconds,
        )
        registered.reconciler, registered.follow_up = reconciler, follow_up
        memo["tasks"] = reconciler.start()

    def domain_deleted(body: kopf.Body, deleted: bool) -> list[stores.NamespacedName]:
        follow_up = registered.follow_up
        if not deleted or follow_up is None:
            return []
        # a foreign domain that held a workload back may be gone
        return follow_up.on_domain_deleted(body.metadata.namespace or "", body.metadata.name or "")

    registered.watch_selectors = watches.register(
        scope.registry,
        scope.stores.mirrors,
        lambda touched: registered.running().enqueue(*touched),
        also={keys.COMPUTE_DOMAIN_PLURAL: domain_deleted},
    )

    start_domain = scope.start_domain
    admission.register_pod_webhook(
        scope.registry,
        lambda context, pod: scope.admit_pod(context, scope.stores, pod),
        start_domain=None
        if start_domain is None
        else lambda context, pod, admitted: start_domain(context, scope.stores, pod, admitted),
    )
    admission.register_workload_webhooks(
        scope.registry, scope.workload_api_version, scope.workload_kind, scope.workload_rules
    )
    admission.register_domain_identity(scope.registry, scope.name)
    return registered


def main(registered: Registered[Any]) -> None:
    """The console script of a scope controller."""
    scope = registered.scope
    checks = operator.compute_domain_preflight(COMPUTE_DOMAIN_VERBS, scope.reads)
    sys.exit(operator.run(scope.identity, scope.registry, preflight=checks, watch_selectors=registered.watch_selectors))
