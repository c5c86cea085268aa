"""Running mnnvl's controllers on the testbed as local processes, with their webhooks registered by URL.

Each replica gets its own ports; the webhook configurations point at replica 0. Feature gates and other
settings go into a `Configuration` file, exactly as the chart would render it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import socket
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml

from mnnvl_api import keys, models
from mnnvl_ds import registration as ds_registration
from mnnvl_guardian import registration as guardian_registration
from mnnvl_lws import registration as lws_registration
from mnnvl_runtime import certs, kube

from . import cluster, processes, waiting

NAMESPACE = "mnnvl-system"
DELETION_FENCE_SECONDS = 2.0
STORE_RESYNC_SECONDS = 10.0
ClientConfig = Callable[[str], dict[str, Any]]
WEBHOOK_KINDS = (
    ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", "mutating"),
    ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", "validating"),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replica:
    name: str
    webhook_port: int
    metrics_port: int
    health_port: int


@dataclasses.dataclass(frozen=True)
class Controller:
    module: str
    #: None for a controller that serves no webhook (mnnvl-topology).
    webhooks: Callable[[ClientConfig, models.Configuration], list[dict[str, Any]]] | None


CONTROLLERS = {
    keys.LWS_CONTROLLER: Controller(
        "mnnvl_lws", lambda client_config, _: lws_registration.configurations(client_config)
    ),
    keys.DS_CONTROLLER: Controller("mnnvl_ds", lambda client_config, _: ds_registration.configurations(client_config)),
    keys.GUARDIAN_CONTROLLER: Controller(
        "mnnvl_guardian",
        lambda client_config, configuration: guardian_registration.configurations(
            client_config, configuration.compute_domain.deletion_protection
        ),
    ),
    keys.TOPOLOGY_CONTROLLER: Controller("mnnvl_topology", None),
}


def replica_names(testbed: cluster.Testbed, controller: str) -> list[str]:
    return [name for name in processes.Supervisor(testbed.state_dir).names() if name.startswith(f"{controller}-")]


def stop(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    for name in replica_names(testbed, controller):
        supervisor.stop(name)


def start_lws(
    testbed: cluster.Testbed, *, gate: bool = True, replicas: int = 1, extra_config: dict[str, object] | None = None
) -> list[Replica]:
    return start(testbed, keys.LWS_CONTROLLER, gate=gate, replicas=replicas, extra_config=extra_config)


def start(
    testbed: cluster.Testbed,
    controller: str,
    *,
    gate: bool = True,
    replicas: int = 1,
    extra_config: dict[str, object] | None = None,
) -> list[Replica]:
    """(Re)start `controller` with `replicas` processes and point its webhooks at the first one."""
    stop(testbed, controller)
    client = testbed.api()
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    work = testbed.state_dir / "controllers" / controller
    cert_dir = work / "certs"
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    serving = certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key")
    certs.issue(ca, serving, common_name=controller, hosts=("127.0.0.1", "localhost"))
    supervisor = processes.Supervisor(testbed.state_dir)
    kubeconfig = controller_kubeconfig(testbed, controller)
    started: list[Replica] = []
    configuration: dict[str, Any] = {}
    for index in range(replicas):
        replica = Replica(
            name=f"{controller}-{index}",
            webhook_port=processes.free_port(),
            metrics_port=processes.free_port(),
            health_port=processes.free_port(),
        )
        configuration = {
            "apiVersion": "config.lws.x-k8s.io/v1",
            "kind": "Configuration",
            "featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate},
            "webhook": {
                "host": "127.0.0.1",
                "port": replica.webhook_port,
                "certDir": str(cert_dir),
                "certCheckIntervalSeconds": 1,
            },
            "leaderElection": {
                "leaderElect": True,
                "leaseDurationSeconds": 6,
                "renewDeadlineSeconds": 4,
                "retryPeriodSeconds": 1,
            },
            # Admission here takes milliseconds, so a short fence still outlasts it; stores re-list often so
            # tests of missed deletions finish quickly.
            "computeDomain": {"deletionFenceSeconds": DELETION_FENCE_SECONDS},
            "watching": {"storeResyncSeconds": STORE_RESYNC_SECONDS},
        }
        for section, values in (extra_config or {}).items():
            merged = configuration.get(section)
            configuration[section] = (
                {**merged, **values} if isinstance(merged, dict) and isinstance(values, dict) else values
            )
        config_file = work / f"{replica.name}.yaml"
        config_file.write_text(yaml.safe_dump(configuration))
        supervisor.start(
            replica.name,
            [sys.executable, "-m", CONTROLLERS[controller].module],
            env={
                "KUBECONFIG": str(kubeconfig),
                "MNNVL_CONFIG_FILE": str(config_file),
                "MNNVL_NAMESPACE": NAMESPACE,
                "MNNVL_POD_NAME": replica.name,
                "MNNVL_METRICS_ADDRESS": f"127.0.0.1:{replica.metrics_port}",
                "MNNVL_HEALTH_ADDRESS": f"127.0.0.1:{replica.health_port}",
            },
        )
        started.append(replica)
    serves_webhooks = CONTROLLERS[controller].webhooks is not None
    for replica in started:
        _wait_healthy(supervisor, replica, webhook=serves_webhooks)
    (work / "replicas.json").write_text(json.dumps([dataclasses.asdict(r) for r in started]))
    (work / "configuration.json").write_text(json.dumps(configuration))
    if serves_webhooks:
        point_webhooks_at(testbed, started[0], controller)
    return started


def point_webhooks_at(testbed: cluster.Testbed, replica: Replica, controller: str = keys.LWS_CONTROLLER) -> None:
    """Register `controller`'s webhooks with `replica` as their endpoint, and drop those it does not serve.

    In a cluster a Service spreads webhook calls over all ready replicas; here there is no Service, so when a
    replica goes away the testbed re-points the webhooks, as endpoint removal would.
    """
    ca_bundle = base64.b64encode(testbed.ca_cert.read_bytes()).decode()

    def client_config(path: str) -> dict[str, Any]:
        return {"url": f"https://127.0.0.1:{replica.webhook_port}{path}", "caBundle": ca_bundle}

    saved = testbed.state_dir / "controllers" / controller / "configuration.json"
    configuration = models.Configuration.model_validate(json.loads(saved.read_text()))
    webhooks = CONTROLLERS[controller].webhooks
    wanted = [] if webhooks is None else webhooks(client_config, configuration)
    client = testbed.api()
    for plural, kind, suffix in WEBHOOK_KINDS:
        if not any(c["kind"] == kind for c in wanted):
            client.delete(kube.path_of("admissionregistration.k8s.io/v1", plural, name=f"{controller}-{suffix}"))
    for webhook_configuration in wanted:
        client.apply(webhook_configuration, str(webhook_configuration["kind"]).lower() + "s")


def unregister(testbed: cluster.Testbed, controller: str) -> None:
    """Remove `controller`'s webhook configurations, as uninstalling it would."""
    client = testbed.api()
    for plural, _, suffix in WEBHOOK_KINDS:
        client.delete(kube.path_of("admissionregistration.k8s.io/v1", plural, name=f"{controller}-{suffix}"))


def user_kubeconfig(testbed: cluster.Testbed, user: str) -> pathlib.Path:
    """A kubeconfig for `user`, authenticated by a client certificate and granted nothing by RBAC."""
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    pair = certs.issue(
        ca,
        certs.KeyPair(testbed.state_dir / "pki" / f"{user}.crt", testbed.state_dir / "pki" / f"{user}.key"),
        common_name=user,
        client=True,
    )
    path = testbed.state_dir / f"{user}.kubeconfig"
    cluster.write_kubeconfig(path, testbed, user, pair)
    return path


def controller_kubeconfig(testbed: cluster.Testbed, controller: str) -> pathlib.Path:
    """A cluster-admin kubeconfig (group `system:masters`) whose user is named after `controller`.

    Rights as the admin kubeconfig's, but the API server's audit log names the controller as `user.username`:
    both controllers send the same user agents (the kubernetes client's and kopf's), so without their own user
    their writes could not be told apart (`./dev bench writes` counts them).
    """
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    pki = testbed.state_dir / "pki"
    pair = certs.issue(
        ca,
        certs.KeyPair(pki / f"{controller}.crt", pki / f"{controller}.key"),
        common_name=controller,
        organizations=("system:masters",),
        client=True,
    )
    path = testbed.state_dir / "controllers" / controller / "admin.kubeconfig"
    cluster.write_kubeconfig(path, testbed, controller, pair)
    return path


def running_replicas(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> list[Replica]:
    path = testbed.state_dir / "controllers" / controller / "replicas.json"
    if not path.exists():
        return []
    alive = set(replica_names(testbed, controller))
    return [Replica(**r) for r in json.loads(path.read_text()) if r["name"] in alive]


def _wait_healthy(supervisor: processes.Supervisor, replica: Replica, *, webhook: bool) -> None:
    def healthy() -> bool:
        supervisor.ensure_alive(replica.name)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{replica.health_port}/healthz", timeout=2) as response:
                if response.status != 200:
                    return False
            if not webhook:
                return True
            # The webhook server starts beside the watchers; it must answer before webhooks point at it.
            with socket.create_connection(("127.0.0.1", replica.webhook_port), timeout=2):
                return True
        except OSError:
            return False

    try:
        waiting.wait_for(healthy, what=f"{replica.name} to report healthy", timeout=60)
    except waiting.WaitTimeoutError as timeout:
        raise supervisor.fail(replica.name, str(timeout)) from timeout
