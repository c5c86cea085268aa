"""The demo: the testbed with mnnvl running, the seed's two examples applied, and what happened to them.

Option 1 (deepseek-r1, a LeaderWorkerSet) and Option 2 (llm-serving, a DisaggregatedSet, shrunk to fit a testbed
clique per slice) are reported by `kubectl mnnvl status`, as a user sees them: per replica or (slice, revision), its
ComputeDomain, whether the domain is ready, which containers got the channel claim, and which pods are still gated.
Then mnnvl-topology's clique census (KAI's and Grove's CRDs are installed for it): per clique, its nodes, GPUs, nodes
with a channel in use and free nodes.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_api.decisions import references
from mnnvl_cli import __main__ as kubectl_mnnvl
from mnnvl_runtime import kube

from . import cluster, controllers, testing

EXAMPLE = pathlib.Path(__file__).parent / "examples" / "deepseek-r1.yaml"
DS_EXAMPLE = pathlib.Path(__file__).parent / "examples" / "llm-serving.yaml"
#: deepseek-r1 fills two cliques of 4 nodes; the DisaggregatedSet's two slices take two more.
DEMO_NODES = 16
#: NVCF's pins: KAI v0.16.7 (and Grove alpha.11's binding CRD).
TOPOLOGY_CRDS = "kai-v0.16.7"
CENSUS_CONFIGMAP = "mnnvl-clique-census"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnnvl-demo", description=__doc__)
    parser.add_argument("--namespace", default="demo")
    args = parser.parse_args(argv)
    testbed = cluster.up(cluster.default_state_dir(), nodes=DEMO_NODES, topology_crds=TOPOLOGY_CRDS)
    replicas = controllers.start_lws(testbed, gate=True)
    ds_replicas = controllers.start(testbed, keys.DS_CONTROLLER, gate=True)
    controllers.start(testbed, keys.GUARDIAN_CONTROLLER, gate=True)
    [topology] = controllers.start(testbed, keys.TOPOLOGY_CONTROLLER)
    client = testbed.api()
    testing.wait_for(
        lambda: (
            not (found := client.get("v1", "namespaces", args.namespace))
            or not found["metadata"].get("deletionTimestamp")
        ),
        what=f"namespace {args.namespace} from an earlier run to finish terminating",
        timeout=120,
    )
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args.namespace}}, "namespaces")
    lws = yaml.safe_load(EXAMPLE.read_text())
    lws["metadata"]["namespace"] = args.namespace
    client.apply(lws, "leaderworkersets")
    ds = yaml.safe_load(DS_EXAMPLE.read_text())
    ds["metadata"]["namespace"] = args.namespace
    client.apply(ds, keys.DS_PLURAL)
    print(f"applied {EXAMPLE.name} and {DS_EXAMPLE.name} to namespace {args.namespace}; waiting for them to run ...")
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    per_slice = sum(r["spec"]["replicas"] * r["spec"]["leaderWorkerTemplate"]["size"] for r in ds["spec"]["roles"])
    expected = lws["spec"]["replicas"] * size + ds["spec"]["slices"] * per_slice
    testing.wait_for(
        lambda: len(testing.running(testing.pods(client, args.namespace))) >= expected,
        what=f"{expected} pods Running",
        state=testing.state_of(lambda: testing.placement(testing.pods(client, args.namespace))),
        timeout=180,
    )
    print(f"\n$ kubectl mnnvl status -n {args.namespace}")
    sys.stdout.flush()
    kubectl_mnnvl.main(["status", "-n", args.namespace, "--kubeconfig", str(testbed.kubeconfig)])
    holders = sum(1 for pod in testing.pods(client, args.namespace) if references.live_claim_templates(pod))
    testing.wait_for(
        lambda: sum(c["channelNodes"] for c in census(client).get("cliques", [])) >= holders,
        what=f"the clique census to count {holders} nodes with a channel in use",
        state=lambda: str(census(client)),
        timeout=60,
    )
    print(census_report(census(client)))
    print(f"\nkubeconfig: {testbed.kubeconfig}")
    print(f"metrics:    http://127.0.0.1:{replicas[0].metrics_port}/metrics (mnnvl-lws)")
    print(f"            http://127.0.0.1:{ds_replicas[0].metrics_port}/metrics (mnnvl-ds)")
    print(f"            http://127.0.0.1:{topology.metrics_port}/metrics (mnnvl-topology)")
    print(f"try:        KUBECONFIG={testbed.kubeconfig} kubectl mnnvl explain -n {args.namespace} deepseek-r1-0")
    print("            (kubectl-mnnvl is on PATH in this environment; see docs/cli.md)")
    return 0


def census(client: kube.Kube) -> dict[str, Any]:
    """mnnvl-topology's census, as tools read it: the JSON in its ConfigMap (empty until it is written)."""
    found = client.get("v1", "configmaps", CENSUS_CONFIGMAP, namespace=controllers.NAMESPACE)
    return {} if found is None else dict(yaml.safe_load(found["data"]["census.json"]))


def census_report(found: dict[str, Any]) -> str:
    lines = [f"\nclique census ({keys.GPU_CLIQUE_LABEL}; ConfigMap {controllers.NAMESPACE}/{CENSUS_CONFIGMAP}):"]
    lines.append(f"  {'clique':<44} {'nodes':>5} {'gpus':>5} {'channels':>8} {'free':>5}")
    for count in found.get("cliques", []):
        lines.append(
            f"  {count['clique']:<44} {count['nodes']:>5} {count['gpus']:>5} {count['channelNodes']:>8} "
            f"{count['freeNodes']:>5}"
        )
    unlabelled = found.get("gpuNodesWithoutClique", [])
    lines.append(f"  GPU nodes without a clique label: {len(unlabelled)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
