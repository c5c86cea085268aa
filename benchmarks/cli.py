"""How long `kubectl mnnvl` takes on a cluster with thousands of pods, against what it cannot avoid: one paged list
of the same pods (what `kubectl get pods -A -o json` costs), measured in the same run.

`--workloads` opted-in LeaderWorkerSets of `--groups` groups of 2 pods each (default 25 x 100 x 2 = 5,000 pods,
Pending: they ask for no existing node) are created first, gated or not: the commands read them alike. Then, each
`--repeats` times (the median is reported): the baseline pod list, `status` computed in process (its lists and the
summary), and `status -o json`, `gc` (the dry run) and `explain POD` as the console script a user runs (Python's
start-up included). Every command makes one list per resource kind, never a GET per object. Run:
`./dev bench cli --workloads 25 --groups 100`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import common

from mnnvl_api import keys
from mnnvl_cli import reading, status
from mnnvl_testbed import cluster


def seconds(action: Callable[[], object], repeats: int) -> float:
    """The median wall time of `repeats` runs of `action`."""
    taken = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        taken.append(time.perf_counter() - started)
    return statistics.median(taken)


def console_script(bed: cluster.Testbed, *args: str) -> Callable[[], object]:
    def run() -> None:
        subprocess.run(
            [sys.executable, "-m", "mnnvl_cli", *args, "--kubeconfig", str(bed.kubeconfig)],
            check=True,
            capture_output=True,
            timeout=600,
        )

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench cli", description=__doc__)
    parser.add_argument("--workloads", type=int, default=25, help="opted-in LeaderWorkerSets")
    parser.add_argument("--groups", type=int, default=100, help="groups (replicas) per LWS, 2 pods each")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command; the median is reported")
    common.add_common_arguments(parser, "cli")
    arguments = parser.parse_args(argv)
    bed = common.running_testbed(arguments.state_dir)
    common.header("cli", bed)
    api = bed.api()
    client = reading.connect(bed.kubeconfig, None)
    pods = arguments.workloads * arguments.groups * 2
    with common.namespace(api, "bench-cli") as ns:
        started = time.monotonic()
        common.load(api, ns, arguments.workloads, arguments.groups, ungated=False)
        print(f"{pods} pods created in {time.monotonic() - started:.0f} s", flush=True)
        repeats = arguments.repeats
        baseline = seconds(lambda: reading.list_all(client, "v1", "pods", label_selector=keys.LWS_NAME_LABEL), repeats)
        measured = {
            "status, in process": seconds(
                lambda: status.as_data(status.statuses(reading.read_cluster(client, None))), repeats
            ),
            "kubectl mnnvl status -o json": seconds(console_script(bed, "status", "-o", "json"), repeats),
            "kubectl mnnvl gc": seconds(console_script(bed, "gc"), repeats),
            "kubectl mnnvl explain POD": seconds(console_script(bed, "explain", "-n", ns, "model-0-0"), repeats),
        }
    rows = [["one list of the pods (baseline)", baseline, 1.0]]
    rows += [[what, taken, common.ratio(taken, baseline)] for what, taken in measured.items()]
    print(f"{arguments.workloads} LWS x {arguments.groups} groups x 2 pods = {pods} pods; median of {repeats} runs")
    print(common.table(["command", "seconds", "vs one pod list"], rows))
    figure = common.figure(width=8)
    axes = figure.axes[0]
    axes.barh([str(row[0]) for row in rows], [float(row[1]) for row in rows])  # type: ignore[arg-type]
    axes.set_xlabel("seconds (median)")
    axes.invert_yaxis()
    common.save(figure, arguments.plot, f"kubectl mnnvl with {pods:,} pods")


if __name__ == "__main__":
    main()
