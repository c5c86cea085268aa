"""kubectl-mnnvl: `kubectl mnnvl status|explain|doctor|gc|uninstall-check`, once this script is on PATH.

Talks only to the API server, as the user of the kubeconfig (and their RBAC); a user error is one line on stderr
naming the fix (exit code 2), never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from kubernetes import config

from mnnvl_api import names
from mnnvl_runtime import kube

from . import __version__, doctor, explain, gc, reading, release, render, status, uninstall

OUTPUTS = ("table", "json", "yaml")
WATCH_INTERVAL_SECONDS = 2.0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl mnnvl",
        description="See and mend the NVIDIA ComputeDomains mnnvl manages for LeaderWorkerSets and DisaggregatedSets.",
    )
    top.add_argument("--version", action="version", version=f"kubectl-mnnvl {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", type=pathlib.Path, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    common.add_argument("--context", help="the kubeconfig context to use (default: its current context)")
    common.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format (default: table)")
    common.add_argument("-v", "--verbose", action="store_true", help="log API retries and writes to stderr")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    status_command = commands.add_parser(
        "status", parents=[common], help="each opted-in workload's groups or slices, domains and pods"
    )
    status_command.add_argument("-n", "--namespace", help="only this namespace (default: every namespace)")
    status_command.add_argument(
        "workload", nargs="?", help="one workload, opted in or not: NAME, lws/NAME or disaggregatedset/NAME"
    )
    status_command.add_argument("-w", "--watch", action="store_true", help="redraw whenever something changes")

    explain_command = commands.add_parser("explain", parents=[common], help="why one pod is where it is")
    explain_command.add_argument("-n", "--namespace", help="the pod's namespace (default: the context's, or default)")
    explain_command.add_argument("pod", help="the pod's name")

    doctor_command = commands.add_parser(
        "doctor",
        parents=[common],
        help="check the cluster and the installed release (exit 0 ok, 1 warnings, 2 failures)",
    )
    doctor_command.add_argument(
        "--probe-namespace",
        default="default",
        help="namespace of the dry-run admissions that test the webhooks (default: default; nothing is created)",
    )

    gc_command = commands.add_parser(
        "gc", parents=[common], help="list (and with --apply delete) domains whose workload is gone"
    )
    gc_command.add_argument("-n", "--namespace", help="only this namespace (default: every namespace)")
    gc_command.add_argument(
        "--apply", action="store_true", help="delete the orphans no pod uses (fenced, as the controllers do)"
    )

    uninstall_command = commands.add_parser(
        "uninstall-check",
        parents=[common],
        help="what uninstalling mnnvl would leave behind (exit 0 nothing, 1 something)",
    )
    uninstall_command.add_argument(
        "--controller",
        action="append",
        choices=uninstall.CONTROLLERS,
        dest="controllers",
        help="a controller being uninstalled; repeat it for each (default: all of them)",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # The runtime kit logs retries and writes for controllers' JSON logs; a user sees them only when asking.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, format="%(levelname)s %(message)s")
    style = render.Style(colour=args.output == "table" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    try:
        client = reading.connect(args.kubeconfig, args.context)
        command: Callable[[kube.Kube, argparse.Namespace, render.Style], int] = COMMANDS[args.command]
        return command(client, args, style)
    except reading.UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except kube.ApiError as error:  # a call none of the commands expected to fail: still one line, no traceback
        print(f"error: {reading.explained(error, 'calling the API server')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run_status(client: kube.Kube, args: argparse.Namespace, style: render.Style) -> int:
    def draw() -> str:
        snapshot = reading.read_cluster(client, args.namespace)
        found = status.statuses(snapshot, named=args.workload)
        if args.workload and not found:
            where = f" in namespace {args.namespace}" if args.namespace else ""
            raise reading.UserError(f"no LeaderWorkerSet or DisaggregatedSet named {args.workload}{where}")
        warning = f"warning: {reading.no_domain_api_line()}\n" if snapshot.domains is None else ""
        return warning + _format(
            status.as_data(found),
            args.output,
            lambda: status.as_table(found, now=datetime.datetime.now(datetime.UTC), style=style),
        )

    if not args.watch:
        print(draw())
        return 0
    shown = None
    while True:  # relist and redraw when anything shown changed; ends with Ctrl-C
        drawn = draw()
        if drawn != shown:
            if sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")
            print(drawn, flush=True)
            shown = drawn
        time.sleep(WATCH_INTERVAL_SECONDS)


def run_explain(client: kube.Kube, args: argparse.Namespace, style: render.Style) -> int:
    namespace = args.namespace or _context_namespace(args)
    if not names.is_dns1123_subdomain(args.pod):
        raise reading.UserError(f"{args.pod!r} is not a pod name (lowercase letters, digits, '-' and '.')")
    try:
        pod = client.get("v1", "pods", args.pod, namespace=namespace)
    except kube.ApiError as error:
        raise reading.explained(error, f"reading pod {args.pod} in namespace {namespace}") from error
    if pod is None:
        raise reading.UserError(f"pod {args.pod} not found in namespace {namespace}; pass -n NAMESPACE")
    snapshot = reading.read_cluster(client, namespace)
    try:
        controllers: list[release.InstalledController] | None = release.installed_controllers(client)
    except reading.UserError:  # the user may not read the release's ConfigMaps: explain what the pod shows
        controllers = None
    try:
        webhooks: set[str] | None = release.webhook_names(release.webhook_configurations(client))
    except reading.UserError:
        webhooks = None
    found = explain.explain(pod, snapshot, controllers=controllers, webhooks=webhooks)
    print(_format(found.model_dump(by_alias=True, mode="json"), args.output, lambda: explain.as_text(found, style)))
    return 0


def _context_namespace(args: argparse.Namespace) -> str:
    """The namespace of the kubeconfig context in use, as kubectl picks it (default: `default`)."""
    try:
        contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(args.kubeconfig) if args.kubeconfig else None
        )
    except (config.ConfigException, OSError, yaml.YAMLError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == args.context), current) if args.context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def run_doctor(client: kube.Kube, args: argparse.Namespace, style: render.Style) -> int:
    checks = doctor.run_checks(client, probe_namespace=args.probe_namespace)
    data = {"checks": [c.model_dump(by_alias=True, mode="json") for c in checks]}
    print(_format(data, args.output, lambda: doctor.as_table(checks, style)))
    return doctor.exit_code(checks)


def run_gc(client: kube.Kube, args: argparse.Namespace, style: render.Style) -> int:
    found = gc.orphans(gc.read(client, args.namespace))
    outcome: dict[str, str] | None = None
    fence = None
    if args.apply and found:
        fence = gc.fence_of(_installed_or_none(client))
        try:
            outcome = asyncio.run(gc.collect(client, found, fence=fence.seconds))
        except KeyboardInterrupt:
            lifted = asyncio.run(gc.lift_own_marks(client, found))
            raise reading.UserError(
                f"interrupted: deletion marks lifted from {len(lifted)} domain(s); a domain already being deleted "
                "keeps its protection finalizer until `kubectl mnnvl gc --apply` runs again"
            ) from None
    data = {
        "orphans": [o.model_dump(by_alias=True, mode="json") for o in found],
        "applied": args.apply,
        "fenceSeconds": None if fence is None else fence.seconds,
        "outcome": outcome or {},
    }
    print(_format(data, args.output, lambda: gc.as_table(found, apply=args.apply, outcome=outcome, fence=fence)))
    return 1 if outcome and gc.failed(outcome) else 0


def run_uninstall_check(client: kube.Kube, args: argparse.Namespace, style: render.Style) -> int:
    uninstalling = set(args.controllers or uninstall.CONTROLLERS)
    found = uninstall.read(client, uninstalling)
    print(_format(uninstall.as_data(found, uninstalling), args.output, lambda: uninstall.as_text(found, uninstalling)))
    return uninstall.exit_code(found)


def _installed_or_none(client: kube.Kube) -> list[release.InstalledController] | None:
    """The installed controllers, or None when the user may not read the release's ConfigMaps."""
    try:
        return release.installed_controllers(client)
    except reading.UserError:
        return None


def _format(data: Any, output: str, table: Callable[[], str]) -> str:
    if output == "json":
        return render.as_json(data)
    if output == "yaml":
        return render.as_yaml(data).rstrip()
    return table()


COMMANDS: dict[str, Callable[[kube.Kube, argparse.Namespace, render.Style], int]] = {
    "status": run_status,
    "explain": run_explain,
    "doctor": run_doctor,
    "gc": run_gc,
    "uninstall-check": run_uninstall_check,
}

if __name__ == "__main__":
    sys.exit(main())
