"""The demo: the testbed with mnnvl running, the seed's two examples applied, and what happened to them.

Option 1 (deepseek-r1, a LeaderWorkerSet) is reported per replica, Option 2 (llm-serving, a DisaggregatedSet,
shrunk to fit a testbed clique per slice) per slice: its ComputeDomain, whether the domain is ready, which
containers got the channel claim, and which pods are still gated. Then mnnvl-topology's clique census (KAI's and
Grove's CRDs are installed for it): per clique, its nodes, GPUs, nodes with a channel in use and free nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    listed = _list_workload(
        client, namespace, lws, name_label=keys.LWS_NAME_LABEL, group_label=keys.LWS_GROUP_INDEX_LABEL, no_group="?"
    )
    lines = [
        f"\nLeaderWorkerSet {namespace}/{lws}: {len(listed.groups)} replicas, {len(listed.domains)} ComputeDomains"
    ]
    for group in sorted(listed.groups):
        members = listed.groups[group]
        domain = members[0]["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION, "(none)")
        lines.append(f"\nreplica {group}: ComputeDomain {listed.describe(domain)}")
        lines.extend(pod_line(pod) for pod in members)
    lines.append(listed.gated_line())
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _WorkloadListing:
    """What both reports read of one workload: its pods, grouped, and its ComputeDomains with the claim templates."""

    pods: list[kube.Object]
    #: The pods by the value of the grouping label (replica or slice), each group sorted by pod name.
    groups: dict[str, list[kube.Object]]
    #: The workload's ComputeDomains by name.
    domains: dict[str, kube.Object]
    #: The names of the namespace's ResourceClaimTemplates.
    templates: set[str]

    def describe(self, domain: str) -> str:
        """The domain, whether it is ready (present, not being deleted, its claim template made), and its numNodes."""
        found = self.domains.get(domain)
        ready = (
            found is not None
            and not found["metadata"].get("deletionTimestamp")
            and names.claim_template_name(domain) in self.templates
        )
        nodes = found["spec"].get("numNodes") if found else "-"
        return f"{domain} ({'ready' if ready else 'not ready'}, numNodes={nodes})"

    def gated_line(self) -> str:
        gated = [p["metadata"]["name"] for p in self.pods if injection.is_gated(p["spec"])]
        return f"\ngated pods: {', '.join(gated) or 'none'}"


def _list_workload(
    client: kube.Kube, namespace: str, workload: str, *, name_label: str, group_label: str, no_group: str
) -> _WorkloadListing:
    """The workload's pods (those whose `name_label` is `workload`), grouped by `group_label` (`no_group` where a pod
    lacks it), its ComputeDomains and the namespace's claim templates."""
    pods = testing.pods(client, namespace, f"{name_label}={workload}")
    groups: dict[str, list[kube.Object]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        groups.setdefault(pod["metadata"]["labels"].get(group_label, no_group), []).append(pod)
    return _WorkloadListing(
        pods=pods,
        groups=groups,
        domains={
            d["metadata"]["name"]: d
            for d in client.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=namespace)
            if d["metadata"].get("labels", {}).get(keys.WORKLOAD_NAME_LABEL) == workload
        },
        templates={
            t["metadata"]["name"]
            for t in client.list_objects("resource.k8s.io/v1", "resourceclaimtemplates", namespace=namespace)
        },
    )


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


def slice_report(client: kube.Kube, namespace: str, ds: str) -> str:
    """Per slice of the DisaggregatedSet: its ComputeDomain, readiness, and each pod's claimed containers."""
    listed = _list_workload(
        client, namespace, ds, name_label=keys.DS_NAME_LABEL, group_label=keys.DS_SLICE_LABEL, no_group="0"
    )
    lines = [f"\nDisaggregatedSet {namespace}/{ds}: {len(listed.groups)} slices, {len(listed.domains)} ComputeDomains"]
    for slice_index in sorted(listed.groups, key=int):
        members = listed.groups[slice_index]
        recorded = sorted(
            {d for p in members if (d := p["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION))}
        )
        enrolled = sorted(
            {
                p["metadata"]["labels"][keys.DS_ROLE_LABEL]
                for p in members
                if p["metadata"].get("annotations", {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
            }
        )
        lines.append(
            f"\nslice {slice_index}: ComputeDomain {', '.join(map(listed.describe, recorded)) or '(none)'}; "
            f"shared by roles: {', '.join(enrolled) or '-'}"
        )
        lines.extend(pod_line(pod, width=36) for pod in members)
    lines.append(listed.gated_line())
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
