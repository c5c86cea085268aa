"""The demo: the testbed with mnnvl running, the seed's two examples applied, and what happened to them.

Option 1 (deepseek-r1, a LeaderWorkerSet) is reported per replica, Option 2 (llm-serving, a DisaggregatedSet,
shrunk to fit a testbed clique per slice) per slice: its ComputeDomain, whether the domain is ready, which
containers got the channel claim, and which pods are still gated. Then mnnvl-topology's clique census (KAI's and
Grove's CRDs are installed for it): per clique, its nodes, GPUs, nodes with a channel in use and free nodes.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import yaml

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection, references
from mnnvl_runtime import kube

from . import cluster, controllers, testing

EXAMPLE = pathlib.Path(__file__).parent / "examples" / "deepseek-r1.yaml"
DS_EXAMPLE = pathlib.Path(__file__).parent / "examples" / "llm-serving.yaml"
#: deepseek-r1 fills two cliques of 4 nodes; the DisaggregatedSet's two slices take two more.
DEMO_NODES = 16
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
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
    print(report(client, args.namespace, lws["metadata"]["name"]))
    print(slice_report(client, args.namespace, ds["metadata"]["name"]))
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
    print(f"try:        KUBECONFIG={testbed.kubeconfig} kubectl -n {args.namespace} get computedomains,pods -o wide")
    return 0


def report(client: kube.Kube, namespace: str, lws: str) -> str:
    pods = testing.pods(client, namespace, f"{keys.LWS_NAME_LABEL}={lws}")
    templates = {
        t["metadata"]["name"]
        for t in client.list_objects("resource.k8s.io/v1", "resourceclaimtemplates", namespace=namespace)
    }
    domains = {
        d["metadata"]["name"]: d
        for d in client.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace)
        if d["metadata"].get("labels", {}).get(keys.WORKLOAD_NAME_LABEL) == lws
    }
    by_group: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_group.setdefault(pod["metadata"]["labels"].get(keys.LWS_GROUP_INDEX_LABEL, "?"), []).append(pod)
    lines = [f"\nLeaderWorkerSet {namespace}/{lws}: {len(by_group)} replicas, {len(domains)} ComputeDomains"]
    for group in sorted(by_group):
        members = sorted(by_group[group], key=lambda p: p["metadata"]["name"])
        domain = members[0]["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION, "(none)")
        found = domains.get(domain)
        ready = _ready(domain, found, templates)
        nodes = found["spec"].get("numNodes") if found else "-"
        state = "ready" if ready else "not ready"
        lines.append(f"\nreplica {group}: ComputeDomain {domain} ({state}, numNodes={nodes})")
        lines.extend(pod_line(pod) for pod in members)
    gated = [p["metadata"]["name"] for p in pods if injection.is_gated(p["spec"])]
    lines.append(f"\ngated pods: {', '.join(gated) or 'none'}")
    return "\n".join(lines)


def pod_line(pod: dict[str, Any], width: int = 22) -> str:
    """One pod: phase, gate, node, and which containers hold the channel claim."""
    claimed = [
        c["name"]
        for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        if any(r["name"] == keys.CHANNEL_CLAIM_NAME for r in (c.get("resources") or {}).get("claims", []))
    ]
    others = [c["name"] for c in pod["spec"]["containers"] if c["name"] not in claimed]
    gate = "gated" if injection.is_gated(pod["spec"]) else "ungated"
    phase, node = pod["status"].get("phase", "?"), pod["spec"].get("nodeName", "-")
    return (
        f"  {pod['metadata']['name']:<{width}} {phase:<8} {gate:<8} node={node:<10} "
        f"claim in: {', '.join(claimed) or '-'}   no claim: {', '.join(others) or '-'}"
    )


def _ready(domain: str, found: dict[str, Any] | None, templates: set[str]) -> bool:
    return (
        found is not None
        and not found["metadata"].get("deletionTimestamp")
        and names.claim_template_name(domain) in templates
    )


def slice_report(client: kube.Kube, namespace: str, ds: str) -> str:
    """Per slice of the DisaggregatedSet: its ComputeDomain, readiness, and each pod's claimed containers."""
    pods = testing.pods(client, namespace, f"{keys.DS_NAME_LABEL}={ds}")
    templates = {
        t["metadata"]["name"]
        for t in client.list_objects("resource.k8s.io/v1", "resourceclaimtemplates", namespace=namespace)
    }
    domains = {
        d["metadata"]["name"]: d
        for d in client.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace)
        if d["metadata"].get("labels", {}).get(keys.WORKLOAD_NAME_LABEL) == ds
    }
    by_slice: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_slice.setdefault(pod["metadata"]["labels"].get(keys.DS_SLICE_LABEL, "0"), []).append(pod)
    lines = [f"\nDisaggregatedSet {namespace}/{ds}: {len(by_slice)} slices, {len(domains)} ComputeDomains"]
    for slice_index in sorted(by_slice, key=int):
        members = sorted(by_slice[slice_index], key=lambda p: p["metadata"]["name"])
        recorded = sorted(
            {d for p in members if (d := p["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION))}
        )
        described = []
        for domain in recorded:
            found = domains.get(domain)
            state = "ready" if _ready(domain, found, templates) else "not ready"
            described.append(f"{domain} ({state}, numNodes={found['spec'].get('numNodes') if found else '-'})")
        enrolled = sorted(
            {
                p["metadata"]["labels"][keys.DS_ROLE_LABEL]
                for p in members
                if p["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
            }
        )
        lines.append(
            f"\nslice {slice_index}: ComputeDomain {', '.join(described) or '(none)'}; "
            f"shared by roles: {', '.join(enrolled) or '-'}"
        )
        lines.extend(pod_line(pod, width=36) for pod in members)
    gated = [p["metadata"]["name"] for p in pods if injection.is_gated(p["spec"])]
    lines.append(f"\ngated pods: {', '.join(gated) or 'none'}")
    return "\n".join(lines)


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
