"""API writes per group lifecycle, counted from the API server's audit log, by who wrote.

One opted-in LeaderWorkerSet with R groups (`size: 2`) is created; once every pod exists and none is gated
any more, the LWS is deleted and the namespace drained (pods and ComputeDomains gone). The testbed's audit
policy records the metadata of every write to pods, pods/status, Events and ComputeDomains; this counts those
of the run's namespace by writer, resource and verb, and divides by R.

Writers: the testbed runs each mnnvl controller under a client-certificate user named after it (both send the
same user agents, so the audit `userAgent` cannot tell them apart); every other component uses the admin
certificate and is named by its user agent (kube-controller-manager, the LWS manager, NVIDIA's controller, and
`python` for the benchmark itself and the testbed's stand-ins). Upstream LWS's writes (LWS manager and the
StatefulSet controller in kube-controller-manager) are the baseline: mnnvl's writes per group are reported as a ratio to
theirs. Run: `./dev bench writes --groups 50`.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import time
from typing import Any

import common

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, processes, release, testing

UPSTREAM = ("lws-manager", "kube-controller-manager")
MNNVL = (keys.LWS_CONTROLLER, keys.GUARDIAN_CONTROLLER)


#: The controllers run as their ServiceAccounts (the chart's), in the testbed release's namespace.
SERVICE_ACCOUNT_PREFIX = f"system:serviceaccount:{release.NAMESPACE}:"


def writer(entry: dict[str, Any]) -> str:
    user = str(entry.get("user", {}).get("username", "?"))
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        return user.removeprefix(SERVICE_ACCOUNT_PREFIX)  # the chart names each after its controller
    if user != "admin":
        return user
    user_agent = str(entry.get("userAgent", "?"))
    agent = user_agent.split("/", 1)[0]
    if agent == "lws":
        return "lws-manager"
    if agent == "kube-controller-manager":  # `.../kubernetes/$Format/statefulset-controller`
        return f"{agent}/{user_agent.rsplit('/', 1)[-1]}"
    if agent.startswith("OpenAPI-Generator"):
        return "python (bench, testbed stand-ins)"
    return agent


def resource(entry: dict[str, Any]) -> str:
    ref = entry.get("objectRef", {})
    return "/".join(part for part in (ref.get("resource"), ref.get("subresource")) if part)


def audited_writes(log: pathlib.Path, ns: str) -> collections.Counter[tuple[str, str, str]]:
    """(writer, resource, verb) → successful writes in `ns`."""
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    with log.open(errors="replace") as lines:
        for line in lines:
            if f'"namespace":"{ns}"' not in line:
                continue
            entry = json.loads(line)
            if entry.get("stage") != "ResponseComplete" or entry.get("objectRef", {}).get("namespace") != ns:
                continue
            code = int(entry.get("responseStatus", {}).get("code", 0))
            verb = str(entry["verb"]) + ("" if code < 400 else f" (failed {code})")
            counts[(writer(entry), resource(entry), verb)] += 1
    return counts


def gated_at_admission(bed: cluster.Testbed, ns: str) -> tuple[int, int]:
    """(gated, not gated) pods of `ns` as mnnvl-lws's pod webhook admitted them, from its log."""
    gated = ungated = 0
    log = processes.Supervisor(bed.state_dir).log(f"{keys.LWS_CONTROLLER}-0")
    for line in log.read_text(errors="replace").splitlines():
        if '"pod admitted"' in line and f'"namespace": "{ns}"' in line:
            if json.loads(line).get("gated"):
                gated += 1
            else:
                ungated += 1
    return gated, ungated


def lifecycle(api: kube.Kube, ns: str, groups: int) -> None:
    lws = "writes"
    common.create_lws(api, ns, common.lws_manifest(lws, replicas=groups))

    def all_ungated() -> bool:
        pods = api.list_objects("v1", "pods", namespace=ns)
        gated = [p for p in pods if keys.SCHEDULING_GATE in {g["name"] for g in p["spec"].get("schedulingGates") or []}]
        return len(pods) == 2 * groups and not gated

    testing.wait_for(all_ungated, what=f"{2 * groups} pods, none gated", timeout=120 + groups)
    common.delete_lws(api, ns, lws)
    common.wait_drained(api, ns)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench writes", description=__doc__)
    parser.add_argument("--groups", type=int, default=50, help="replicas of the LWS")
    common.add_common_arguments(parser, "writes")
    arguments = parser.parse_args(argv)
    groups: int = arguments.groups
    bed = common.running_testbed(arguments.state_dir)
    common.header("writes", bed)
    api = bed.api()
    log = cluster.audit_log(bed.state_dir)
    if not log.exists():
        raise SystemExit(f"no audit log at {log}: this testbed was started before auditing; `./dev down` it first")
    with common.namespace(api, "bench-writes") as ns:
        lifecycle(api, ns, groups)
        time.sleep(2)  # late writes (finalizer releases, Events) land in the log
        counts = audited_writes(log, ns)
        gated, not_gated = gated_at_admission(bed, ns)
    print(f"{groups} groups of 2 pods; pods gated at admission: {gated}, admitted ungated: {not_gated}")
    rows = [[who, what, verb, count, count / groups] for (who, what, verb), count in sorted(counts.items()) if count]
    print(common.table(["writer", "resource", "verb", "writes", "per group"], rows))
    by_writer: collections.Counter[str] = collections.Counter()
    for (who, _, _), count in counts.items():
        by_writer[who] += count
    upstream = sum(count for who, count in by_writer.items() if who.startswith(UPSTREAM))
    summary = [[who, by_writer[who], by_writer[who] / groups, common.ratio(by_writer[who], upstream)] for who in MNNVL]
    summary.append(["upstream LWS (lws-manager + kube-controller-manager)", upstream, upstream / groups, 1.0])
    print(common.table(["writer", "writes", "per group", "vs upstream LWS"], summary))
    plot(counts, groups, arguments.plot)


def plot(counts: collections.Counter[tuple[str, str, str]], groups: int, path: pathlib.Path) -> None:
    figure = common.figure(width=9, height=4.5)
    axes = figure.axes[0]
    writers = sorted({who for who, _, _ in counts})
    kinds = sorted({(what, verb) for _, what, verb in counts})
    bottoms = [0.0] * len(writers)
    for what, verb in kinds:
        heights = [counts[(who, what, verb)] / groups for who in writers]
        axes.barh(writers, heights, left=bottoms, label=f"{what} {verb}")
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    axes.set_xlabel("writes per group (audit log)")
    axes.legend(fontsize="x-small", loc="lower right")
    axes.grid(axis="x", alpha=0.3)
    common.save(figure, path, f"API writes per group lifecycle ({groups} groups of 2 pods)")


if __name__ == "__main__":
    main()
