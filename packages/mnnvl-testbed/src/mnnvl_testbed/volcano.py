"""Volcano on the testbed, started only for the tests that ask for it (`ensure_running`), with upstream LWS switched
to Volcano gang scheduling as the seed's "LeaderWorkerSet + Volcano" install sets it.

Volcano v1.15.1 runs as its chart deploys it, without the Deployments: the scheduler with its built-in
configuration (actions enqueue, allocate, backfill; the gang, proportion and predicates plugins among others, the
last with the upstream DRA plugin) and the controller manager's queue and PodGroup controllers (the queue
controller opens the `default` queue the scheduler creates; a closed queue admits nothing). Leader election off,
health checks on 127.0.0.1 ports of their own, the admin kubeconfig (Volcano's RBAC comes with its chart). Volcano's
admission webhooks are not run: they validate and default Volcano Jobs, Queues and PodGroups, which only LWS
writes here. Every CRD the two watch is installed from its source tree: a missing one stalls their caches.
"""

from __future__ import annotations

import pathlib

import yaml

from mnnvl_runtime import kube

from . import building, cluster, crds, processes, versions

SCHEDULER_NAME = "volcano"
PODGROUP_API = "scheduling.volcano.sh/v1beta1"
#: The annotation LWS's pod webhook sets on every pod of a group: the name of the group's PodGroup.
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: What the seed's `--set gangSchedulingManagement.schedulerProvider=volcano` puts in LWS's configuration.
LWS_GANG_SCHEDULING = {"schedulerProvider": "volcano"}
#: Inside Volcano's tree: the CRDs the scheduler and the controller manager watch (apiextensions v1).
CRD_DIRECTORIES = ("config/crd/volcano/bases", "config/crd/jobflow/bases")
SCHEDULER, CONTROLLER_MANAGER = COMPONENTS = tuple(tool.name for tool in versions.VOLCANO_TOOLS)


def install(api: kube.Kube) -> None:
    source = building.source_dir(versions.VOLCANO_TOOLS[0])
    crds.install(
        api,
        [
            yaml.safe_load(path.read_text())
            for directory in CRD_DIRECTORIES
            for path in sorted((source / directory).glob("*.yaml"))
        ],
    )


def commands(testbed: cluster.Testbed, binaries: dict[str, pathlib.Path]) -> dict[str, tuple[list[str], str]]:
    """Each component's command and the URL that answers 200 once it is up."""
    health = {name: f"127.0.0.1:{processes.free_port()}" for name in COMPONENTS}
    common = [f"--kubeconfig={testbed.kubeconfig}", "--leader-elect=false", "--enable-healthz", "--v=2"]
    return {
        SCHEDULER: (
            [
                str(binaries[SCHEDULER]),
                *common,
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--healthz-address={health[SCHEDULER]}",
            ],
            f"http://{health[SCHEDULER]}/healthz",
        ),
        CONTROLLER_MANAGER: (
            [
                str(binaries[CONTROLLER_MANAGER]),
                *common,
                f"--scheduler-name={SCHEDULER_NAME}",
                "--controllers=queue-controller,pg-controller",
                f"--healthz-address={health[CONTROLLER_MANAGER]}",
            ],
            f"http://{health[CONTROLLER_MANAGER]}/healthz",
        ),
    }


def ensure_running(testbed: cluster.Testbed) -> None:
    """Volcano installed and running, and LWS configured for Volcano gang scheduling (restarted if it was not)."""
    supervisor = processes.Supervisor(testbed.state_dir)
    stopped = [name for name in COMPONENTS if not supervisor.alive(name)]
    if stopped:
        binaries = building.ensure_binaries(versions.VOLCANO_TOOLS)
        install(testbed.api())
        # The scheduler keeps a debugging socket; by default under /tmp, shared by every Volcano on the machine.
        environment = {"DEBUG_SOCKET_DIR": str(testbed.state_dir / "volcano")}
        for name, (command, ready_url) in commands(testbed, binaries).items():
            if name in stopped:
                supervisor.start(name, command, env=environment)
                cluster.wait_http(supervisor, name, ready_url, context=None, timeout=90)
    cluster.configure_lws_gang_scheduling(testbed, LWS_GANG_SCHEDULING)


def stop(testbed: cluster.Testbed) -> None:
    """LWS back to no gang scheduling, and Volcano stopped whatever happens."""
    try:
        cluster.configure_lws_gang_scheduling(testbed, None)
    finally:
        supervisor = processes.Supervisor(testbed.state_dir)
        for name in reversed(COMPONENTS):
            supervisor.stop(name)
