"""`mnnvl-chaos [--minutes M] [--seed S]`: mnnvl on the testbed as the chart deploys it (two replicas of mnnvl-lws,
mnnvl-ds and mnnvl-guardian behind stand-ins for their webhook Services, one mnnvl-topology) under seeded workload
churn and faults, judged by an invariant watcher of its own; then convergence, and deletion of everything with
nothing left behind. Prints a table per invariant and one `chaos:` line; exits 1 on any violation or leak.

Before the churn starts the run breaks two invariants itself, in a namespace of its own (a domain deleted under
a running pod, a write to a foreign domain), and fails unless the watcher reports both: a blind watcher cannot
pass. Those two are not counted as violations.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import random
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import (
    churn,
    cluster,
    controllers,
    faults,
    invariants,
    manifests,
    processes,
    proxy,
    release,
    testing,
    waiting,
    watching,
    workloads,
)

log = logging.getLogger("mnnvl-chaos")

TOPOLOGY_CRDS = "kai-v0.16.7"
TOPOLOGY_LEVELS = [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": keys.HOSTNAME_LABEL}]
PLAIN_REFUSED = "plain workloads never refused"
IN_USE_TEARDOWN = "the driver tore down no domain in use"
CONVERGED = "converged after the churn"
NOTHING_LEFT = "no managed domain left after deletion"
CANARY_FOUND = "the watcher caught the deliberate violations"
CANARIES = 3


@dataclasses.dataclass
class Tally:
    """What the run did and saw, for the report."""

    operations: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    refused: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    unavailable: int = 0
    plain_operations: int = 0
    #: (moment, message) of each refusal of a request about a workload that was never opted in.
    plain_refusals: list[str] = dataclasses.field(default_factory=list)
    converged_seconds: float | None = None
    unconverged: list[str] = dataclasses.field(default_factory=list)
    leaks: list[str] = dataclasses.field(default_factory=list)
    teardowns: int = 0
    in_use_teardowns: list[str] = dataclasses.field(default_factory=list)
    canaries: list[str] = dataclasses.field(default_factory=list)
    #: Names of the workloads seen never opted in, and of those seen opted in (now or before).
    plain_names: set[str] = dataclasses.field(default_factory=set)
    opted_in_names: set[str] = dataclasses.field(default_factory=set)

    def observe(self, world: list[churn.Workload]) -> None:
        for workload in world:
            (self.plain_names if workload.never_opted_in else self.opted_in_names).add(workload.name)

    def plain(self, object_name: str) -> bool:
        """Whether `object_name` (a StatefulSet's) is of a workload that was never seen opted in."""
        return any(
            object_name == name or object_name.startswith(f"{name}-") for name in self.plain_names - self.opted_in_names
        )


class Run:
    def __init__(self, testbed: cluster.Testbed, *, seed: int, minutes: float, bound: float) -> None:
        self.testbed = testbed
        self.api = testbed.api()
        self.seed = seed
        self.minutes = minutes
        self.bound = bound
        self.run_id = uuid.uuid4().hex[:5]
        self.namespaces = [f"{stem}-{self.run_id}" for stem in churn.NAMESPACES]
        self.canary_namespace = f"chaos-canary-{self.run_id}"
        self.watcher = invariants.Watcher(
            tolerated_finalizers=frozenset({manifests.COMPUTE_DOMAIN_FINALIZER}),
            namespaces=frozenset([*self.namespaces, self.canary_namespace, release.NAMESPACE]),
        )
        self.monitor = watching.Monitor(self.watcher, ignore=self._is_canary)
        self.tally = Tally()
        self.stopping = threading.Event()
        self.supervisor = processes.Supervisor(testbed.state_dir)
        self.faults_done: collections.Counter[str] = collections.Counter()
        self.restarted: collections.Counter[str] = collections.Counter()

    def _is_canary(self, violation: invariants.Violation) -> bool:
        return any(item.split("/", 1)[-1].startswith("canary-") for item in violation.objects)

    # --- the run ----------------------------------------------------------------------------------------------

    def execute(self) -> Tally:
        for namespace in [*self.namespaces, self.canary_namespace]:
            self.api.request("POST", "/api/v1/namespaces", body=_namespace(namespace))
        foreign_topology = self._foreign_objects()
        proxies = self._deploy(foreign_topology)
        try:
            with watching.watching(self.testbed, self.monitor, topologies=True):
                self._canaries()
                chaos = faults.Faults(self.testbed, proxies, self.seed)
                threads = [
                    threading.Thread(target=self._churn, name="churn", daemon=True),
                    threading.Thread(target=chaos.run, name="faults", daemon=True),
                ]
                for thread in threads:
                    thread.start()
                log.warning("churn and faults for %.1f minutes (seed %d, run %s)", self.minutes, self.seed, self.run_id)
                self.stopping.wait(self.minutes * 60)
                self.stopping.set()
                threads[0].join()
                chaos.settle()
                self.faults_done = chaos.done
                self.restarted = chaos.restarted
                self._converge()
                self._delete_everything()
                self._count_teardowns()
                self._drain_watcher()
        finally:
            for controller, item in proxies.items():
                replicas = controllers.started_replicas(self.testbed, controller)
                controllers.point_webhooks_at(self.testbed, replicas[0], controller)
                item.stop()
            self._clean_up(foreign_topology)
        return self.tally

    def _deploy(self, foreign_topology: str) -> dict[str, proxy.WebhookProxy]:
        """The controllers as the chart deploys them, and a Service stand-in in front of each one's webhooks."""
        proxies = {}
        for controller in faults.REPLICATED:
            controllers.start(self.testbed, controller, replicas=2)

            def up(controller: str = controller) -> list[int]:
                return [
                    replica.webhook_port
                    for replica in controllers.started_replicas(self.testbed, controller)
                    if self.supervisor.alive(replica.name)
                ]

            proxies[controller] = proxy.WebhookProxy(up, slow_seconds=faults.WEBHOOK_SLOW_SECONDS).start()
            controllers.route_webhooks(self.testbed, controller, proxies[controller].url)
        topologies = [
            {"name": f"chaos-{self.run_id}", "levels": TOPOLOGY_LEVELS},
            {"name": foreign_topology, "levels": TOPOLOGY_LEVELS},
        ]
        controllers.start(self.testbed, keys.TOPOLOGY_CONTROLLER, extra_config={"topologies": topologies})
        return proxies

    def _foreign_objects(self) -> str:
        """A look-alike domain (mnnvl's labels, someone else's object) in a churn namespace and a Topology of a name
        mnnvl-topology is configured with, made by someone else: both must stay untouched throughout."""
        look_alike = workloads.create_foreign_domain(
            self.api,
            self.namespaces[0],
            "lws-1-0-lookalike",
            {
                keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER,
                keys.WORKLOAD_NAME_LABEL: "lws-1",
                keys.GROUP_INDEX_LABEL: "0",
                keys.SCOPE_LABEL: keys.SCOPE_REPLICA,
            },
        )
        self.watcher.watch_foreign(keys.COMPUTE_DOMAIN_PLURAL, look_alike)
        name = f"chaos-theirs-{self.run_id}"
        topology = self.api.create(
            {
                "apiVersion": keys.KAI_TOPOLOGY_API_VERSION,
                "kind": "Topology",
                "metadata": {"name": name},
                "spec": {"levels": TOPOLOGY_LEVELS},
            },
            keys.KAI_TOPOLOGY_PLURAL,
        )
        self.watcher.watch_foreign(keys.KAI_TOPOLOGY_PLURAL, topology)
        return name

    def _canaries(self) -> None:
        """Break three invariants on purpose and wait for the watcher to report each: a domain deleted under a pod
        recording it and a pod holding its claim template, a write to a foreign domain, and a pod of the replica
        scope running without its claim (made in the release namespace, which mnnvl's webhooks leave alone)."""
        ns = self.canary_namespace
        doomed = workloads.create_foreign_domain(self.api, ns, "canary-doomed", {})
        written = workloads.create_foreign_domain(self.api, ns, "canary-written", {})
        with self.monitor.lock:
            self.watcher.watch_foreign(keys.COMPUTE_DOMAIN_PLURAL, written)
        node = self.api.list_objects("v1", "nodes")[0]["metadata"]["name"]
        template = doomed["spec"]["channel"]["resourceClaimTemplate"]["name"]
        replica_scope = {keys.SCOPE_LABEL: keys.SCOPE_REPLICA}
        canary_pods = [
            (ns, canary_pod("canary-recorder", annotations={keys.COMPUTE_DOMAIN_NAME_ANNOTATION: "canary-doomed"})),
            (ns, canary_pod("canary-claimant", claim_template=template)),
            (release.NAMESPACE, canary_pod("canary-claimless", node=node, gpus="4", labels=replica_scope)),
        ]
        for namespace, manifest in canary_pods:
            self.api.request("POST", kube.path_of("v1", "pods", namespace=namespace), body=manifest)
        testing.wait_for(
            lambda: all(self._seen_pod(namespace, m["metadata"]["name"]) for namespace, m in canary_pods[:2]),
            what="the watcher to see the canary pods",
            timeout=60,
        )
        self.api.delete(kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name="canary-doomed"))
        self.api.patch(
            kube.path_of(workloads.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name="canary-written"),
            {"metadata": {"labels": {"written": "by-the-canary"}}},
        )
        expected = {
            invariants.DELETED_UNDER_A_POD: (f"{ns}/canary-doomed", f"{ns}/canary-recorder", f"{ns}/canary-claimant"),
            invariants.NOTHING_FOREIGN_WRITTEN: (f"{ns}/canary-written",),
            invariants.RUNS_WITHOUT_CLAIM: (f"{release.NAMESPACE}/canary-claimless",),
        }

        def caught() -> list[str] | None:
            with self.monitor.lock:
                found = [
                    invariant
                    for invariant, items in expected.items()
                    if any(
                        v.invariant == invariant and all(item in " ".join(v.objects) for item in items)
                        for v in self.watcher.violations
                    )
                ]
            return found if len(found) == len(expected) else None

        try:
            self.tally.canaries = testing.wait_for(caught, what="the watcher to report every canary", timeout=60)
        except waiting.WaitTimeoutError as blind:
            log.error("the watcher is blind: %s", blind)
        finally:
            self.api.delete(kube.path_of("v1", "pods", namespace=release.NAMESPACE, name="canary-claimless"))

    def _drain_watcher(self) -> None:
        """Move the pod watch past every deletion still waiting for it (a pod of our own is a write it must deliver),
        then close the watcher's books: what it could not judge is counted as inconclusive."""
        self.api.request(
            "POST", kube.path_of("v1", "pods", namespace=self.canary_namespace), body=canary_pod("canary-tick")
        )

        def drained() -> bool:
            with self.monitor.lock:
                return not self.watcher.pending

        try:
            testing.wait_for(drained, what="the pod watch to pass every deletion", timeout=60)
        except waiting.WaitTimeoutError as error:
            log.error("%s", error)
        with self.monitor.lock:
            self.watcher.finish()

    def _seen_pod(self, namespace: str, name: str) -> bool:
        with self.monitor.lock:
            return any(
                view is not None and (view.namespace, view.name) == (namespace, name)
                for history in self.watcher.pods.values()
                for _, view in history
            )

    def _churn(self) -> None:
        rng = random.Random(self.seed)
        serial = 0
        while not self.stopping.is_set():
            serial += 1
            try:
                world = churn.world(self.api, self.run_id)
            except (kube.ApiError, kube.UnreachableError):
                self.tally.unavailable += 1
                self.stopping.wait(1)
                continue
            self.tally.observe(world)
            operation = churn.next_operation(rng, world, serial, self.namespaces)
            self.tally.operations[operation.action] += 1
            if operation.plain:
                self.tally.plain_operations += 1
            try:
                churn.perform(self.api, operation, self.run_id)
            except kube.ApiError as error:
                self._refused(operation, error.body or str(error))
            except kube.UnreachableError:
                self.tally.unavailable += 1
            self.stopping.wait(rng.uniform(0.3, 1.5))

    def _refused(self, operation: churn.Operation, message: str) -> None:
        ours = ".mnnvl.dev" in message
        if operation.plain and ours:
            self.tally.plain_refusals.append(f"{churn.describe(operation)}: {_message(message)}")
            log.error("VIOLATION %s: %s", PLAIN_REFUSED, self.tally.plain_refusals[-1])
        elif ours:
            self.tally.refused[operation.action] += 1
        else:
            self.tally.unavailable += 1

    # --- the end ----------------------------------------------------------------------------------------------

    def _converge(self) -> None:
        started = time.monotonic()
        try:
            testing.wait_for(
                lambda: not (problems := unconverged(self.api, self.run_id, self.namespaces)) or self._note(problems),
                what="every workload to converge",
                timeout=self.bound,
                interval=1,
            )
            self.tally.converged_seconds = time.monotonic() - started
        except waiting.WaitTimeoutError:
            log.error("not converged within %.0fs: %s", self.bound, self.tally.unconverged)

    def _note(self, problems: list[str]) -> bool:
        self.tally.unconverged = problems
        return False

    def _delete_everything(self) -> None:
        for workload in churn.world(self.api, self.run_id):
            self.api.delete(churn.path(workload.kind, workload.namespace, workload.name))

        def left() -> list[str]:
            found = []
            for ns in self.namespaces:
                found += [f"pod {ns}/{p['metadata']['name']}" for p in testing.pods(self.api, ns)]
                for domain in workloads.domains(self.api, ns).values():
                    if invariants.managed(domain) and not domain["metadata"]["name"].endswith("lookalike"):
                        state = "Terminating" if domain["metadata"].get("deletionTimestamp") else "left"
                        found.append(f"domain {ns}/{domain['metadata']['name']} ({state})")
            return found

        try:
            testing.wait_for(
                lambda: not left(), what="every pod and managed domain gone", timeout=self.bound, interval=1
            )
        except waiting.WaitTimeoutError:
            self.tally.leaks = left()

    def _count_teardowns(self) -> None:
        for ns in self.namespaces:
            found = testing.teardowns(self.api, ns)
            self.tally.teardowns += len(found)
            self.tally.in_use_teardowns += [
                f"{ns}/{t['domain']} under {', '.join(t['referencing_pods'])}" for t in found if t["referencing_pods"]
            ]
            for event in self.api.list_objects("v1", "events", namespace=ns, fieldSelector="reason=FailedCreate"):
                involved = event["involvedObject"]["name"]
                if ".mnnvl.dev" in event["message"] and self.tally.plain(involved):
                    self.tally.plain_refusals.append(f"pods of {ns}/{involved}: {_message(event['message'])}")

    def _clean_up(self, foreign_topology: str) -> None:
        controllers.stop(self.testbed, keys.TOPOLOGY_CONTROLLER)
        for name in (foreign_topology, f"chaos-{self.run_id}"):
            self.api.delete(kube.path_of(keys.KAI_TOPOLOGY_API_VERSION, keys.KAI_TOPOLOGY_PLURAL, name=name))
            self.api.delete(kube.path_of(keys.GROVE_API_VERSION, keys.GROVE_BINDING_PLURAL, name=name))
        for namespace in [*self.namespaces, self.canary_namespace]:
            self.api.delete(f"/api/v1/namespaces/{namespace}")


def canary_pod(
    name: str,
    *,
    node: str | None = None,
    gpus: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    claim_template: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    if gpus is not None:
        container["resources"] = {"limits": {keys.GPU_RESOURCE: gpus}}
    spec: dict[str, Any] = {"containers": [container]}
    if node is not None:
        spec["nodeName"] = node
    if claim_template is not None:
        spec["resourceClaims"] = [{"name": "channel", "resourceClaimTemplateName": claim_template}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def unconverged(api: kube.Kube, run_id: str, namespaces: list[str]) -> list[str]:
    """What still keeps the churned workloads from their end state (empty: converged): every pod Running, bound and
    ungated; every workload with all its pods; every pod of an opted-in revision on a Ready domain of its own
    group, one domain per group."""
    problems: list[str] = []
    pods_in = {namespace: testing.pods(api, namespace) for namespace in namespaces}
    domains_in = {namespace: workloads.domains(api, namespace) for namespace in namespaces}
    for workload in churn.world(api, run_id):
        pods = [
            p
            for p in pods_in[workload.namespace]
            if (p["metadata"].get("labels") or {}).get(
                keys.DS_NAME_LABEL if workload.kind == churn.DS else keys.LWS_NAME_LABEL
            )
            == workload.name
        ]
        expected = workload.replicas * (churn.PODS_PER_SLICE if workload.kind == churn.DS else workload.size)
        if len(pods) != expected:
            problems.append(f"{workload.namespace}/{workload.name}: {len(pods)} pods of {expected}")
        domains = domains_in[workload.namespace]
        groups: dict[tuple[str, ...], set[str]] = collections.defaultdict(set)
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            name = f"{workload.namespace}/{meta['name']}"
            if meta.get("deletionTimestamp") or pod["status"].get("phase") != "Running" or not spec.get("nodeName"):
                problems.append(f"{name}: {pod['status'].get('phase')}, not Running on a node")
            if spec.get("schedulingGates"):
                problems.append(f"{name}: gated")
            scope = (meta.get("labels") or {}).get(keys.SCOPE_LABEL)
            if scope != expected_scope(workload, pod):
                problems.append(f"{name}: scope {scope}, expected {expected_scope(workload, pod)}")
            if scope is None:
                continue
            recorded = (meta.get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
            domain = domains.get(recorded or "")
            if domain is None or domain["metadata"].get("deletionTimestamp") or not invariants.managed(domain):
                problems.append(f"{name}: its domain {recorded} is missing, going, or not mnnvl's")
            elif (domain.get("status") or {}).get("status") != "Ready":
                problems.append(f"{name}: its domain {recorded} is not Ready")
            elif any(
                claim.get("resourceClaimTemplateName") != domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
                for claim in spec.get("resourceClaims") or []
                if claim.get("name") == keys.CHANNEL_CLAIM_NAME
            ):
                problems.append(f"{name}: its channel claim is not {recorded}'s")
            labels = meta.get("labels") or {}
            group = (
                (scope, labels.get(keys.DS_SLICE_LABEL, "0"), labels.get(keys.DS_REVISION_LABEL, ""))
                if scope == keys.SCOPE_SLICE
                else (scope, labels.get(keys.LWS_NAME_LABEL, ""), labels.get(keys.LWS_GROUP_INDEX_LABEL, ""))
            )
            groups[group].add(str(recorded))
        problems += [
            f"{workload.namespace}/{workload.name} group {g}: domains {sorted(d)}"
            for g, d in groups.items()
            if len(d) > 1
        ]
    for namespace in namespaces:
        for pod in pods_in[namespace]:
            if pod["spec"].get("schedulingGates") and not any(
                p.endswith(f"/{pod['metadata']['name']}: gated") for p in problems
            ):
                problems.append(f"{namespace}/{pod['metadata']['name']}: gated")
    return problems


def expected_scope(workload: churn.Workload, pod: kube.Object) -> str | None:
    """The domain scope a pod of `workload` has once the workload converged: opted-in LeaderWorkerSets' pods the
    replica scope; enrolled roles of an opted-in DisaggregatedSet the slice scope; its encoder role, opted out of
    the slice, the replica scope where it opts in itself."""
    if workload.kind == churn.LWS:
        return keys.SCOPE_REPLICA if workload.opted_in else None
    if (pod["metadata"].get("labels") or {}).get(keys.DS_ROLE_LABEL) == "encoder":
        return keys.SCOPE_REPLICA if workload.shape == "slice-and-replica-role" else None
    return keys.SCOPE_SLICE if workload.opted_in else None


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"mnnvl-test": "chaos"}}}


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", body))[:300]
    except ValueError:
        return body[:300]


# --- the report ----------------------------------------------------------------------------------------------


def report(run: Run, tally: Tally, faults_done: collections.Counter[str]) -> tuple[str, bool]:
    watcher = run.watcher
    counted = [v for v in watcher.violations if not run._is_canary(v)]
    by_invariant = collections.Counter(v.invariant for v in counted)
    rows: list[tuple[str, str, int]] = [
        (invariant, f"{watcher.checks[invariant]} checks", by_invariant[invariant])
        for invariant in invariants.INVARIANTS
    ]
    rows.append((PLAIN_REFUSED, f"{tally.plain_operations} operations", len(tally.plain_refusals)))
    rows.append((IN_USE_TEARDOWN, f"{tally.teardowns} teardowns", len(tally.in_use_teardowns)))
    converged = "not within bound" if tally.converged_seconds is None else f"in {tally.converged_seconds:.0f}s"
    rows.append((CONVERGED, converged, 0 if tally.converged_seconds is not None else 1))
    rows.append((NOTHING_LEFT, f"{len(watcher.deleted)} deleted", len(tally.leaks)))
    rows.append((CANARY_FOUND, f"{len(tally.canaries)} of {CANARIES} caught", CANARIES - len(tally.canaries)))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'invariant':<{width}}  {'observed':>18}  violations"]
    lines += [f"{name:<{width}}  {seen:>18}  {count}" for name, seen, count in rows]
    operations = sum(tally.operations.values())
    lines.append(
        "operations: " + ", ".join(f"{k}={v}" for k, v in sorted(tally.operations.items()))
        + f" (refused while a webhook of ours was down or slow: {sum(tally.refused.values())};"
        f" API unavailable: {tally.unavailable})"
    )  # fmt: skip
    lines.append("faults: " + ", ".join(f"{k}={v}" for k, v in sorted(faults_done.items())))
    lines.append(
        f"domains: {len(watcher.created)} created, {len(watcher.deleted)} deleted; "
        f"driver teardowns recorded as in use: {len(tally.in_use_teardowns)}; watch re-lists: {run.monitor.relists}; "
        f"deletions the watcher could not judge exactly: {len(watcher.inconclusive)}"
    )
    restarted = ", ".join(f"{name}={count}" for name, count in sorted(run.restarted.items())) or "none"
    lines.append(f"upstream components exited and started again (as a kubelet would): {restarted}")
    for violation in counted:
        lines.append(f"VIOLATION {violation.invariant} at revision {violation.moment}: {violation.detail}")
        lines.append(f"    objects: {', '.join(violation.objects)}")
    lines += [f"VIOLATION {PLAIN_REFUSED}: {item}" for item in tally.plain_refusals]
    lines += [f"VIOLATION {IN_USE_TEARDOWN}: {item}" for item in tally.in_use_teardowns]
    lines += [f"NOT CONVERGED: {item}" for item in tally.unconverged if tally.converged_seconds is None]
    lines += [f"LEAK: {item}" for item in tally.leaks]
    violations = (
        len(counted)
        + len(tally.plain_refusals)
        + len(tally.in_use_teardowns)
        + (tally.converged_seconds is None)
        + (CANARIES - len(tally.canaries))
    )
    lines.append(
        f"chaos: ops={operations} faults={sum(faults_done.values())} violations={violations} leaks={len(tally.leaks)}"
    )
    return "\n".join(lines), violations == 0 and not tally.leaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnnvl-chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long churn and faults go on (default: 5)")
    parser.add_argument("--seed", type=int, help="the seed of the churn and the faults (default: a random one)")
    parser.add_argument(
        "--bound", type=float, default=300.0, help="seconds to converge, and to drain after deletion (default: 300)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The outages are the point: the clients' retries during them are noise.
    for noisy in ("urllib3", "mnnvl_runtime.kube"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    started_on = commit()  # the code this process loaded, whatever is committed while it runs
    testbed = testing.topology_crds(testing.start_or_reuse(), TOPOLOGY_CRDS)
    run = Run(testbed, seed=seed, minutes=args.minutes, bound=args.bound)
    tally = run.execute()
    text, ok = report(run, tally, run.faults_done)
    print(f"seed {seed}, run {run.run_id}, on {started_on}")
    print(text)
    return 0 if ok else 1


def commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return found.stdout.strip() or "(no git)"


if __name__ == "__main__":
    sys.exit(main())
