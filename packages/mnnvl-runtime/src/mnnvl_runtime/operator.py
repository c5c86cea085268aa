"""Running a controller: settings → logs → preflight → metrics → Lease election → kopf with its own registry.

Everything per controller is derived from its `Identity`, so controllers running side by side never touch
each other's finalizers, annotations, Leases, field managers or event sources. A bad setting ends the
process with one line on stderr (exit code 2), a port that cannot be bound likewise (exit code 1). The
liveness endpoint fails once a loop the controller runs for good has ended (see `watch_tasks`), so the
kubelet restarts a controller that would otherwise sit there serving webhooks and reconciling nothing; the
readiness endpoint (`health`) passes once the stores are synced and the webhook server answers.

On SIGTERM (or SIGINT) readiness fails at once, a webhook-serving replica keeps answering admission requests for
`shutdown.drainSeconds` so that the Service drops it before it stops listening, then kopf stops; a stop that takes
longer than `shutdown.stopTimeoutSeconds` (a call to an API server that does not answer) ends the process anyway.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pathlib
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, cast

import kopf

from mnnvl_api import models

from . import controller, health, heap, identity, kube, leases, logs, metrics, metrics_access, preflight, settings

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
            guard = _metrics_guard(client, configuration, process, serves_webhooks=serves_webhooks)
            if guard is None:
                metrics.serve(who.name, endpoints.metrics.bind_host, endpoints.metrics.port)
            else:
                metrics.serve(
                    who.name,
                    endpoints.metrics.bind_host,
                    endpoints.metrics.port,
                    server=functools.partial(metrics_access.start_https_server, guard=guard),
                )
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
    operator_settings = kopf_settings(
        who,
        configuration,
        certfile=cert_dir / "tls.crt" if serves_webhooks else None,
        keyfile=cert_dir / "tls.key" if serves_webhooks else None,
        watch_selectors=watch_selectors,
    )
    log.info(
        "starting",
        extra={"gate_enabled": context.gate_enabled, "lease": who.lease_name, "holder": process.pod_name},
    )
    return asyncio.run(_serve(context, registry, operator_settings, endpoints.health, serves_webhooks=serves_webhooks))


def _metrics_guard(
    client: kube.Kube, configuration: models.Configuration, process: settings.ProcessSettings, *, serves_webhooks: bool
) -> metrics_access.Guard | None:
    """What secures the metrics endpoint when `metrics.secure` is on (None: plain HTTP). Raises OSError when the
    certificate cannot be loaded."""
    if not configuration.metrics.secure:
        return None
    certificate = metrics_certificate(
        configuration, serves_webhooks=serves_webhooks, hosts=(process.pod_name, "localhost")
    )
    log.info("serving metrics over HTTPS to reviewed tokens", extra={"certificate": str(certificate.cert)})
    return metrics_access.Guard(reviewer=metrics_access.Reviewer(client), certificate=certificate)


def metrics_certificate(
    configuration: models.Configuration, *, serves_webhooks: bool, hosts: tuple[str, ...]
) -> metrics_access.ServingCertificate:
    """The certificate files of `metrics_access.certificate_directory`, or a self-signed certificate for `hosts` made
    now in a temporary directory (a scraper then skips verification; the bearer token still decides who reads)."""
    directory = metrics_access.certificate_directory(configuration, serves_webhooks=serves_webhooks)
    if directory is None:
        # Imported here: `cryptography` costs every process 8 MiB of RSS, and only this case makes a certificate.
        from . import certs  # noqa: PLC0415

        directory = pathlib.Path(tempfile.mkdtemp(prefix="mnnvl-metrics-"))
        certs.ensure_webhook_certificate(directory, hosts)
    return metrics_access.ServingCertificate(directory / "tls.crt", directory / "tls.key")


async def _serve(
    context: controller.Context,
    registry: kopf.OperatorRegistry,
    operator_settings: kopf.OperatorSettings,
    health_endpoint: settings.Endpoint | None,
    *,
    serves_webhooks: bool,
) -> int:
    configuration = context.configuration
    shutting_down = asyncio.Event()
    started = asyncio.Event()
    probes: asyncio.Server | None = None
    if health_endpoint is not None:
        webhook = (health.local_address(configuration.webhook.host), configuration.webhook.port)
        server = health.HealthServer(
            webhook=webhook if serves_webhooks else None,
            shutting_down=shutting_down.is_set,
            started=started.is_set,
            # mnnvl-topology has no gate and no ComputeDomain store: its stores always count.
            stores_required=context.gate_enabled or not serves_webhooks,
        )
        try:
            probes = await server.serve(health_endpoint.bind_host, health_endpoint.port)
        except OSError as error:
            print(
                f"{context.identity.name}: cannot serve probes on {health_endpoint.address}: {error}", file=sys.stderr
            )
            return 1
    election: asyncio.Task[None] | None = None
    trimming = asyncio.create_task(heap.give_back_freed_memory(heap.malloc_trim()), name="heap-trim")
    if context.configuration.leader_election.leader_elect:
        election = asyncio.create_task(context.elector.run(), name="lease-election")
        controller.watch_tasks(election)
    else:
        context.elector.lead_without_lease()
    try:
        existing = asyncio.all_tasks()  # as kopf.operator() does: what ran before kopf is not kopf's to stop
        stop = asyncio.Event()
        operator_tasks = await kopf.spawn_tasks(
            registry=registry,
            settings=operator_settings,
            standalone=True,
            # kopf otherwise names itself after the user, and the image's user (65532) has no passwd entry. (Its
            # parameter's type is a NewType of str that kopf does not export.)
            identity=cast(Any, context.process.pod_name),
            clusterwide=True,
            stop_flag=stop,
            ready_flag=started,
            memo=kopf.Memo(context=context),
        )
        # After spawn_tasks, whose own handlers would stop kopf at once: these replace them.
        _stop_on_signals(
            shutting_down,
            stop,
            started_before=existing,
            drain=configuration.shutdown.drain_seconds if serves_webhooks else 0.0,
            stop_timeout=configuration.shutdown.stop_timeout_seconds,
        )
        await kopf.run_tasks(operator_tasks, ignored=existing)
    finally:
        background = [trimming] if election is None else [trimming, election]
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if probes is not None:
            probes.close()
    return 0


def _stop_on_signals(
    shutting_down: asyncio.Event,
    stop: asyncio.Event,
    *,
    started_before: set[asyncio.Task[Any]],
    drain: float,
    stop_timeout: float,
) -> None:
    """On the first SIGTERM or SIGINT: not ready at once, the controller's loops and kopf stopped `drain` seconds
    later, and the process ended if it still runs `stop_timeout` seconds after that. A second signal stops at once.
    Loops `started_before` kopf (the Lease election) are `_serve`'s to end, once kopf has stopped."""
    loop = asyncio.get_running_loop()

    def stop_now() -> None:
        # kopf gives tasks it did not start 5 s to end before it cancels them; these loops never end on their own.
        for task in controller.watched_tasks():
            if task not in started_before:
                task.cancel()
        stop.set()

    def on_signal(received: signal.Signals) -> None:
        if shutting_down.is_set():
            stop_now()
            return
        shutting_down.set()
        log.info("shutting down", extra={"signal": received.name, "drain_seconds": drain})
        loop.call_later(drain, stop_now)
        # A thread, not the loop: the loop may be what is stuck (asyncio.run waits for every worker thread's call).
        deadline = threading.Timer(drain + stop_timeout, _stop_overran, args=(drain + stop_timeout,))
        deadline.daemon = True
        deadline.start()

    for received in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(received, on_signal, received)


def _stop_overran(seconds: float) -> None:
    log.error("shutdown did not finish in time, exiting", extra={"seconds": seconds})
    os._exit(1)


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
