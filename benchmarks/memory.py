"""Resident memory of mnnvl's controllers against upstream LWS's manager, idle and with thousands of pods.

RSS (VmRSS from /proc) of mnnvl-lws, mnnvl-guardian and the LWS manager is read once idle (controllers just
restarted, nothing of the benchmark created) and once with `--workloads` opted-in LeaderWorkerSets of
`--groups` groups of 2 pods each (default 25 x 100 x 2 = 5,000 pods, Pending: they ask for no existing node)
after every pod exists ungated and the watches have settled, and at its highest (sampled every 2 s) while the
LeaderWorkerSets are deleted and their domains go. Ratios are to the LWS manager's RSS at the same moment
(while deleting: to its own peak). Run: `./dev bench memory --workloads 25 --groups 100`.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import common

from mnnvl_api import keys
from mnnvl_testbed import cluster

COMPONENTS = (f"{keys.LWS_CONTROLLER}-0", f"{keys.GUARDIAN_CONTROLLER}-0", "lws-manager")
SETTLE_SECONDS = 10.0


def sample(bed: cluster.Testbed) -> dict[str, float]:
    return common.rss(bed, COMPONENTS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench memory", description=__doc__)
    parser.add_argument("--workloads", type=int, default=25, help="opted-in LeaderWorkerSets")
    parser.add_argument("--groups", type=int, default=100, help="groups (replicas) per LWS, 2 pods each")
    common.add_common_arguments(parser, "memory")
    arguments = parser.parse_args(argv)
    bed = common.running_testbed(arguments.state_dir)
    common.header("memory", bed)
    api = bed.api()
    time.sleep(SETTLE_SECONDS)
    idle = sample(bed)
    print(f"idle RSS MiB: {idle}", flush=True)
    pods = arguments.workloads * arguments.groups * 2
    with common.namespace(api, "bench-memory") as ns:
        started = time.monotonic()
        common.load(api, ns, arguments.workloads, arguments.groups)
        print(f"{pods} pods created and ungated in {time.monotonic() - started:.0f} s", flush=True)
        time.sleep(SETTLE_SECONDS)
        loaded = sample(bed)
        print(f"{pods} pods RSS MiB: {loaded}", flush=True)
        with common.PeakSampler(bed, COMPONENTS) as deleting:
            for index in range(arguments.workloads):
                common.delete_lws(api, ns, f"model-{index}")
            common.wait_released(api, ns, timeout=300 + pods * 0.2)
    rows = [
        [
            component,
            idle[component],
            loaded[component],
            common.ratio(idle[component], idle["lws-manager"]),
            common.ratio(loaded[component], loaded["lws-manager"]),
            deleting.peak[component],
            common.ratio(deleting.peak[component], deleting.peak["lws-manager"]),
        ]
        for component in COMPONENTS
    ]
    print(f"{arguments.workloads} LWS x {arguments.groups} groups x 2 pods = {pods} pods")
    print(
        common.table(
            [
                "process",
                "idle RSS MiB",
                f"{pods:,} pods RSS MiB",
                "idle vs lws-manager",
                "loaded vs lws-manager",
                "peak while deleting MiB",
                "deleting vs lws-manager",
            ],
            rows,
        )
    )
    plot(idle, loaded, deleting.peak, pods, arguments.plot)


def plot(
    idle: dict[str, float], loaded: dict[str, float], deleting: dict[str, float], pods: int, path: pathlib.Path
) -> None:
    phases = [("idle", idle), (f"{pods:,} pods", loaded), ("peak while deleting", deleting)]
    common.rss_plot(COMPONENTS, phases, path, "Resident memory: mnnvl's controllers vs the LWS manager")


if __name__ == "__main__":
    main()
