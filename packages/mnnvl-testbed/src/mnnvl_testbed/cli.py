"""`mnnvl-testbed up | status | down`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys

from mnnvl_api import keys

from . import building, cluster, controllers, dra_driver, processes, thirdparty, versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnnvl-testbed", description=__doc__)
    parser.add_argument(
        "--state-dir",
        type=pathlib.Path,
        default=cluster.default_state_dir(),
        help="where kubeconfig, certificates, logs and pid files live (default: %(default)s; env MNNVL_TESTBED_STATE)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start everything in the background (reuses a running testbed)")
    start.add_argument(
        "--profile",
        choices=sorted(cluster.PROFILES),
        help="a cluster shape: default = 8 nodes, 4 per NVLink clique; nvl72 = 2 racks of 18 nodes "
        "(--nodes and --nodes-per-clique override it)",
    )
    start.add_argument("--nodes", type=int, help="fake GB200 nodes, 4 GPUs each (default: the profile's)")
    start.add_argument(
        "--nodes-per-clique", type=int, help="nodes sharing an NVLink clique (default: the profile's; fixed once up)"
    )
    start.add_argument(
        "--legacy-computedomain-crd",
        action="store_true",
        help=f"install the driver's ComputeDomain CRD at {versions.LEGACY_COMPUTE_DOMAIN_CRD}, where spec.numNodes "
        f"is required (default: {versions.COMPUTE_DOMAIN_CRD}, where it is optional)",
    )
    start.add_argument(
        "--topology-crds",
        choices=sorted(versions.TOPOLOGY_CRDS),
        help="also install KAI's Topology CRD at that release and Grove's ClusterTopologyBinding CRD",
    )
    for option in dra_driver.VALUE_OPTIONS:
        # Both append to one list, in the order given, as helm applies its --set and --set-string in order.
        start.add_argument(
            f"--driver-{option.removeprefix('--')}",
            dest="driver_values",
            action="append",
            type=functools.partial(_chart_value, option),
            metavar="KEY=VALUE",
            help=f"a value of the NVIDIA driver's chart, passed to helm as {option}; a running driver is restarted "
            f"when its values differ (default: those of {dra_driver.VALUES_VARIABLE}, or none)",
        )
    start.add_argument(
        "--with-controllers", action="store_true", help="also run mnnvl's controllers, with their webhooks registered"
    )
    start.add_argument(
        "--gate",
        choices=("enabled", "disabled"),
        default="enabled",
        help="the AutoComputeDomain feature gate of the controllers (default: %(default)s)",
    )
    commands.add_parser("status", help="show which components run")
    commands.add_parser("down", help="stop everything")
    commands.add_parser(
        "build", help="build (or find cached) every binary the testbed and the tests use, and print their paths"
    )
    args = parser.parse_args(argv)
    state_dir: pathlib.Path = args.state_dir.resolve()
    try:
        if args.command == "up":
            profile = cluster.PROFILES[args.profile or "default"]
            testbed = cluster.up(
                state_dir,
                nodes=args.nodes or profile.nodes,
                nodes_per_clique=args.nodes_per_clique or (profile.nodes_per_clique if args.profile else None),
                computedomain_crd=versions.LEGACY_COMPUTE_DOMAIN_CRD if args.legacy_computedomain_crd else None,
                topology_crds=args.topology_crds,
                driver_values=args.driver_values,
            )
            if args.with_controllers:
                for replica in [
                    *controllers.start(testbed, keys.LWS_CONTROLLER, gate=args.gate == "enabled"),
                    *controllers.start(testbed, keys.DS_CONTROLLER, gate=args.gate == "enabled"),
                    *controllers.start(testbed, keys.GUARDIAN_CONTROLLER, gate=args.gate == "enabled"),
                    # Only where KAI's Topology API is served: without it mnnvl-topology refuses to start.
                    *(controllers.start(testbed, keys.TOPOLOGY_CONTROLLER) if testbed.topology_crds else []),
                ]:
                    print(
                        f"{replica.name}: webhooks on 127.0.0.1:{replica.webhook_port}, "
                        f"metrics on http://127.0.0.1:{replica.metrics_port}/metrics (AutoComputeDomain {args.gate})"
                    )
        elif args.command == "status":
            report = cluster.status(state_dir)
            print(json.dumps(report, indent=2))
            return 0 if cluster.is_running(state_dir) else 1
        elif args.command == "down":
            cluster.down(state_dir)
            print(f"testbed in {state_dir} stopped")
        else:
            for name, path in building.ensure_binaries(versions.EVERY_TOOL).items():
                print(f"{name}: {path}")
    except (
        processes.ComponentError,
        building.BuildError,
        thirdparty.ThirdPartyError,
        cluster.TestbedError,
    ) as error:
        print(f"mnnvl-testbed {args.command} failed: {error}", file=sys.stderr)
        return 1
    return 0


def _chart_value(option: str, assignment: str) -> str:
    """`--driver-set KEY=VALUE` as the one word `dra_driver.chart_values` takes: `--set=KEY=VALUE`."""
    return f"{option}={assignment}"


if __name__ == "__main__":
    sys.exit(main())
