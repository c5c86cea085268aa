"""KAI Scheduler on the testbed, started only for the tests that ask for it (`ensure_running`).

KAI v0.16.7 (NVCF's pin) runs as its operator would deploy it, without the operator (whose Deployments kwok could
not run): the scheduler, binder and podgrouper schedule, the podgroup and queue controllers write status. Their
flags are the operator's defaults, with leader election off, listeners on 127.0.0.1 ports of their own and the two
TLS admission webhooks off (they only validate PodGroup and Queue writes). podgroupcontroller v0.16.7 always serves
its metrics on :8080 (it ignores `--metrics-bind-address`), so that port must be free. KAI's own admission
webhook is not run: it only handles fractional-GPU pods. The components use the testbed's admin kubeconfig, since
KAI's RBAC is rendered by its operator. The queues are KAI's documented default pair, unlimited.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from mnnvl_runtime import kube

from . import building, cluster, crds, processes, versions

SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
PARENT_QUEUE = "default-parent-queue"
DEFAULT_QUEUE = "default-queue"
QUEUE_API = "scheduling.run.ai/v2"
PODGROUP_API = "scheduling.run.ai/v2alpha2"
#: KAI's CRDs the components watch (the Topology CRD comes with the testbed's `--topology-crds`).
CRD_FILES = ("scheduling.run.ai_queues.yaml", "scheduling.run.ai_podgroups.yaml", "scheduling.run.ai_bindrequests.yaml")
#: The processes, in start order; each is named after its binary.
COMPONENTS = tuple(tool.name for tool in versions.KAI_TOOLS)
#: podgroupcontroller v0.16.7 always serves its metrics here (it ignores `--metrics-bind-address`).
PODGROUPCONTROLLER_METRICS = 8080
_UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def queues() -> list[dict[str, Any]]:
    """KAI's default parent and leaf queue, with no quota or limit (a queue without resources admits nothing)."""
    resources = {"cpu": _UNLIMITED, "gpu": _UNLIMITED, "memory": _UNLIMITED}
    return [
        {
            "apiVersion": QUEUE_API,
            "kind": "Queue",
            "metadata": {"name": PARENT_QUEUE},
            "spec": {"resources": resources},
        },
        {
            "apiVersion": QUEUE_API,
            "kind": "Queue",
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"parentQueue": PARENT_QUEUE, "resources": resources},
        },
    ]


def install(api: kube.Kube) -> None:
    """KAI's CRDs from its source tree and the default queues."""
    source = building.source_dir(versions.KAI_TOOLS[0]) / versions.KAI_CRDS
    crds.install(api, [yaml.safe_load((source / name).read_text()) for name in CRD_FILES])
    for queue in queues():
        api.apply(queue, "queues")


def commands(testbed: cluster.Testbed, binaries: dict[str, pathlib.Path]) -> dict[str, tuple[list[str], str]]:
    """Each component's command, and the URL that answers 200 once it is up (its metrics: none of them registers
    a health check)."""
    ports = {name: (processes.free_port(), processes.free_port()) for name in COMPONENTS}

    def address(name: str, which: int) -> str:
        return f"127.0.0.1:{ports[name][which]}"

    def binary(name: str) -> str:
        return str(binaries[name])

    scheduler, binder, podgrouper, podgroupcontroller, queuecontroller = COMPONENTS
    return {
        scheduler: (
            [
                binary(scheduler),
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--listen-address={address(scheduler, 0)}",
                f"--plugin-server-port={ports[scheduler][1]}",
                "--v=2",
            ],
            f"http://{address(scheduler, 0)}/metrics",
        ),
        binder: (
            [
                binary(binder),
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--metrics-bind-address={address(binder, 0)}",
                f"--health-probe-bind-address={address(binder, 1)}",
            ],
            f"http://{address(binder, 0)}/metrics",
        ),
        podgrouper: (
            [
                binary(podgrouper),
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--queue-label-key={QUEUE_LABEL}",
                f"--metrics-bind-address={address(podgrouper, 0)}",
                f"--health-probe-bind-address={address(podgrouper, 1)}",
            ],
            f"http://{address(podgrouper, 0)}/metrics",
        ),
        podgroupcontroller: (
            [
                binary(podgroupcontroller),
                f"--scheduler-name={SCHEDULER_NAME}",
                "--enable-podgroup-webhook=false",
                f"--health-probe-bind-address={address(podgroupcontroller, 1)}",
            ],
            f"http://127.0.0.1:{PODGROUPCONTROLLER_METRICS}/metrics",
        ),
        queuecontroller: (
            [
                binary(queuecontroller),
                "--enable-webhook=false",
                f"--metrics-listen-address={address(queuecontroller, 0)}",
            ],
            f"http://{address(queuecontroller, 0)}/metrics",
        ),
    }


def ensure_running(testbed: cluster.Testbed) -> None:
    """KAI installed and every component running (those that exited are started again); the testbed must have
    KAI's Topology CRD (`testing.topology_crds`), which the scheduler watches."""
    if testbed.topology_crds is None:
        raise cluster.TestbedError(
            "KAI Scheduler watches Topologies: install KAI's Topology CRD first (--topology-crds)"
        )
    supervisor = processes.Supervisor(testbed.state_dir)
    stopped = [name for name in COMPONENTS if not supervisor.alive(name)]
    if not stopped:
        return
    install(testbed.api())
    binaries = building.ensure_binaries(versions.KAI_TOOLS)
    environment = {"KUBECONFIG": str(testbed.kubeconfig)}
    for name, (command, ready_url) in commands(testbed, binaries).items():
        if name in stopped:
            supervisor.start(name, command, env=environment)
            cluster.wait_http(supervisor, name, ready_url, context=None, timeout=90)


def stop(testbed: cluster.Testbed) -> None:
    supervisor = processes.Supervisor(testbed.state_dir)
    for name in reversed(COMPONENTS):
        supervisor.stop(name)
