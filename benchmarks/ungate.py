"""How long a group waits for mnnvl, against how long it waits for upstream LWS, for bursts of new groups, and how
much of mnnvl's wait is the NVIDIA driver's.

One opted-in LeaderWorkerSet (`size: 2`) with N replicas is created at once. Four watches (pods, StatefulSets,
ComputeDomains and ResourceClaimTemplates of the namespace) stamp events on arrival (`chains.Chain`, whose
docstring defines every stamp and latency). For each group, from its leader pod first seen:

- mnnvl: the leader is first seen without mnnvl's scheduling gate (its ComputeDomain was created, NVIDIA's
  controller created the domain's claim template, and mnnvl-lws removed the gate);
- upstream: the worker StatefulSet LWS creates for the leader (its controller is the leader pod) is first seen;
- the driver's part: the group's domain first seen to its claim template first seen, which is what mnnvl's gate
  waits for; mnnvl's share is the rest of the gated time; and the domain first seen to first seen Ready.

The ratio mnnvl / upstream is reported at p50 and p99, and gated / driver's part at p50. Between bursts the LWS is
deleted and the namespace drained (pods, StatefulSets, ComputeDomains). The time a burst may take grows with its
size (`--timeout` plus 2 s a group: NVIDIA's controller writes three times per domain under a client rate limit,
and a burst of 1,000 took 0.7 s a group on a loaded 2-core machine), and so does the drain (its finalizer goes domain
by domain, about 2 s each), so `--bursts 1000` runs to the end.
Run: `./dev bench ungate --bursts 1 50 200 1000`.
"""

from __future__ import annotations

import argparse
import pathlib

import chains
import common

from mnnvl_runtime import kube

#: Seconds a burst may take per group, beyond `--timeout`.
BURST_SECONDS_PER_GROUP = 2.0


def run_burst(api: kube.Kube, ns: str, groups: int, timeout: float) -> tuple[list[chains.Group], int]:
    """Create the LWS, wait until every group is ungated and has its StatefulSet (or the timeout), tear down."""
    lws = f"burst-{groups}"
    return chains.burst(
        api,
        ns,
        create=lambda: common.create_lws(api, ns, common.lws_manifest(lws, replicas=groups)),
        delete=lambda: common.delete_lws(api, ns, lws),
        groups=groups,
        timeout=timeout + BURST_SECONDS_PER_GROUP * groups,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench ungate", description=__doc__)
    parser.add_argument("--bursts", type=int, nargs="+", default=[1, 50, 200], help="groups created at once")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help=f"seconds a burst may take, plus {BURST_SECONDS_PER_GROUP} a group"
    )
    common.add_common_arguments(parser, "ungate")
    arguments = parser.parse_args(argv)
    bed = common.running_testbed(arguments.state_dir)
    common.header("ungate", bed)
    api = bed.api()
    rows: list[list[object]] = []
    measured: list[tuple[int, list[chains.Group]]] = []
    with common.namespace(api, "bench-ungate") as ns:
        for groups in arguments.bursts:
            errors_before = common.log_errors(bed)
            burst, watch_errors = run_burst(api, ns, groups, arguments.timeout)
            errors = watch_errors + common.log_errors(bed) - errors_before
            rows.append([groups, *chains.row(burst, groups), errors])
            measured.append((groups, burst))
            print(f"burst of {groups}: done", flush=True)
    print(common.table(["groups", *chains.HEADERS, "errors"], rows))
    plot(measured, arguments.plot)


def plot(measured: list[tuple[int, list[chains.Group]]], path: pathlib.Path) -> None:
    chains.save_plots(
        [(f"burst of {groups} groups", burst) for groups, burst in measured],
        path,
        "Leader pod → ungated (mnnvl) vs → worker StatefulSet (upstream LWS)",
        upstream_label="worker StatefulSet",
    )


if __name__ == "__main__":
    main()
