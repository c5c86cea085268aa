"""How long the leaders of a DisaggregatedSet's slices wait for mnnvl-ds, against upstream LWS's own reaction to the
same pods, for bursts of slices created at once.

One opted-in DisaggregatedSet of N slices x `--roles` roles is created at once (each role 1 group of 2 pods
asking for 4 GPUs and a node no testbed has; every role enrolled in its slice's domain, the set's annotation
alone). Upstream's DisaggregatedSet controller creates one child LeaderWorkerSet per (slice, revision, role),
named `<set>-<slice>-<revision>-<role>`; each child LWS creates its leader StatefulSet, whose leader pod makes LWS's
pod controller create that group's worker StatefulSet. mnnvl-ds creates the slice's ComputeDomain as soon as the
slice's first child LWS exists, before any of its pods, gives every pod of the slice that domain at admission and
gates it unless the domain is ready by then, and lifts the gate once the driver created the domain's claim
template.

Per leader pod (each role's group in each slice; `chains.Chain` defines the stamps and latencies):
**mnnvl** is the leader first seen → first seen without mnnvl's scheduling gate (0 for a leader admitted
ungated); **upstream** is the same leader first seen → the worker StatefulSet LWS creates for it (its controller
is the leader pod) first seen. That is the closest upstream equivalent: the DisaggregatedSet controller's own
work ends at creating the child LWS, before the pod exists, and the worker StatefulSet is what upstream does in
reaction to the leader pod, as in `ungate`. The driver's part (domain first seen → claim template first seen)
is shared by a slice's leaders. Each burst also says how many leaders were admitted without the gate (their
slice's domain was ready by then). Between bursts the set is deleted and the namespace drained.
Run: `./dev bench slices --bursts 20 --roles 3`.
"""

from __future__ import annotations

import argparse
import pathlib

import chains
import common

from mnnvl_api import keys
from mnnvl_runtime import kube

CONTROLLERS = (keys.LWS_CONTROLLER, keys.DS_CONTROLLER, keys.GUARDIAN_CONTROLLER)
BURST_SECONDS_PER_GROUP = 1.0


def run_burst(api: kube.Kube, ns: str, slices: int, roles: int, timeout: float) -> tuple[list[chains.Group], int]:
    """Create the set, wait until every leader is ungated and has its worker StatefulSet (or the timeout), tear
    down."""
    name = f"slices-{slices}"
    leaders = slices * roles
    return chains.burst(
        api,
        ns,
        create=lambda: common.create_ds(api, ns, common.ds_manifest(name, slices=slices, roles=roles)),
        delete=lambda: common.delete_ds(api, ns, name),
        groups=leaders,
        timeout=timeout + BURST_SECONDS_PER_GROUP * leaders,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench slices", description=__doc__)
    parser.add_argument("--bursts", type=int, nargs="+", default=[20], help="slices of a set created at once")
    parser.add_argument("--roles", type=int, default=3, help="roles per slice (1 group of 2 pods each)")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help=f"seconds a burst may take, plus {BURST_SECONDS_PER_GROUP} a group"
    )
    common.add_common_arguments(parser, "slices")
    arguments = parser.parse_args(argv)
    roles: int = arguments.roles
    bed = common.running_testbed(arguments.state_dir, started=CONTROLLERS)
    common.header("slices", bed)
    api = bed.api()
    rows: list[list[object]] = []
    measured: list[tuple[int, list[chains.Group]]] = []
    with common.namespace(api, "bench-slices") as ns:
        for slices in arguments.bursts:
            errors_before = common.log_errors(bed, CONTROLLERS)
            burst, watch_errors = run_burst(api, ns, slices, roles, arguments.timeout)
            errors = watch_errors + common.log_errors(bed, CONTROLLERS) - errors_before
            rows.append([slices, slices * roles, *chains.row(burst, slices * roles), errors])
            measured.append((slices, burst))
            # A leader admitted after its slice's domain is ready gets no gate (0 ms): say how many did.
            admitted = sum(1 for group in burst if group.admitted_ungated)
            print(f"burst of {slices} slices: done; {admitted} of {len(burst)} leaders admitted ungated", flush=True)
    print(f"one DisaggregatedSet per burst; {roles} roles per slice, each 1 group of 2 pods")
    print(common.table(["slices", "leaders", *chains.HEADERS, "errors"], rows))
    plot(measured, roles, arguments.plot)


def plot(measured: list[tuple[int, list[chains.Group]]], roles: int, path: pathlib.Path) -> None:
    chains.save_plots(
        [(f"{slices} slices x {roles} roles", burst) for slices, burst in measured],
        path,
        "Slice leader → ungated (mnnvl-ds) vs → worker StatefulSet (upstream LWS)",
        upstream_label="worker StatefulSet",
    )


if __name__ == "__main__":
    main()
