"""The testbed serves the NVIDIA driver's own ComputeDomain CRD, at the driver's main branch by default or at
v25.12.0, where `spec.numNodes` is still required; the API server accepts the domains mnnvl creates under both.
"""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.models import computedomain
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, crds, manifests, testing, thirdparty, versions

CRD_NAME = f"{keys.COMPUTE_DOMAIN_PLURAL}.{keys.COMPUTE_DOMAIN_GROUP}"
DRA_API = "resource.k8s.io/v1"


def served_crd(api: kube.Kube) -> kube.Object:
    crd = api.get(crds.CRD_API, "customresourcedefinitions", CRD_NAME)
    assert crd is not None
    return crd


def shipped_crd(release: str) -> dict[str, Any]:
    [crd] = thirdparty.documents(versions.COMPUTE_DOMAIN_CRDS[release].file)
    return crd


def as_mnnvl_creates_it(ns: str, name: str) -> dict[str, Any]:
    """A domain as mnnvl's controllers send it (the manifest function they use)."""
    labels = {keys.OWNER_UID_LABEL: "6f1c1e0a-0000-4000-8000-000000000001", keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
    return computedomain.manifest(name=name, namespace=ns, claim_template=f"{name}-channel", labels=labels)


def without_num_nodes(ns: str, name: str) -> dict[str, Any]:
    domain = as_mnnvl_creates_it(ns, name)
    del domain["spec"]["numNodes"]
    domain["metadata"].pop("finalizers")
    return domain


def create(api: kube.Kube, ns: str, domain: dict[str, Any]) -> kube.Object:
    return api.request("POST", kube.path_of(crds.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns), body=domain)


def release_protection(api: kube.Kube, ns: str, name: str) -> None:
    """Drop mnnvl's finalizer (no guardian runs in these tests) so the namespace can go."""
    path = kube.path_of(crds.CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns, name=name)
    api.request("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=kube.MERGE_PATCH)


def brought_up(api: kube.Kube, ns: str, name: str) -> kube.Object:
    """The domain once the driver made it Ready and created its claim template."""

    def ready() -> kube.Object | None:
        domain = api.get(crds.CD_API, keys.COMPUTE_DOMAIN_PLURAL, name, namespace=ns)
        template = api.get(DRA_API, "resourceclaimtemplates", f"{name}-channel", namespace=ns)
        return domain if domain and (domain.get("status") or {}).get("status") == "Ready" and template else None

    return testing.wait_for(ready, what=f"ComputeDomain {name} Ready with its claim template", timeout=60)


def test_the_testbed_serves_the_drivers_main_branch_crd_as_shipped(api: kube.Kube, testbed: cluster.Testbed) -> None:
    assert testbed.computedomain_crd == versions.COMPUTE_DOMAIN_CRD
    served = served_crd(api)
    shipped = shipped_crd(versions.COMPUTE_DOMAIN_CRD)
    assert served["spec"]["versions"] == shipped["spec"]["versions"]
    assert served["spec"]["names"] == shipped["spec"]["names"]
    assert not crds.num_nodes_required(api)


def test_the_main_branch_crd_accepts_mnnvls_domains_and_defaults_num_nodes(api: kube.Kube, ns: str) -> None:
    created = create(api, ns, as_mnnvl_creates_it(ns, "managed"))
    assert created["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "managed-channel"}, "allocationMode": "Single"},
    }
    assert create(api, ns, without_num_nodes(ns, "elastic"))["spec"]["numNodes"] == 0
    assert brought_up(api, ns, "managed")["metadata"]["finalizers"] == [
        keys.PROTECTION_FINALIZER,
        manifests.COMPUTE_DOMAIN_FINALIZER,
    ]
    release_protection(api, ns, "managed")


def test_the_v25_12_crd_requires_num_nodes_and_accepts_mnnvls_domains(
    api: kube.Kube, ns: str, testbed: cluster.Testbed
) -> None:
    with testing.computedomain_crd(testbed, versions.LEGACY_COMPUTE_DOMAIN_CRD) as legacy:
        assert legacy.computedomain_crd == versions.LEGACY_COMPUTE_DOMAIN_CRD
        shipped = shipped_crd(versions.LEGACY_COMPUTE_DOMAIN_CRD)
        assert served_crd(api)["spec"]["versions"] == shipped["spec"]["versions"]
        with pytest.raises(kube.ApiError) as refused:
            create(api, ns, without_num_nodes(ns, "elastic"))
        assert refused.value.status == 422
        assert "spec.numNodes: Required value" in str(refused.value.body)
        created = create(api, ns, as_mnnvl_creates_it(ns, "managed"))
        assert created["spec"]["numNodes"] == 0
        brought_up(api, ns, "managed")
        release_protection(api, ns, "managed")
    assert not crds.num_nodes_required(api)
    assert served_crd(api)["spec"]["versions"] == shipped_crd(versions.COMPUTE_DOMAIN_CRD)["spec"]["versions"]
