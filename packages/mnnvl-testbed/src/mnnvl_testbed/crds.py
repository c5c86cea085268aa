"""Upstream CRDs on the testbed: installed from the third-party directory, and switched between releases.

Switching a running testbed to another release of a CRD is what a Helm CRD upgrade does: the CRD object is
replaced in place and stored objects stay. The API server picks up a new schema shortly after the CRD
changes, so each switch waits until a server-side dry run shows the new release's rules in force.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import thirdparty, versions, waiting

CRD_API = "apiextensions.k8s.io/v1"
KAI_TOPOLOGY_API = "kai.scheduler/v1alpha1"
KAI_TOPOLOGY_PLURAL = "topologies"
GROVE_BINDING_API = "grove.io/v1alpha1"
GROVE_BINDING_PLURAL = "clustertopologybindings"
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
#: Where dry-run probes of namespaced kinds go: the API server creates this namespace itself.
PROBE_NAMESPACE = "default"


def install(api: kube.Kube, crds: list[dict[str, Any]]) -> None:
    """Apply the CRDs as they are and wait until each is established."""
    for crd in crds:
        api.apply(crd, "customresourcedefinitions")
    for crd in crds:
        path = kube.path_of(CRD_API, "customresourcedefinitions", name=crd["metadata"]["name"])

        def established(path: str = path) -> bool:
            return kube.is_condition_true(api.request("GET", path), "Established")

        waiting.wait_for(established, what=f"{path} to be established", timeout=60)


def install_computedomain_crd(api: kube.Kube, release: str) -> None:
    """The driver's ComputeDomain CRD at `release` (a key of `versions.COMPUTE_DOMAIN_CRDS`), in force."""
    crd = versions.COMPUTE_DOMAIN_CRDS[release]
    install(api, thirdparty.documents(crd.file))
    _wait_in_force(lambda: num_nodes_required(api) == crd.num_nodes_required, what=f"the ComputeDomain CRD {release}")


def install_topology_crds(api: kube.Kube, release: str) -> None:
    """KAI's Topology CRD at `release` (a key of `versions.TOPOLOGY_CRDS`) and Grove's binding CRD, in force."""
    crds = versions.TOPOLOGY_CRDS[release]
    install(api, [*thirdparty.documents(crds.kai_topology), *thirdparty.documents(crds.grove_binding)])
    _wait_in_force(lambda: topology_aliases_known(api) == crds.editable_aliases, what=f"the Topology CRD {release}")


def standin(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    """A namespaced CRD serving `kind` under upstream's group, version and plural with an open schema: for APIs
    whose CRD is not available here (Grove's PodCliqueSet and PodGang), so a test can write the objects their
    operator would; nothing about their schema is checked."""
    return {
        "apiVersion": CRD_API,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"mnnvl-testbed/stand-in": "true"}},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def install_grove_workload_standins(api: kube.Kube) -> None:
    """Stand-ins for Grove's PodCliqueSet and PodGang (the scheduler API Grove hands KAI) and Dynamo's
    DynamoGraphDeployment (which makes PodCliqueSets), established."""
    group, version = keys.DYNAMO_API_VERSION.split("/")
    install(
        api,
        [
            standin(keys.GROVE_GROUP, keys.GROVE_VERSION, keys.GROVE_PODCLIQUESET_KIND, keys.GROVE_PODCLIQUESET_PLURAL),
            standin(keys.GROVE_SCHEDULER_GROUP, keys.GROVE_VERSION, "PodGang", keys.GROVE_PODGANG_PLURAL),
            standin(group, version, keys.DYNAMO_DEPLOYMENT_KIND, keys.DYNAMO_DEPLOYMENT_PLURAL),
        ],
    )


def num_nodes_required(api: kube.Kube) -> bool:
    """Whether the API server now refuses a ComputeDomain without `spec.numNodes` (a dry run: nothing is stored)."""
    probe = {
        "apiVersion": CD_API,
        "kind": keys.COMPUTE_DOMAIN_KIND,
        "metadata": {"generateName": "crd-probe-"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "crd-probe"}}},
    }
    return not _accepted_in_dry_run(
        api, kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=PROBE_NAMESPACE), probe
    )


def topology_aliases_known(api: kube.Kube) -> bool:
    """Whether the served Topology schema has `levels[].alias` (KAI v0.17.0+): strict field validation refuses
    unknown fields (a dry run: nothing is stored)."""
    probe = {
        "apiVersion": KAI_TOPOLOGY_API,
        "kind": "Topology",
        "metadata": {"generateName": "crd-probe-"},
        "spec": {"levels": [{"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "clique"}]},
    }
    path = kube.path_of(KAI_TOPOLOGY_API, KAI_TOPOLOGY_PLURAL)
    return _accepted_in_dry_run(api, path, probe, strict=True)


def _accepted_in_dry_run(api: kube.Kube, path: str, body: dict[str, Any], *, strict: bool = False) -> bool:
    query = {"dryRun": "All", **({"fieldValidation": "Strict"} if strict else {})}
    try:
        api.request("POST", path, query=query, body=body)
    except kube.ApiError as refused:
        if refused.status in (400, 422):  # invalid (422), or an unknown field under strict validation (400)
            return False
        raise
    return True


def _wait_in_force(condition: Callable[[], bool], *, what: str) -> None:
    def in_force() -> bool:
        try:
            return condition()
        except kube.ApiError as error:
            if error.status in (404, 503):  # a new or replaced CRD is briefly not served
                return False
            raise

    waiting.wait_for(in_force, what=f"the API server to enforce {what}", timeout=60)
