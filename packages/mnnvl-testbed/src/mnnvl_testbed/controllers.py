"""Running mnnvl's controllers on the testbed: installed from the chart (`release`), each replica a local process
under its ServiceAccount, with its own ports; the webhook configurations point at replica 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import certs

from . import cluster, image, processes, release, waiting

NAMESPACE = release.NAMESPACE
#: The admission bound the controllers are told on the testbed. Not enforced: its kube-apiserver keeps the 60 s
#: default `--request-timeout`, because writes of the large LWS and DisaggregatedSet CRDs (and their status) take
#: longer than a short one on a loaded machine and the testbed would not come up. Pod admission here takes
#: milliseconds, so the short fence below still outlasts it in practice, but it is not the proven bound.
DECLARED_REQUEST_TIMEOUT_SECONDS = 1.0
DELETION_FENCE_SECONDS = configuration_file.minimum_fence_seconds(DECLARED_REQUEST_TIMEOUT_SECONDS)
STORE_RESYNC_SECONDS = 10.0
#: How long a stopped replica keeps answering webhooks after it reports not ready: the testbed has no Service to
#: drop it (its webhooks point at one replica by URL), so a short drain keeps each stop cheap; a test that needs a
#: longer one sets `shutdown.drainSeconds` in its extra configuration.
DRAIN_SECONDS = 0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replica:
    name: str
    webhook_port: int
    metrics_port: int
    health_port: int
    #: The PYTHONPATH of the mnnvl version the replica runs (`baseline.python_path`); empty: this tree's.
    sources: str = ""


#: The controllers that serve webhooks (mnnvl-topology serves none).
WEBHOOK_SERVERS = frozenset({keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER})


def replica_names(testbed: cluster.Testbed, controller: str) -> list[str]:
    return [name for name in processes.Supervisor(testbed.state_dir).names() if name.startswith(f"{controller}-")]


def stop(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    for name in replica_names(testbed, controller):
        from_image = supervisor.program(name) == "buildah"
        pid = supervisor.owned_pid(name)
        if pid is not None and from_image:
            image.end_run(pid)
        supervisor.stop(name)
        if from_image:
            image.remove_container(image.replica_container(testbed.state_dir, name))


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
    sources: str = "",
) -> list[Replica]:
    """(Re)install `controller` from the chart and (re)start it with `replicas` processes, under its ServiceAccount,
    its webhooks pointing at the first one; `sources`: another mnnvl version's code to run (`Replica.sources`)."""
    stop(testbed, controller)
    work = testbed.state_dir / "controllers" / controller
    cert_dir = work / "certs"
    ca = certs.KeyPair(testbed.ca_cert, testbed.state_dir / "pki" / "ca.key")
    serving = certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key")
    certs.issue(ca, serving, common_name=controller, hosts=("127.0.0.1", "localhost"))
    started = [
        Replica(
            name=f"{controller}-{index}",
            webhook_port=processes.free_port(),
            metrics_port=processes.free_port(),
            health_port=processes.free_port(),
            sources=sources,
        )
        for index in range(replicas)
    ]
    serves_webhooks = controller in WEBHOOK_SERVERS
    installed = release.install(
        testbed, controller, _block_values(controller, gate, extra_config, started[0] if serves_webhooks else None)
    )
    kubeconfig = release.service_account_kubeconfig(testbed, installed, controller)
    supervisor = processes.Supervisor(testbed.state_dir)
    for replica in started:
        command, env = _replica_process(testbed, installed, controller, replica, kubeconfig)
        supervisor.start(replica.name, command, env=env)
    for replica in started:
        _wait_healthy(supervisor, replica, webhook=serves_webhooks)
    _record(testbed, controller, started)
    return started


def roll(
    testbed: cluster.Testbed,
    controller: str,
    *,
    sources: str,
    overlap: Callable[[Replica, Replica], None] | None = None,
) -> list[Replica]:
    """Replace each running replica of `controller` by one running `sources` (`Replica.sources`) under the release as
    installed now, as a Deployment's rolling update does with two replicas (maxSurge 1, maxUnavailable 0): start a
    new replica, wait until it is healthy, then stop an old one. `overlap(old, new)` runs while both are up; then the
    webhooks are pointed at the new replica, as a Service's endpoints follow, before the old one stops."""
    installed = release.rendered(testbed)
    kubeconfig = release.service_account_kubeconfig(testbed, installed, controller)
    supervisor = processes.Supervisor(testbed.state_dir)
    up = running_replicas(testbed, controller)
    next_index = 1 + max(int(r.name.rsplit("-", 1)[1]) for r in started_replicas(testbed, controller))
    for old in list(up):
        new = Replica(
            name=f"{controller}-{next_index}",
            webhook_port=processes.free_port(),
            metrics_port=processes.free_port(),
            health_port=processes.free_port(),
            sources=sources,
        )
        next_index += 1
        command, env = _replica_process(testbed, installed, controller, new, kubeconfig)
        supervisor.start(new.name, command, env=env)
        up.append(new)
        _record(testbed, controller, up)
        _wait_healthy(supervisor, new, webhook=controller in WEBHOOK_SERVERS)
        if overlap is not None:
            overlap(old, new)
        if controller in WEBHOOK_SERVERS:
            point_webhooks_at(testbed, new, controller)
        supervisor.stop(old.name)
        up.remove(old)
        _record(testbed, controller, up)
    return up


def _record(testbed: cluster.Testbed, controller: str, replicas: list[Replica]) -> None:
    path = testbed.state_dir / "controllers" / controller / "replicas.json"
    path.write_text(json.dumps([dataclasses.asdict(r) for r in replicas]))


def _replica_process(
    testbed: cluster.Testbed,
    installed: release.Release,
    controller: str,
    replica: Replica,
    kubeconfig: pathlib.Path,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one replica: as the Deployment's pod would run, but listening on the
    replica's own ports with certificates from the state directory (the chart mounts them from a Secret)."""
    work = testbed.state_dir / "controllers" / controller
    built = os.environ.get(image.CONTROLLER_IMAGE_VARIABLE)
    configuration = installed.configuration(controller)
    pod_environment = release.process_environment(installed, controller, pod_name=replica.name)
    # From the image, the files are where the Deployment mounts them (the chart's certDir and configuration path);
    # as a local process, where the state directory has them.
    chart_cert_dir = configuration.get("webhook", {}).get("certDir", image.DEFAULT_CERT_DIR)
    configuration["webhook"] = {
        **configuration.get("webhook", {}),
        "host": "127.0.0.1",
        "port": replica.webhook_port,
        "certDir": chart_cert_dir if built else str(work / "certs"),
        "certCheckIntervalSeconds": 1,
    }
    if not replica.sources:  # an earlier mnnvl may know no shutdown section
        configuration["shutdown"] = {"drainSeconds": DRAIN_SECONDS, **configuration.get("shutdown", {})}
    config_file = work / f"{replica.name}.yaml"
    config_file.write_text(yaml.safe_dump(configuration))
    command = installed.container(controller)["command"]
    environment = {
        **pod_environment,
        "MNNVL_CONFIG_FILE": pod_environment["MNNVL_CONFIG_FILE"] if built else str(config_file),
        "MNNVL_METRICS_ADDRESS": f"127.0.0.1:{replica.metrics_port}",
        "MNNVL_HEALTH_ADDRESS": f"127.0.0.1:{replica.health_port}",
    }
    if replica.sources:
        if built:
            raise ValueError(f"{replica.name}: another version's sources cannot run in the image of this tree")
        environment["PYTHONPATH"] = replica.sources
    if built:
        files = {
            image.SERVICE_ACCOUNT_DIRECTORY: _service_account_files(testbed, installed, controller, replica),
            environment["MNNVL_CONFIG_FILE"]: config_file,
            chart_cert_dir: work / "certs",
        }
        return _container_run(
            testbed, installed, controller, replica, built=built, command=command, environment=environment, files=files
        ), {}
    # The Deployment's console script, run by this interpreter explicitly: the supervisor recognises its processes
    # by their first argument, which for a script started through its shebang would be the interpreter instead.
    script = pathlib.Path(sys.executable).parent / command[0]
    return [sys.executable, str(script), *command[1:]], {**environment, "KUBECONFIG": str(kubeconfig)}


def _service_account_files(
    testbed: cluster.Testbed, installed: release.Release, controller: str, replica: Replica
) -> pathlib.Path:
    """A directory with what a Pod's ServiceAccount volume holds: a token the API server issues for the controller's
    ServiceAccount, the cluster CA and the namespace."""
    account = testbed.state_dir / "controllers" / controller / f"{replica.name}-serviceaccount"
    account.mkdir(mode=0o750, exist_ok=True)
    token = cluster.service_account_token(testbed, NAMESPACE, installed.service_account(controller))
    (account / "token").touch(mode=0o640)
    (account / "token").write_text(token)
    shutil.copyfile(testbed.ca_cert, account / "ca.crt")
    (account / "namespace").write_text(NAMESPACE)
    return account


def _container_run(
    testbed: cluster.Testbed,
    installed: release.Release,
    controller: str,
    replica: Replica,
    *,
    built: str,
    command: list[str],
    environment: dict[str, str],
    files: dict[str, pathlib.Path],
) -> list[str]:
    """`buildah run` of the replica in a container of its own from image `built`, as its Pod would run: as the
    Deployment's user, with in-cluster credentials (`KUBERNETES_SERVICE_HOST`/`PORT` as the kubelet sets them) and
    `files` (container path → host path: the ServiceAccount's, the configuration, the serving certificate) mounted
    read-only where the Pod has them."""
    # As the kubelet does for a Pod's volumes: its fsGroup owns them and may read them (the serving key is 0600);
    # without an fsGroup, every user may (the volumes' default mode). Only what is mounted. The group's and others'
    # bits are set, not added: after a run without an fsGroup, a later run's key must not stay readable by every user.
    group = installed.volume_group(controller)
    for source in files.values():
        for path in (source, *(source.iterdir() if source.is_dir() else ())):
            readable = 0o050 if path.is_dir() else 0o040
            if group is None:
                readable |= readable >> 3
            else:
                os.chown(path, -1, group)
            path.chmod(path.stat().st_mode & ~0o077 | readable)
    container = image.fresh_container(built, image.replica_container(testbed.state_dir, replica.name))
    root = image.container_root(container)
    return image.run_command(
        container,
        command,
        environment={
            **environment,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(testbed.ports["kube-apiserver"]),
        },
        mounts=[image.Mount(source=source, target=image.resolved(root, target)) for target, source in files.items()],
        user=installed.user(controller),
    )


def run_once(testbed: cluster.Testbed, controller: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `controller` as the release installs it now (nothing re-applied), in the foreground under its
    ServiceAccount, until it exits: how a test sees a start-up failure's exit code and message."""
    installed = release.rendered(testbed)
    replica = Replica(
        name=f"{controller}-once",
        webhook_port=processes.free_port(),
        metrics_port=processes.free_port(),
        health_port=processes.free_port(),
    )
    kubeconfig = release.service_account_kubeconfig(testbed, installed, controller)
    command, env = _replica_process(testbed, installed, controller, replica, kubeconfig)
    return subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, check=False
    )


def _block_values(
    controller: str, gate: bool, extra_config: dict[str, object] | None, webhook_replica: Replica | None
) -> dict[str, Any]:
    """`controller`'s chart block on the testbed: its gate, the testbed's timings, `extra_config` merged over them
    (the guardian's deletion protection is a value of its own: the chart renders its webhooks from it), and its
    webhooks called by URL."""
    configuration: dict[str, Any] = {
        "leaderElection": {
            "leaderElect": True,
            "leaseDurationSeconds": 6,
            "renewDeadlineSeconds": 4,
            "retryPeriodSeconds": 1,
        },
        # A short fence, legal for the declared bound (see DECLARED_REQUEST_TIMEOUT_SECONDS); stores re-list often so
        # tests of missed deletions finish quickly.
        "computeDomain": {
            "apiServerRequestTimeoutSeconds": DECLARED_REQUEST_TIMEOUT_SECONDS,
            "deletionFenceSeconds": DELETION_FENCE_SECONDS,
        },
        "watching": {"storeResyncSeconds": STORE_RESYNC_SECONDS},
    }
    for section, section_values in (extra_config or {}).items():
        merged = configuration.get(section)
        configuration[section] = (
            {**merged, **section_values}
            if isinstance(merged, dict) and isinstance(section_values, dict)
            else section_values
        )
    block: dict[str, Any] = {
        "replicas": 1,
        "featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate},
        "configuration": configuration,
    }
    protection = configuration["computeDomain"].pop("deletionProtection", None)
    if protection is not None:
        block["deletionProtection"] = protection
    if controller == keys.TOPOLOGY_CONTROLLER:
        block["kaiScheduler"] = {"installed": True}
    if webhook_replica is not None:
        block["webhook"] = {"url": f"https://127.0.0.1:{webhook_replica.webhook_port}"}
    return block


def point_webhooks_at(testbed: cluster.Testbed, replica: Replica, controller: str = keys.LWS_CONTROLLER) -> None:
    """Point `controller`'s webhooks at `replica`, through the release.

    In a cluster a Service spreads webhook calls over all ready replicas; here there is no Service, so when a
    replica goes away the testbed re-points the webhooks, as endpoint removal would.
    """
    route_webhooks(testbed, controller, f"https://127.0.0.1:{replica.webhook_port}")


def route_webhooks(testbed: cluster.Testbed, controller: str, url: str) -> None:
    """Call `controller`'s webhooks at `url` (a replica, or a proxy standing in for the Service), via the release."""
    block = release.installed_blocks(testbed)[release.BLOCKS[controller]]
    release.install(testbed, controller, {**block, "webhook": {"url": url}})


def revive(testbed: cluster.Testbed, controller: str, replica: Replica) -> None:
    """Start `replica` of `controller` again after it died, on its own ports, with the release as installed now:
    what the Deployment does for a crashed pod. Returns once it reports healthy."""
    installed = release.rendered(testbed)
    kubeconfig = release.service_account_kubeconfig(testbed, installed, controller)
    command, env = _replica_process(testbed, installed, controller, replica, kubeconfig)
    supervisor = processes.Supervisor(testbed.state_dir)
    supervisor.start(replica.name, command, env=env)
    _wait_healthy(supervisor, replica, webhook=controller in WEBHOOK_SERVERS)


def started_replicas(testbed: cluster.Testbed, controller: str) -> list[Replica]:
    """Every replica `controller` was last started with, running or not."""
    path = testbed.state_dir / "controllers" / controller / "replicas.json"
    return [Replica(**r) for r in json.loads(path.read_text())] if path.exists() else []


def uninstall(testbed: cluster.Testbed, controller: str, *, checked: bool = True) -> None:
    """Stop `controller` and take its block out of the release: its webhooks, RBAC, Configuration and the rest
    are deleted, as disabling it in the chart would. The chart's check of that comes first: when it refuses
    (`release.UninstallRefusedError`) the controller keeps running, as its Deployment does when Helm refuses.
    `checked=False` is `uninstall.check: false`."""
    if checked:
        release.check_uninstall(testbed, controller)
    stop(testbed, controller)
    release.uninstall(testbed, controller, checked=False)  # checked above, while it still ran


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


def running_replicas(testbed: cluster.Testbed, controller: str = keys.LWS_CONTROLLER) -> list[Replica]:
    alive = set(replica_names(testbed, controller))
    return [replica for replica in started_replicas(testbed, controller) if replica.name in alive]


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
