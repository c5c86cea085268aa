"""Running mnnvl's controllers on the testbed as local processes, with their webhooks registered by URL.

Each replica gets its own ports; the webhook configurations point at replica 0. Feature gates and other
settings go into a `Configuration` file, exactly as the chart would render it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
import sys
import urllib.request

import yaml

from mnnvl_api import keys
from mnnvl_lws import registration
from mnnvl_runtime import certs, kube

from . import cluster, processes, waiting

NAMESPACE = "mnnvl-system"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replica:
    name: str
    webhook_port: int
    metrics_port: int
    health_port: int


def replica_names(state: cluster.Testbed, controller: str) -> list[str]:
    return [name for name in processes.Supervisor(state.state_dir).names() if name.startswith(f"{controller}-")]


def stop(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    for name in replica_names(testbed, controller):
        supervisor.stop(name)


def start_lws(
    testbed: cluster.Testbed, *, gate: bool = True, replicas: int = 1, extra_config: dict[str, object] | None = None
) -> list[Replica]:
    """(Re)start mnnvl-lws with `replicas` processes and point its webhooks at the first one."""
    controller = keys.LWS_CONTROLLER
    stop(testbed, controller)
    client = testbed.api()
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    work = testbed.state_dir / "controllers" / controller
    cert_dir = work / "certs"
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    certs.issue(
        ca,
        certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key"),
        common_name=controller,
        hosts=("127.0.0.1", "localhost"),
    )
    supervisor = processes.Supervisor(testbed.state_dir)
    started: list[Replica] = []
    for index in range(replicas):
        replica = Replica(
            name=f"{controller}-{index}",
            webhook_port=processes.free_port(),
            metrics_port=processes.free_port(),
            health_port=processes.free_port(),
        )
        config_file = work / f"{replica.name}.yaml"
        configuration = {
            "apiVersion": "config.lws.x-k8s.io/v1",
            "kind": "Configuration",
            "featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate},
            "webhook": {"host": "127.0.0.1", "port": replica.webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {
                "leaderElect": True,
                "leaseDurationSeconds": 6,
                "renewDeadlineSeconds": 4,
                "retryPeriodSeconds": 1,
            },
            **(extra_config or {}),
        }
        config_file.write_text(yaml.safe_dump(configuration))
        supervisor.start(
            replica.name,
            [sys.executable, "-m", "mnnvl_lws"],
            env={
                "KUBECONFIG": str(testbed.kubeconfig),
                "MNNVL_CONFIG_FILE": str(config_file),
                "MNNVL_NAMESPACE": NAMESPACE,
                "MNNVL_POD_NAME": replica.name,
                "MNNVL_METRICS_ADDRESS": f"127.0.0.1:{replica.metrics_port}",
                "MNNVL_HEALTH_ADDRESS": f"127.0.0.1:{replica.health_port}",
            },
        )
        started.append(replica)
    for replica in started:
        _wait_healthy(supervisor, replica)
    (work / "replicas.json").write_text(json.dumps([dataclasses.asdict(r) for r in started]))
    point_webhooks_at(testbed, started[0])
    return started


def point_webhooks_at(testbed: cluster.Testbed, replica: Replica) -> None:
    """Register mnnvl-lws's webhooks with `replica` as their endpoint.

    In a cluster a Service spreads webhook calls over all ready replicas; here there is no Service, so when a
    replica goes away the testbed re-points the webhooks, as endpoint removal would.
    """
    ca_bundle = base64.b64encode(testbed.ca_cert.read_bytes()).decode()

    def client_config(path: str) -> dict[str, object]:
        return {"url": f"https://127.0.0.1:{replica.webhook_port}{path}", "caBundle": ca_bundle}

    client = testbed.api()
    for configuration in registration.configurations(client_config):
        plural = str(configuration["kind"]).lower() + "s"
        client.apply(configuration, plural)


def running_replicas(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> list[Replica]:
    path = testbed.state_dir / "controllers" / controller / "replicas.json"
    if not path.exists():
        return []
    alive = set(replica_names(testbed, controller))
    return [Replica(**r) for r in json.loads(path.read_text()) if r["name"] in alive]


def unregister(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> None:
    client = testbed.api()
    for kind, plural in (
        ("mutating", "mutatingwebhookconfigurations"),
        ("validating", "validatingwebhookconfigurations"),
    ):
        client.delete(kube.path_of("admissionregistration.k8s.io/v1", plural, name=f"{controller}-{kind}"))


def _wait_healthy(supervisor: processes.Supervisor, replica: Replica) -> None:
    def healthy() -> bool:
        supervisor.ensure_alive(replica.name)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{replica.health_port}/healthz", timeout=2) as response:
                if response.status != 200:
                    return False
            # The webhook server starts beside the watchers; it must answer before webhooks point at it.
            with socket.create_connection(("127.0.0.1", replica.webhook_port), timeout=2):
                return True
        except OSError:
            return False

    try:
        waiting.wait_for(healthy, what=f"{replica.name} to report healthy", timeout=60)
    except waiting.WaitTimeoutError as timeout:
        raise supervisor.fail(replica.name, str(timeout)) from timeout
