"""Resident memory of mnnvl-topology against upstream LWS's manager, idle and with tens of thousands of pods of
workloads that are none of mnnvl's business.

mnnvl-topology watches every pod and node without a label selector (its census counts pods holding a GPU or a
channel, its fit check looks at any unschedulable pod KAI places), so unlike the other controllers its memory can
grow with a cluster's unrelated pods. The bench testbed gets KAI's and Grove's CRDs (the demo's pins), which
mnnvl-topology needs, and mnnvl-topology is (re)started on it from this tree with its default configuration.

RSS (VmRSS from /proc) of mnnvl-topology and the LWS manager is read idle (nothing of the benchmark created),
with `--pods` pods (default 20,000) of plain Deployments (`--per-deployment` replicas each) after every pod exists
and the watches have settled, and at its highest (sampled every 2 s) while the pods are created and while the
Deployments are deleted and their pods go. The pods opt in to nothing, ask for 4 GPUs (a GPU cluster's pods do,
and mnnvl-topology keeps a few facts about each pod holding a GPU) and for a node no testbed has, so they stay
Pending. Ratios are to the LWS manager's RSS at the same moment (the peak: to its own peak). mnnvl-topology is
stopped at the end. Run: `./dev bench topology-memory --pods 20000`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import common

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import controllers, demo, testing

TOPOLOGY = f"{keys.TOPOLOGY_CONTROLLER}-0"
COMPONENTS = (TOPOLOGY, "lws-manager")
SETTLE_SECONDS = 10.0
#: Seconds per pod a phase may take, beyond 300 s: the testbed's kube-controller-manager creates pods at up to
#: 200 a second, on cores the API server shares.
SECONDS_PER_POD = 0.05


def deployment(index: int, replicas: int) -> dict[str, Any]:
    name = f"app-{index}"
    labels = {"app": name}
    container = {"name": "app", "image": "registry.example/app:1", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "nodeSelector": dict(common.UNSCHEDULABLE)},
            },
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench topology-memory", description=__doc__)
    parser.add_argument("--pods", type=int, default=20_000, help="pods of unrelated Deployments")
    parser.add_argument("--per-deployment", type=int, default=500, help="replicas of each Deployment")
    common.add_common_arguments(parser, "topology-memory")
    arguments = parser.parse_args(argv)
    pods: int = arguments.pods
    sizes = [min(arguments.per_deployment, pods - start) for start in range(0, pods, arguments.per_deployment)]
    bed = common.running_testbed(
        arguments.state_dir, started=(keys.TOPOLOGY_CONTROLLER,), topology_crds=demo.TOPOLOGY_CRDS
    )
    try:
        common.header("topology-memory", bed)
        api = bed.api()
        time.sleep(SETTLE_SECONDS)  # the controller's start-up lists are done and its heap has settled
        idle = common.rss(bed, COMPONENTS)
        with common.namespace(api, "bench-topology-memory") as ns:
            started = time.monotonic()
            with common.PeakSampler(bed, COMPONENTS) as creating:
                for index, replicas in enumerate(sizes):
                    api.request(
                        "POST", kube.path_of("apps/v1", "deployments", namespace=ns), body=deployment(index, replicas)
                    )
                testing.wait_for(
                    lambda: common.count(api, "v1", "pods", ns) >= pods,
                    what=f"{pods} pods",
                    state=lambda: f"{common.count(api, 'v1', 'pods', ns)} pods",
                    timeout=300 + SECONDS_PER_POD * pods,
                    interval=2,
                )
            print(f"{pods} pods created in {time.monotonic() - started:.0f} s", flush=True)
            time.sleep(SETTLE_SECONDS)  # the last events (the scheduler marking pods unschedulable) are handled
            loaded = common.rss(bed, COMPONENTS)
            with common.PeakSampler(bed, COMPONENTS) as deleting:
                for index in range(len(sizes)):
                    api.delete(kube.path_of("apps/v1", "deployments", namespace=ns, name=f"app-{index}"))
                testing.wait_for(
                    lambda: common.count(api, "v1", "pods", ns) == 0,
                    what="the pods to go",
                    state=lambda: f"{common.count(api, 'v1', 'pods', ns)} pods",
                    timeout=300 + SECONDS_PER_POD * pods,
                    interval=2,
                )
    finally:
        # Stopped and uninstalled: a controller installed and not running is one that is down (`kubectl mnnvl
        # doctor` fails it), which a test session sharing this testbed would then see.
        controllers.uninstall(bed, keys.TOPOLOGY_CONTROLLER)
    peak = {c: max(creating.peak[c], deleting.peak[c]) for c in COMPONENTS}
    rows = [
        [
            component,
            idle[component],
            loaded[component],
            peak[component],
            common.ratio(idle[component], idle["lws-manager"]),
            common.ratio(loaded[component], loaded["lws-manager"]),
            common.ratio(peak[component], peak["lws-manager"]),
        ]
        for component in COMPONENTS
    ]
    print(f"{len(sizes)} Deployments, {pods} pods (not opted in, Pending)")
    print(
        common.table(
            [
                "process",
                "idle RSS MiB",
                f"{pods:,} pods RSS MiB",
                "peak MiB",
                "idle vs lws-manager",
                "loaded vs lws-manager",
                "peak vs lws-manager's peak",
            ],
            rows,
        )
    )
    phases = [("idle", idle), (f"{pods:,} pods", loaded), ("peak (creating, deleting)", peak)]
    common.rss_plot(COMPONENTS, phases, arguments.plot, "Resident memory: mnnvl-topology vs the LWS manager")


if __name__ == "__main__":
    main()
