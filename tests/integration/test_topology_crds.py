"""KAI's Topology and Grove's ClusterTopologyBinding, installed from upstream's CRDs, are validated by the API
server exactly as upstream ships them: what a topology provisioner may and may not change.

The CRDs go into the session's testbed in place (`up --topology-crds` on a running testbed), KAI v0.16.7 first
and then v0.17.0, as a KAI upgrade would replace its CRD.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, crds, testing, thirdparty, versions

HOSTNAME_LABEL = "kubernetes.io/hostname"


@pytest.fixture
def unique_name(api: kube.Kube) -> Iterator[str]:
    """A name for the cluster-scoped objects of one test; whatever the test created under it is deleted after."""
    name = f"nvl72-{uuid.uuid4().hex[:6]}"
    yield name
    topology = kube.path_of(crds.KAI_TOPOLOGY_API, crds.KAI_TOPOLOGY_PLURAL, name=name)
    binding = kube.path_of(crds.GROVE_BINDING_API, crds.GROVE_BINDING_PLURAL, name=name)
    for path in (topology, binding):
        try:
            api.request("DELETE", path)
        except kube.ApiError as error:
            if error.status != 404:
                raise


def topology(name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": crds.KAI_TOPOLOGY_API,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


def create_topology(api: kube.Kube, name: str, levels: list[dict[str, str]]) -> kube.Object:
    return api.request(
        "POST", kube.path_of(crds.KAI_TOPOLOGY_API, crds.KAI_TOPOLOGY_PLURAL), body=topology(name, levels)
    )


def set_levels(api: kube.Kube, name: str, levels: list[dict[str, str]]) -> kube.Object:
    path = kube.path_of(crds.KAI_TOPOLOGY_API, crds.KAI_TOPOLOGY_PLURAL, name=name)
    return api.request("PATCH", path, body={"spec": {"levels": levels}}, content_type=kube.MERGE_PATCH)


def refusal(api: kube.Kube, name: str, levels: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Why the API server refuses setting these levels: (field, message) of each cause."""
    with pytest.raises(kube.ApiError) as refused:
        set_levels(api, name, levels)
    assert refused.value.status == 422
    assert refused.value.body is not None
    status = json.loads(refused.value.body)
    return [(cause["field"], cause["message"]) for cause in status["details"]["causes"]]


def served_schema(api: kube.Kube, crd_name: str) -> Any:
    crd = api.get(crds.CRD_API, "customresourcedefinitions", crd_name)
    assert crd is not None
    return crd["spec"]["versions"][0]["schema"]


def shipped_schema(pinned: versions.ThirdPartyFile) -> Any:
    [crd] = thirdparty.documents(pinned)
    return crd["spec"]["versions"][0]["schema"]


def test_kai_v0_16_7_refuses_any_edit_of_a_topologys_levels(testbed: cluster.Testbed, unique_name: str) -> None:
    release = versions.TOPOLOGY_CRDS["kai-v0.16.7"]
    assert testing.topology_crds(testbed, "kai-v0.16.7").topology_crds == "kai-v0.16.7"
    api = testbed.api()
    assert served_schema(api, "topologies.kai.scheduler") == shipped_schema(release.kai_topology)
    levels = [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": HOSTNAME_LABEL}]
    create_topology(api, unique_name, levels)

    for edited in ([{"nodeLabel": HOSTNAME_LABEL}], [*levels[:1], {"nodeLabel": "example.com/rack"}, *levels[1:]]):
        assert refusal(api, unique_name, edited) == [("spec.levels", "Invalid value: field is immutable")]
    # Aliases do not exist before v0.17.0: the API server drops them, and the levels stay as they were.
    with_alias = [{"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "clique"}, {"nodeLabel": HOSTNAME_LABEL}]
    assert set_levels(api, unique_name, with_alias)["spec"]["levels"] == levels


def test_kai_v0_17_0_accepts_new_aliases_and_refuses_a_new_node_label_sequence(
    testbed: cluster.Testbed, unique_name: str
) -> None:
    release = versions.TOPOLOGY_CRDS["kai-v0.17.0"]
    assert testing.topology_crds(testbed, "kai-v0.17.0").topology_crds == "kai-v0.17.0"
    api = testbed.api()
    assert served_schema(api, "topologies.kai.scheduler") == shipped_schema(release.kai_topology)
    levels = [{"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "clique"}, {"nodeLabel": HOSTNAME_LABEL}]
    create_topology(api, unique_name, levels)

    renamed = [
        {"nodeLabel": keys.GPU_CLIQUE_LABEL, "alias": "nvlink-domain"},
        {"nodeLabel": HOSTNAME_LABEL, "alias": "host"},
    ]
    assert set_levels(api, unique_name, renamed)["spec"]["levels"] == renamed
    for edited in (
        [{"nodeLabel": HOSTNAME_LABEL, "alias": "host"}],
        [renamed[0], {"nodeLabel": "example.com/rack"}, renamed[1]],
    ):
        assert refusal(api, unique_name, edited) == [
            ("spec.levels", "Invalid value: nodeLabel structure is immutable; only aliases may be edited")
        ]


def test_a_grove_binding_that_names_the_kai_topology_is_accepted(testbed: cluster.Testbed, unique_name: str) -> None:
    testing.topology_crds(testbed, "kai-v0.17.0")
    api = testbed.api()
    assert served_schema(api, "clustertopologybindings.grove.io") == shipped_schema(versions.GROVE_BINDING_CRD)
    create_topology(api, unique_name, [{"nodeLabel": keys.GPU_CLIQUE_LABEL}, {"nodeLabel": HOSTNAME_LABEL}])
    spec = {
        "levels": [
            {"domain": "gpuclique", "key": keys.GPU_CLIQUE_LABEL},
            {"domain": "hostname", "key": HOSTNAME_LABEL},
        ],
        "schedulerTopologyBindings": [{"schedulerName": "kai-scheduler", "topologyReference": unique_name}],
    }
    binding = {
        "apiVersion": crds.GROVE_BINDING_API,
        "kind": "ClusterTopologyBinding",
        "metadata": {"name": unique_name},
        "spec": spec,
    }
    created = api.request("POST", kube.path_of(crds.GROVE_BINDING_API, crds.GROVE_BINDING_PLURAL), body=binding)
    assert created["spec"] == spec
