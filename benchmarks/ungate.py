"""How long a group waits for mnnvl, against how long it waits for upstream LWS, for bursts of new groups.

One opted-in LeaderWorkerSet (`size: 2`) with N replicas is created at once. Two watches (pods and
StatefulSets of the namespace) stamp events on arrival. For each group:

- t0: its leader pod is first seen;
- mnnvl: the leader is first seen without mnnvl's scheduling gate (its ComputeDomain was created and became
  ready, and mnnvl-lws removed the gate);
- upstream: the worker StatefulSet LWS creates for the leader (named like it) is first seen.

Both are latencies from t0; the ratio mnnvl / upstream is reported at p50 and p99. Between bursts the LWS is
deleted and the namespace drained (pods, StatefulSets, ComputeDomains). Run: `./dev bench ungate --bursts 1 50 200`.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from typing import Any

import common

from mnnvl_api import keys
from mnnvl_runtime import kube


class Burst:
    """What the watches saw of one burst, by group index (arrival times on time.monotonic)."""

    def __init__(self, lws: str) -> None:
        self.leader = re.compile(rf"^{re.escape(lws)}-(\d+)$")
        self.lock = threading.Lock()
        self.first_seen: dict[int, float] = {}
        self.ungated: dict[int, float] = {}
        self.statefulset: dict[int, float] = {}

    def on_pod(self, arrived: float, kind: str, pod: dict[str, Any]) -> None:
        match = self.leader.match(pod["metadata"]["name"])
        if match is None or kind == "DELETED":
            return
        group = int(match.group(1))
        gates = {gate["name"] for gate in pod["spec"].get("schedulingGates") or []}
        with self.lock:
            self.first_seen.setdefault(group, arrived)
            if keys.SCHEDULING_GATE not in gates:
                self.ungated.setdefault(group, arrived)

    def on_statefulset(self, arrived: float, kind: str, statefulset: dict[str, Any]) -> None:
        match = self.leader.match(statefulset["metadata"]["name"])
        if match is not None and kind != "DELETED":
            with self.lock:
                self.statefulset.setdefault(int(match.group(1)), arrived)

    def done(self, groups: int) -> bool:
        with self.lock:
            return len(self.ungated) >= groups and len(self.statefulset) >= groups

    def latencies(self) -> tuple[list[float], list[float]]:
        """(mnnvl, upstream) latencies in seconds, over the groups each side finished."""
        with self.lock:
            mnnvl = [self.ungated[g] - t0 for g, t0 in self.first_seen.items() if g in self.ungated]
            upstream = [self.statefulset[g] - t0 for g, t0 in self.first_seen.items() if g in self.statefulset]
        return mnnvl, upstream


def run_burst(api: kube.Kube, ns: str, groups: int, timeout: float) -> tuple[Burst, int]:
    """Create the LWS, wait until every group is ungated and has its StatefulSet (or the timeout), tear down."""
    lws = f"burst-{groups}"
    burst = Burst(lws)
    watch_errors = 0
    with (
        common.Watch(api, kube.path_of("v1", "pods", namespace=ns), burst.on_pod) as pods,
        common.Watch(api, kube.path_of("apps/v1", "statefulsets", namespace=ns), burst.on_statefulset) as sets,
    ):
        common.create_lws(api, ns, common.lws_manifest(lws, replicas=groups))
        deadline = time.monotonic() + timeout
        while not burst.done(groups) and time.monotonic() < deadline:
            time.sleep(0.05)
        watch_errors = len(pods.errors) + len(sets.errors)
    common.delete_lws(api, ns, lws)
    common.wait_drained(api, ns)
    return burst, watch_errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench ungate", description=__doc__)
    parser.add_argument("--bursts", type=int, nargs="+", default=[1, 50, 200], help="groups created at once")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a burst may take, plus 0.5 s a group")
    common.add_common_arguments(parser, "ungate")
    arguments = parser.parse_args(argv)
    bed = common.testbed(arguments.state_dir)
    common.header("ungate", bed)
    api = bed.api()
    rows: list[list[object]] = []
    measured: list[tuple[int, list[float], list[float]]] = []
    with common.namespace(api, "bench-ungate") as ns:
        for groups in arguments.bursts:
            errors_before = common.log_errors(bed)
            burst, watch_errors = run_burst(api, ns, groups, arguments.timeout + 0.5 * groups)
            mnnvl, upstream = burst.latencies()
            errors = watch_errors + common.log_errors(bed) - errors_before
            p50 = (common.percentile(mnnvl, 50) * 1e3, common.percentile(upstream, 50) * 1e3)
            p99 = (common.percentile(mnnvl, 99) * 1e3, common.percentile(upstream, 99) * 1e3)
            rows.append(
                [
                    groups,
                    p50[0],
                    p99[0],
                    p50[1],
                    p99[1],
                    common.ratio(*p50),
                    common.ratio(*p99),
                    groups - len(mnnvl),
                    errors,
                ]
            )
            measured.append((groups, mnnvl, upstream))
            print(f"burst of {groups}: done", flush=True)
    print(
        common.table(
            [
                "groups",
                "mnnvl p50 ms",
                "mnnvl p99 ms",
                "upstream p50 ms",
                "upstream p99 ms",
                "ratio p50",
                "ratio p99",
                "never ungated",
                "errors",
            ],
            rows,
        )
    )
    plot(measured, arguments.plot)


def plot(measured: list[tuple[int, list[float], list[float]]], path: Any) -> None:
    figure = common.figure(len(measured))
    for axes, (groups, mnnvl, upstream) in zip(figure.axes, measured, strict=True):
        for label, values in (("mnnvl: gate removed", mnnvl), ("upstream LWS: worker StatefulSet", upstream)):
            common.cumulative(axes, values, label, marker=".")
        axes.set_title(f"burst of {groups} groups")
        axes.set_xlabel("ms after the leader pod is first seen")
        axes.set_ylabel("fraction of groups")
        axes.set_ylim(0, 1.05)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small", loc="lower right")
    common.save(figure, path, "Leader pod → ungated (mnnvl) vs → worker StatefulSet (upstream LWS)")


if __name__ == "__main__":
    main()
