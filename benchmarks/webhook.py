"""What mnnvl's pod webhook adds to creating a pod, at a steady rate of pod creations.

In a namespace with an opted-in LeaderWorkerSet (no replicas), pods are created by hand at `--rate` per
second for `--seconds`, alternating two kinds that differ in one label only:

- scoped: leader pods of the LWS carrying the scope label mnnvl's stamping gives, so the API server calls
  mnnvl-lws's pod webhook (which records the domain, injects the channel claim and gates the pod);
- plain: the same pods without the scope label, which the webhook's object selector leaves out.

Both go through everything else alike (upstream LWS's pod webhook included). Each create is timed on the
client; the difference of the percentiles is what the webhook adds. mnnvl-lws's own
`mnnvl_admission_duration_seconds` (mutate-pod) is read from its metrics endpoint before and after.
Run: `./dev bench webhook --rate 50 --seconds 20`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import pathlib
import re
import time
import urllib.request
from typing import Any

import common

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers

LWS = "webhook"
#: Upstream LWS's pod webhook refuses a pod of an LWS without it.
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"


def pod(name: str, group: int, *, scoped: bool) -> dict[str, Any]:
    labels = {keys.LWS_NAME_LABEL: LWS, keys.LWS_GROUP_INDEX_LABEL: str(group), keys.LWS_WORKER_INDEX_LABEL: "0"}
    if scoped:
        labels[keys.SCOPE_LABEL] = keys.SCOPE_REPLICA
    container = {"name": "vllm", "image": "registry.example/vllm:1", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {SIZE_ANNOTATION: "2"}},
        "spec": {"containers": [container], "nodeSelector": dict(common.UNSCHEDULABLE)},
    }


#: The goal's bound on what the webhook adds; a bucket of `mnnvl_admission_duration_seconds`.
BOUND_SECONDS = "0.01"


def admission_histogram(bed: cluster.Testbed) -> tuple[float, float, float]:
    """(count, sum in seconds, count within BOUND_SECONDS) of mnnvl-lws's mutate-pod admissions so far."""
    replica = controllers.running_replicas(bed)[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    count = total = within = 0.0
    for line in text.splitlines():
        if line.startswith("mnnvl_admission_duration_seconds_") and 'webhook="mutate-pod"' in line:
            value = float(line.rsplit(" ", 1)[1])
            if re.match(r"mnnvl_admission_duration_seconds_count\b", line):
                count += value
            elif re.match(r"mnnvl_admission_duration_seconds_sum\b", line):
                total += value
            elif f'le="{BOUND_SECONDS}"' in line:
                within += value
    return count, total, within


def timed_create(api: kube.Kube, ns: str, body: dict[str, Any]) -> tuple[bool, float, str]:
    started = time.perf_counter()
    try:
        api.request("POST", kube.path_of("v1", "pods", namespace=ns), body=body)
    except kube.ApiError as error:
        return bool(body["metadata"]["labels"].get(keys.SCOPE_LABEL)), time.perf_counter() - started, str(error.status)
    return bool(body["metadata"]["labels"].get(keys.SCOPE_LABEL)), time.perf_counter() - started, ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench webhook", description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="pod creations per second, both kinds together")
    parser.add_argument("--seconds", type=float, default=20.0)
    common.add_common_arguments(parser, "webhook")
    arguments = parser.parse_args(argv)
    bed = common.running_testbed(arguments.state_dir)
    common.header("webhook", bed)
    api = kube.Kube(bed.api().api, field_manager="mnnvl-bench", attempts=1)  # a failed create is counted, not retried
    total = int(arguments.rate * arguments.seconds)
    scoped: list[float] = []
    plain: list[float] = []
    failures: list[str] = []
    with common.namespace(api, "bench-webhook") as ns:
        common.create_lws(api, ns, common.lws_manifest(LWS, replicas=0))
        time.sleep(2)  # mnnvl-lws's stores see the opted-in LWS
        before = admission_histogram(bed)
        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            futures = []
            start = time.monotonic()
            for index in range(total):
                time.sleep(max(start + index / arguments.rate - time.monotonic(), 0))
                body = pod(f"{LWS}-{index}" if index % 2 == 0 else f"plain-{index}", index, scoped=index % 2 == 0)
                futures.append(pool.submit(timed_create, api, ns, body))
            for future in futures:
                is_scoped, took, failed = future.result()
                if failed:
                    failures.append(failed)
                else:
                    (scoped if is_scoped else plain).append(took)
        after = admission_histogram(bed)
        common.delete_lws(api, ns, LWS)
    admitted = after[0] - before[0]
    server_mean_ms = common.ratio(after[1] - before[1], admitted) * 1e3
    server_within = common.ratio(after[2] - before[2], admitted) * 100
    rows: list[list[object]] = []
    for label, values in (("scoped (mnnvl webhook)", scoped), ("plain (not sent to mnnvl)", plain)):
        rows.append([label, len(values), *(common.percentile(values, q) * 1e3 for q in (50, 99))])
    added = [rows[0][2] - rows[1][2], rows[0][3] - rows[1][3]]  # type: ignore[operator]
    rows.append(["added by the webhook", len(scoped), *added])
    refused = f" ({', '.join(sorted(set(failures)))})" if failures else ""
    print(f"{total} creates at {arguments.rate:g}/s over {arguments.seconds:g} s; failed: {len(failures)}{refused}")
    print(common.table(["pods", "created", "p50 ms", "p99 ms"], rows))
    print(
        f"mnnvl_admission_duration_seconds (mutate-pod): {admitted:.0f} admissions, mean {server_mean_ms:.2f} ms, "
        f"{server_within:.1f}% within {float(BOUND_SECONDS) * 1e3:g} ms"
    )
    plot(scoped, plain, arguments.plot)


def plot(scoped: list[float], plain: list[float], path: pathlib.Path) -> None:
    figure = common.figure(width=7)
    axes = figure.axes[0]
    for label, values in (("scoped: through mnnvl's pod webhook", scoped), ("plain: not sent to mnnvl", plain)):
        common.cumulative(axes, values, label)
    if scoped or plain:
        axes.set_xscale("log")
    axes.set_xlabel("pod create, ms (client side)")
    axes.set_ylabel("fraction of creates")
    axes.set_ylim(0, 1.05)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="lower right")
    common.save(figure, path, "Pod creation latency with and without mnnvl's pod webhook")


if __name__ == "__main__":
    main()
