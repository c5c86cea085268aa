"""How long a restarted, replaced or added group of a running LeaderWorkerSet waits for mnnvl, against upstream
LWS's own reaction to the same new leader.

An opted-in LWS of `--groups` groups (`size: 2`) is created and left until every group is ungated, has its worker
StatefulSet and one ComputeDomain, and every leader runs. Then three steps, each measured over the group
incarnations it creates (a new leader pod uid; `chains.Chain` defines the stamps and latencies), and each followed
by the same settling (as before, and the replaced incarnations' domains deleted):

- restart: the leader pods of `--restarts` groups (default all) are deleted at once;
- rolling update: an environment variable is added to the worker template (a new revision), so every group is
  replaced;
- scale-up: `spec.replicas` grows by `--scale-up` (default `--groups`).

Per new incarnation: **mnnvl** is its leader first seen → first seen without mnnvl's scheduling gate (mnnvl-lws
gave the incarnation a new domain at admission, created it, and removed the gate once NVIDIA's controller created
its claim template); **upstream** is the same leader first seen → its worker StatefulSet first seen (a new
object: its controller is the new leader pod, by uid). The ratio is mnnvl / upstream.

Leaders run, workers do not: the leader template is the worker template without the node selector no node matches,
so each leader takes a fake node of its own (4 GPUs and the node's one channel; the testbed grows to `--groups`
plus `--scale-up` nodes) while the workers stay Pending, as in the other scenarios. A rolling update needs it (see
below); the measured latencies end before any scheduling.

What upstream LWS v0.10.0 does here, read from its source (`pkg/controllers/pod_controller.go`,
`leaderworkerset_controller.go`) and checked on the testbed, rather than assumed:

- A deleted leader pod is created again by the leader StatefulSet under the same name with a new uid. The old
  worker StatefulSet, whose controller is the old leader pod, is garbage-collected with its workers. LWS's pod
  controller creates the new leader's worker StatefulSet only when none of that name exists: until the collector
  has removed the old one it does nothing, and the old one's deletion asks it again (it watches the StatefulSets
  it owns). So upstream's reaction to a restart includes the garbage collection.
- A rolling update moves the leader StatefulSet's partition down only past ready groups (leader and workers),
  never below `replicas - (ready groups at the tail) - maxUnavailable`; these groups are never ready (their
  workers do not run), so with the default `maxUnavailable: 1` only the last group would ever be replaced. The LWS
  therefore rolls out with `maxUnavailable: 100%` and no surge: the partition drops to 0 at once. LWS also asks
  for the leader StatefulSet's `maxUnavailable` (here all groups), but the testbed's API server drops that field
  (Kubernetes' `MaxUnavailableStatefulSet` feature is off), so the StatefulSet controller replaces leaders one at a
  time, highest index first, each once the one before is Running and Ready: hence running leaders, and a step
  that may take `--timeout` plus 5 s a group. Each leader is replaced as in a restart (deleted, created again, the
  old worker StatefulSet collected).
- A scale-up adds leaders at the next indices; each gets its worker StatefulSet as in a new LWS.

Run: `./dev bench restart --groups 50`.
"""

from __future__ import annotations

import argparse
import copy
import pathlib
from collections.abc import Callable
from typing import Any

import chains
import common

from mnnvl_api import keys
from mnnvl_api.decisions import injection
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, testing

LWS = "restart"
#: Seconds a step may take per new incarnation, beyond `--timeout`: a rolling update replaces one leader at a time,
#: each after the one before was ungated, scheduled and Ready; the settling, beyond 300 s, per group.
STEP_SECONDS_PER_GROUP = 1.0
ROLL_SECONDS_PER_GROUP = 5.0
SETTLE_SECONDS_PER_GROUP = 3.0


def manifest(groups: int) -> dict[str, Any]:
    """`common.lws_manifest` whose leaders can run (the same pod without the node selector no node matches) and
    which is rolled out to every group at once (see the module docstring for both)."""
    found = common.lws_manifest(LWS, replicas=groups)
    template = found["spec"]["leaderWorkerTemplate"]
    leader = copy.deepcopy(template["workerTemplate"])
    del leader["spec"]["nodeSelector"]
    template["leaderTemplate"] = leader
    found["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": "100%", "maxSurge": 0},
    }
    return found


def lws_path(ns: str) -> str:
    return kube.path_of(common.LWS_API, "leaderworkersets", namespace=ns, name=LWS)


def leaders(api: kube.Kube, ns: str) -> list[kube.Object]:
    selector = f"{keys.LWS_NAME_LABEL}={LWS},{keys.LWS_WORKER_INDEX_LABEL}=0"
    return api.list_objects("v1", "pods", namespace=ns, labelSelector=selector)


def wait_settled(api: kube.Kube, ns: str, groups: int) -> None:
    """Until the LWS has `groups` groups of 2 pods, none gated or terminating, every leader Running and Ready, a
    worker StatefulSet each, and one ComputeDomain each (the replaced incarnations' domains deleted), so one step's
    clean-up does not load the next step's measurement and a rolling update finds every leader healthy."""

    def state() -> dict[str, int]:
        pods = api.list_objects("v1", "pods", namespace=ns, labelSelector=f"{keys.LWS_NAME_LABEL}={LWS}")
        sets = api.list_objects("apps/v1", "statefulsets", namespace=ns)
        return {
            "pods": len(pods),
            "gated or terminating": sum(
                1 for p in pods if injection.is_gated(p["spec"]) or p["metadata"].get("deletionTimestamp")
            ),
            "leaders ready": sum(
                1
                for p in pods
                if p["metadata"]["labels"].get(keys.LWS_WORKER_INDEX_LABEL) == "0"
                and kube.is_condition_true(p, "Ready")
            ),
            "worker statefulsets": sum(1 for s in sets if s["metadata"]["name"] != LWS),
            "computedomains": common.count(api, common.CD_API, keys.COMPUTE_DOMAIN_PLURAL, ns),
        }

    wanted = {
        "pods": 2 * groups,
        "gated or terminating": 0,
        "leaders ready": groups,
        "worker statefulsets": groups,
        "computedomains": groups,
    }
    testing.wait_for(
        lambda: state() == wanted,
        what=f"{groups} groups settled: {wanted}",
        state=lambda: str(state()),
        timeout=300 + SETTLE_SECONDS_PER_GROUP * groups,
        interval=1,
    )


def restart_groups(api: kube.Kube, ns: str, count: int) -> Callable[[], None]:
    def act() -> None:
        for group in range(count):
            api.delete(kube.path_of("v1", "pods", namespace=ns, name=f"{LWS}-{group}"))

    return act


def roll_workers(api: kube.Kube, ns: str) -> Callable[[], None]:
    """A new worker template (one environment variable more): a new revision, so every group is replaced."""

    def act() -> None:
        template = manifest(0)["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        [container] = template["spec"]["containers"]
        container["env"] = [{"name": "BENCH_ROLLOUT", "value": "1"}]
        change = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [container]}}}}}
        api.patch(lws_path(ns), change)

    return act


def scale_to(api: kube.Kube, ns: str, replicas: int) -> Callable[[], None]:
    def act() -> None:
        api.patch(lws_path(ns), {"spec": {"replicas": replicas}})

    return act


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench restart", description=__doc__)
    parser.add_argument("--groups", type=int, default=50, help="groups (replicas) of the running LWS, 2 pods each")
    parser.add_argument("--restarts", type=int, help="groups whose leader pod is deleted (default: all)")
    parser.add_argument("--scale-up", type=int, help="groups added by the scale-up (default: --groups)")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help=f"seconds a step may take, plus {STEP_SECONDS_PER_GROUP} a group"
    )
    common.add_common_arguments(parser, "restart")
    arguments = parser.parse_args(argv)
    groups: int = arguments.groups
    restarts: int = min(arguments.restarts or groups, groups)
    added: int = arguments.scale_up or groups
    bed = common.running_testbed(arguments.state_dir, nodes=groups + added)  # a node for each leader
    common.header("restart", bed)
    api = bed.api()
    rows: list[list[object]] = []
    measured: list[tuple[str, list[chains.Group]]] = []
    with common.namespace(api, "bench-restart") as ns:
        common.create_lws(api, ns, manifest(groups))
        wait_settled(api, ns, groups)
        # (name, action, new incarnations, groups afterwards, seconds per incarnation beyond --timeout)
        steps = [
            (
                f"restart ({restarts} leaders deleted)",
                restart_groups(api, ns, restarts),
                restarts,
                groups,
                STEP_SECONDS_PER_GROUP,
            ),
            ("rolling update (worker template)", roll_workers(api, ns), groups, groups, ROLL_SECONDS_PER_GROUP),
            (
                f"scale-up ({groups} → {groups + added})",
                scale_to(api, ns, groups + added),
                added,
                groups + added,
                STEP_SECONDS_PER_GROUP,
            ),
        ]
        for name, act, expected, after, per_group in steps:
            timeout = arguments.timeout + per_group * expected
            measured_step, errors = step(bed, api, ns, act, expected=expected, timeout=timeout)
            rows.append([name, expected, *chains.row(measured_step, expected), errors])
            measured.append((name, measured_step))
            print(f"{name}: done", flush=True)
            wait_settled(api, ns, after)
        common.delete_lws(api, ns, LWS)
        common.wait_drained(api, ns, timeout=300 + SETTLE_SECONDS_PER_GROUP * (groups + added))
    print(f"an opted-in LWS of {groups} groups of 2 pods")
    print(common.table(["step", "new groups", *chains.HEADERS, "errors"], rows))
    plot(measured, arguments.plot)


def step(
    bed: cluster.Testbed, api: kube.Kube, ns: str, act: Callable[[], None], *, expected: int, timeout: float
) -> tuple[list[chains.Group], int]:
    """One measured step over the incarnations it creates (the leaders before it are ignored); its stamps and
    errors (the watches', and the controllers' logged errors during the step)."""
    errors_before = common.log_errors(bed)
    before = {pod["metadata"]["uid"] for pod in leaders(api, ns)}
    found, watch_errors = chains.measure(api, ns, act, expected=expected, timeout=timeout, ignore=before)
    return found, watch_errors + common.log_errors(bed) - errors_before


def plot(measured: list[tuple[str, list[chains.Group]]], path: pathlib.Path) -> None:
    chains.save_plots(
        measured,
        path,
        "New leader → ungated (mnnvl) vs → its worker StatefulSet (upstream LWS)",
        upstream_label="new worker StatefulSet",
    )


if __name__ == "__main__":
    main()
