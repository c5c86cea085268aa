"""How the cost of one pod event grows with the cluster: measured, reported as ratios, never asserted.

The controllers promise O(1) work per watch event (indexes, no listing). For clusters of growing size this
measures, in one run, what one pod event costs each controller:

- mnnvl-lws: record the pod, snapshot its LeaderWorkerSet and plan it (what the event queues);
- mnnvl-guardian: record the pod and decide for every managed domain whose use it changed;
- mnnvl-guardian resync: what the guardian does for each queued domain when its periodic resync queues every
  managed domain (its per-key work must stay O(1), or a resync costs O(n²));

and divides by the same cost on the smallest cluster (the baseline). Flat ratios mean the per-event work does
not depend on how many pods the cluster runs. Run it with `./dev bench`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

from mnnvl_api import keys, names
from mnnvl_guardian import handlers as guardian_handlers
from mnnvl_guardian import planner as guardian_planner
from mnnvl_guardian import state as guardian_state
from mnnvl_lws import planner as lws_planner
from mnnvl_lws import state as lws_state

NAMESPACE = "serving"
GROUP_SIZE = 4  # pods per replica: a leader and three workers, as in the deepseek-r1 example
REPLICAS = 2


def domain_name(lws: str, group: int) -> str:
    return names.replica_domain_name(lws, group, "bcdfg")


def pod(lws: str, group: int, index: int, *, generation: int = 0) -> dict[str, Any]:
    leader = f"{lws}-{group}"
    name = leader if index == 0 else f"{leader}-{index}"
    domain = domain_name(lws, group)
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"{name}-{generation}",
            "resourceVersion": str(generation + 1),
            "labels": {keys.LWS_NAME_LABEL: lws, keys.SCOPE_LABEL: keys.SCOPE_REPLICA},
            "annotations": {keys.LWS_LEADER_NAME_ANNOTATION: leader, keys.COMPUTE_DOMAIN_NAME_ANNOTATION: domain},
        },
        "spec": {
            "containers": [{"name": "vllm", "image": "nvcr.io/nvidia/vllm:v1"}],
            "resourceClaims": [
                {"name": keys.CHANNEL_CLAIM_NAME, "resourceClaimTemplateName": names.claim_template_name(domain)}
            ],
        },
        "status": {"phase": "Running"},
    }


def workload(lws: str) -> dict[str, Any]:
    opted_in = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: keys.OPT_IN_ENABLED}
    return {"metadata": {"name": lws, "namespace": NAMESPACE, "uid": f"uid-{lws}", "annotations": opted_in}}


def domain(lws: str, group: int) -> dict[str, Any]:
    name = domain_name(lws, group)
    owner = lws_planner.LeaderWorkerSetFacts(namespace=NAMESPACE, name=lws, uid=f"uid-{lws}")
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "labels": lws_planner.domain_labels(owner, group),
            "finalizers": [keys.PROTECTION_FINALIZER],
            # As the API server records a domain mnnvl-lws created: it alone set the identity labels.
            "managedFields": [
                {
                    "manager": keys.LWS_CONTROLLER,
                    "operation": "Update",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {f"f:{label}": {} for label in lws_planner.domain_labels(owner, group)}
                        }
                    },
                }
            ],
        },
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }


def template(lws: str, group: int) -> dict[str, Any]:
    name = names.claim_template_name(domain_name(lws, group))
    return {"metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"}}


def workload_names(pods: int) -> list[str]:
    return [f"model-{n}" for n in range(max(pods // (GROUP_SIZE * REPLICAS), 1))]


def cluster(pods: int) -> list[tuple[str, dict[str, Any]]]:
    """Every object of a steady cluster of about `pods` pods, by kind, in the order watches would report them."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for lws in workload_names(pods):
        objects.append(("workload", workload(lws)))
        for group in range(REPLICAS):
            objects += [("domain", domain(lws, group)), ("template", template(lws, group))]
            objects += [("pod", pod(lws, group, index)) for index in range(GROUP_SIZE)]
    return objects


def filled_lws_stores(pods: int) -> lws_state.Stores:
    stores = lws_state.Stores()
    observers = {
        "workload": stores.workload_mirror.observe,
        "domain": stores.domain_mirror.observe,
        "template": stores.template_mirror.observe,
        "pod": stores.pod_mirror.observe,
    }
    for kind, body in cluster(pods):
        observers[kind](body, deleted=False)
    return stores


def filled_guardian_stores(pods: int) -> guardian_state.Stores:
    """The guardian watches only domains and pods."""
    stores = guardian_state.Stores()
    observers = {"domain": stores.domain_mirror.observe, "pod": stores.pod_mirror.observe}
    for kind, body in cluster(pods):
        if kind in observers:
            observers[kind](body, deleted=False)
    return stores


def event_stream(pods: int) -> list[dict[str, Any]]:
    """Updates of pods spread over the whole cluster (a rolling status change), cycled through."""
    lwss = workload_names(pods)
    step = max(len(lwss) // 64, 1)
    return [pod(lws, group, index) for lws in lwss[::step] for group in range(REPLICAS) for index in range(GROUP_SIZE)]


VERSIONS = itertools.count(1_000_000)


def updated(event: dict[str, Any]) -> dict[str, Any]:
    """The pod as a MODIFIED event reports it: a newer resourceVersion than the store holds."""
    event["metadata"]["resourceVersion"] = str(next(VERSIONS))
    return event


def lws_event_cost(pods: int) -> Callable[[dict[str, Any]], None]:
    stores = filled_lws_stores(pods)

    def handle(event: dict[str, Any]) -> None:
        (workload_key,) = stores.pod_mirror.observe(updated(event), deleted=False)
        plan = lws_planner.plan(stores.snapshot(*workload_key, gate_enabled=True))
        assert plan.empty, plan  # a steady cluster: nothing to do, and the benchmark measures deciding that

    return handle


def guardian_event_cost(pods: int) -> Callable[[dict[str, Any]], None]:
    stores = filled_guardian_stores(pods)

    def handle(event: dict[str, Any]) -> None:
        for key in stores.pod_mirror.observe(updated(event), deleted=False):
            facts = stores.domain(key)
            assert facts is not None
            action = guardian_planner.decide(facts, template_in_use=stores.in_use(facts), gate_enabled=True)
            assert action is guardian_planner.Action.NOTHING

    return handle


def guardian_resync_cost(pods: int) -> Callable[[dict[str, Any]], None]:
    """Per queued domain, as the resync queues them all: the events here only pick which domain."""
    stores = filled_guardian_stores(pods)

    def handle(event: dict[str, Any]) -> None:
        key = (NAMESPACE, str(event["metadata"]["annotations"][keys.COMPUTE_DOMAIN_NAME_ANNOTATION]))
        decided = guardian_handlers.decide(stores, key, gate_enabled=True)
        assert decided is not None
        assert decided[1] is guardian_planner.Action.NOTHING

    return handle


def per_event_seconds(handler: Callable[[dict[str, Any]], None], events: list[dict[str, Any]], rounds: int) -> float:
    """The median over `rounds` of the mean time one event takes, so a stray pause does not skew it.

    One unmeasured round first, so that the baseline does not pay for warming caches alone.
    """
    samples = []
    for event in events:
        handler(event)
    for _ in range(rounds):
        started = time.perf_counter()
        for event in events:
            handler(event)
        samples.append((time.perf_counter() - started) / len(events))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1_000, 10_000, 50_000], help="pods per cluster")
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    sizes: list[int] = sorted(arguments.sizes)
    print(f"one pod event, per controller; baseline: a cluster of {sizes[0]} pods; median of {arguments.rounds}")
    print(f"{'controller':<16}{'pods':>10}{'µs/event':>12}{'vs baseline':>13}")
    for controller, setup in (
        ("mnnvl-lws", lws_event_cost),
        ("mnnvl-guardian", guardian_event_cost),
        ("guardian resync", guardian_resync_cost),
    ):
        baseline = 0.0
        for size in sizes:
            cost = per_event_seconds(setup(size), event_stream(size), arguments.rounds)
            baseline = baseline or cost
            print(f"{controller:<16}{size:>10,}{cost * 1e6:>12.1f}{cost / baseline:>12.2f}x")


if __name__ == "__main__":
    main()
