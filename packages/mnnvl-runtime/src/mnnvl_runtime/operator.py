"""Running a controller: settings → logs → preflight → metrics → Lease election → kopf with its own registry.

Everything per controller is derived from its `Identity`, so controllers running side by side never touch
each other's finalizers, annotations, Leases, field managers or event sources. A bad setting ends the
process with one line on stderr (exit code 2), a port that cannot be bound likewise (exit code 1). The
liveness endpoint fails once a loop the controller runs for good has ended (see `watch_tasks`), so the
kubelet restarts a controller that would otherwise sit there serving webhooks and reconciling nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any, cast

import kopf

from mnnvl_api import models

from . import controller, heap, identity, kube, leases, logs, metrics, preflight, settings

log = logging.getLogger(__name__)


def kopf_settings(
    who: identity.Identity,
    configuration: models.Configuration,
    *,
    certfile: pathlib.Path | None,
    keyfile: pathlib.Path | None,
    watch_selectors: controller.WatchSelectors,
) -> kopf.OperatorSettings:
    """kopf's settings for one controller: its watches' selectors, own bookkeeping prefixes, no event posting, its
    webhook server (none without a certificate: kopf would start one even with no webhook handler, and stop on the
    missing files)."""
    operator = kopf.OperatorSettings()
    for resource, selector in watch_selectors.items():
        if selector.labels:
            operator.watching.label_selectors[resource] = selector.labels
        if selector.fields:
            operator.watching.field_selectors[resource] = selector.fields
    operator.persistence.finalizer = who.kopf_finalizer
    operator.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=who.bookkeeping_prefix)
    operator.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=who.bookkeeping_prefix, key="last-handled-configuration"
    )
    # kopf would post an Event for every handled pod event; we post our own, on workloads only.
    operator.posting.enabled = False
    operator.posting.reporting_component = who.reporting_component
    operator.scanning.disabled = True
    operator.networking.request_timeout = 30
    operator.watching.connect_timeout = 10
    operator.admission.managed = None  # webhook configurations come from the chart (or the testbed)
    if certfile is not None and keyfile is not None:
        operator.admission.server = kopf.WebhookServer(
            addr=configuration.webhook.host,
            port=configuration.webhook.port,
            certfile=str(certfile),
            pkeyfile=str(keyfile),
            file_check_interval=configuration.webhook.cert_check_interval_seconds,
        )
    return operator


def run(
    who: identity.Identity,
    registry: kopf.OperatorRegistry,
    *,
    preflight: Callable[[kube.Kube, models.Configuration], list[str]],
    watch_selectors: controller.WatchSelectors,
    serves_webhooks: bool = True,
) -> int:
    """The console script of a controller. Returns the exit code. A controller that `serves_webhooks` needs its
    certificate (the chart mounts it only for those)."""
    try:
        process, configuration = settings.load()
    except settings.SettingsError as error:
        print(f"{who.name}: {error}", file=sys.stderr)
        return 2
    endpoints = settings.endpoints(process, configuration)
    logs.configure(who.name, process.log_level)
    try:
        api_client = kube.load_api_client(process.kubeconfig)
    except kube.CredentialsError as error:
        print(f"{who.name}: cannot start: {error}", file=sys.stderr)
        return 1
    client = kube.Kube(api_client, field_manager=who.field_manager)
    problems = preflight(client, configuration)
    if problems:
        for problem in problems:
            log.error("preflight failed", extra={"problem": problem})
            print(f"{who.name}: cannot start: {problem}", file=sys.stderr)
        return 1
    cert_dir = pathlib.Path(configuration.webhook.cert_dir)
    if process.generate_webhook_certificate:
        # Imported here: `cryptography` costs every process 8 MiB of RSS, and only development runs make a
        # certificate (the chart mounts one).
        from . import certs  # noqa: PLC0415

        certs.ensure_webhook_certificate(cert_dir, tuple(process.webhook_hosts.split(",")))
    if endpoints.metrics is not None:
        try:
            metrics.serve(who.name, endpoints.metrics.bind_host, endpoints.metrics.port)
        except OSError as error:
            print(f"{who.name}: cannot serve metrics on {endpoints.metrics.address}: {error}", file=sys.stderr)
            return 1
    timing = leases.Timing(
        lease_duration=configuration.leader_election.lease_duration_seconds,
        renew_deadline=configuration.leader_election.renew_deadline_seconds,
        retry_period=configuration.leader_election.retry_period_seconds,
    )
    elector = leases.LeaderElector(
        leases.single_attempt_client(client),
        namespace=process.namespace,
        name=who.lease_name,
        holder=process.pod_name,
        timing=timing,
    )
    context = controller.Context(
        identity=who, process=process, configuration=configuration, client=client, elector=elector
    )
    _register_login(registry, process)
    _register_liveness(registry)
    operator_settings = kopf_settings(
        who,
        configuration,
        certfile=cert_dir / "tls.crt" if serves_webhooks else None,
        keyfile=cert_dir / "tls.key" if serves_webhooks else None,
        watch_selectors=watch_selectors,
    )
    liveness = None if endpoints.health is None else f"http://{endpoints.health.address}/healthz"
    log.info(
        "starting",
        extra={"gate_enabled": context.gate_enabled, "lease": who.lease_name, "holder": process.pod_name},
    )
    asyncio.run(_serve(context, registry, operator_settings, liveness))
    return 0


async def _serve(
    context: controller.Context,
    registry: kopf.OperatorRegistry,
    operator_settings: kopf.OperatorSettings,
    liveness: str | None,
) -> None:
    election: asyncio.Task[None] | None = None
    trimming = asyncio.create_task(heap.give_back_freed_memory(heap.malloc_trim()), name="heap-trim")
    if context.configuration.leader_election.leader_elect:
        election = asyncio.create_task(context.elector.run(), name="lease-election")
        controller.watch_tasks(election)
    else:
        context.elector.lead_without_lease()
    try:
        await kopf.operator(
            registry=registry,
            settings=operator_settings,
            standalone=True,
            # kopf otherwise names itself after the user, and the image's user (65532) has no passwd entry. (Its
            # parameter's type is a NewType of str that kopf does not export.)
            identity=cast(Any, context.process.pod_name),
            clusterwide=True,
            liveness_endpoint=liveness,
            memo=kopf.Memo(context=context),
        )
    finally:
        background = [trimming] if election is None else [trimming, election]
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)


def _register_login(registry: kopf.OperatorRegistry, process: settings.ProcessSettings) -> None:
    if process.kubeconfig is not None:
        # kopf reads a kubeconfig from $KUBECONFIG only; given as MNNVL_KUBECONFIG, it must reach kopf too.
        os.environ["KUBECONFIG"] = str(process.kubeconfig)

    @kopf.on.login(registry=registry, id="login")
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if process.kubeconfig is not None:
            return kopf.login_with_kubeconfig(**kwargs)
        # In a Pod: the API server at KUBERNETES_SERVICE_HOST:PORT, as the kubernetes client (and so this process's
        # own client adapter) finds it. kopf's service-account login would call https://kubernetes.default.svc
        # instead, which needs cluster DNS (a Pod on the host network with dnsPolicy Default has none).
        return kopf.login_via_client(**kwargs)


def _register_liveness(registry: kopf.OperatorRegistry) -> None:
    # async, so kopf runs it on the event loop that owns the tasks instead of in a worker thread.
    @kopf.on.probe(registry=registry, id="controller-loops")
    async def controller_loops(**_: Any) -> dict[str, int]:
        return controller.check_tasks_running(controller.watched_tasks())


def compute_domain_preflight(
    verbs: tuple[str, ...], reads: tuple[preflight.Access, ...] = ()
) -> Callable[[kube.Kube, models.Configuration], list[str]]:
    """The start-up check of a controller that works on ComputeDomains with `verbs` (and needs `reads` beside
    them): with the gate on, the API must be served and this controller allowed to use it; with the gate off,
    nothing is required."""

    def problems(client: kube.Kube, configuration: models.Configuration) -> list[str]:
        if not configuration.auto_compute_domain:
            return []
        return preflight.compute_domain_problems(client, verbs, reads)

    return problems
