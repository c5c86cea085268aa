from __future__ import annotations

import pathlib
from typing import Any

import pydantic
import pytest
import yaml

from mnnvl_api import keys, models
from mnnvl_api.models import computedomain, configuration

OBJECTS = pathlib.Path(__file__).parent / "objects"


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((OBJECTS / name).read_text())
    return loaded


@pytest.mark.parametrize(
    ("model", "file"),
    [
        pytest.param(models.LeaderWorkerSet, "deepseek-r1.yaml", id="leaderworkerset"),
        pytest.param(models.DisaggregatedSet, "llm-serving.yaml", id="disaggregatedset"),
        pytest.param(models.ComputeDomain, "computedomain.yaml", id="computedomain"),
        pytest.param(models.Topology, "topology.yaml", id="kai-topology"),
        pytest.param(models.ClusterTopologyBinding, "clustertopologybinding.yaml", id="grove-binding"),
    ],
)
def test_real_objects_parse_and_dump_back_unchanged(model: type[models.KubeModel], file: str) -> None:
    wire = load(file)
    assert model.model_validate(wire).to_wire() == wire


def test_unknown_fields_are_kept_at_every_level() -> None:
    wire = load("deepseek-r1.yaml")
    wire["spec"]["futureField"] = {"x": 1}
    wire["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": 2}
    wire["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert models.LeaderWorkerSet.model_validate(wire).to_wire() == wire


def test_the_seed_leaderworkerset_reads_as_expected() -> None:
    lws = models.LeaderWorkerSet.model_validate(load("deepseek-r1.yaml"))
    assert lws.metadata.annotations[keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION] == "enabled"
    assert (lws.spec.replicas, lws.spec.leader_worker_template.size) == (2, 4)
    assert [path for path, _ in lws.spec.templates("spec")] == ["spec.leaderWorkerTemplate.workerTemplate"]
    worker = lws.spec.leader_worker_template.worker_template
    assert [c["name"] for c in worker.spec["containers"]] == ["vllm", "routing-proxy"]


def test_a_leader_template_is_listed_first() -> None:
    lws = models.LeaderWorkerSet.model_validate(
        {
            "metadata": {"name": "x"},
            "spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": {}}, "workerTemplate": {}}},
        }
    )
    assert [path for path, _ in lws.spec.templates("spec")] == [
        "spec.leaderWorkerTemplate.leaderTemplate",
        "spec.leaderWorkerTemplate.workerTemplate",
    ]


def test_the_seed_disaggregatedset_reads_roles_and_slices() -> None:
    ds = models.DisaggregatedSet.model_validate(load("llm-serving.yaml"))
    assert ds.spec.slices == 2
    assert [role.name for role in ds.spec.roles] == ["prefill", "decode", "encoder"]
    assert ds.spec.roles[2].metadata.annotations == {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "disabled"}
    assert ds.spec.placement_policy is not None
    assert ds.spec.placement_policy.topology == keys.GPU_CLIQUE_LABEL


def test_a_computedomain_exposes_its_claim_template() -> None:
    domain = models.ComputeDomain.model_validate(load("computedomain.yaml"))
    assert domain.claim_template_name == "deepseek-r1-0-x7k2b-channel"
    assert domain.status is not None
    assert domain.status.nodes[0].clique_id == "6c1b0a1e-0000-4000-8000-000000000001.1"


def test_a_managed_domain_manifest_has_zero_nodes_our_finalizer_and_no_owner_reference() -> None:
    assert computedomain.manifest(
        name="deepseek-r1-0-x7k2b",
        namespace="serving",
        claim_template="deepseek-r1-0-x7k2b-channel",
        labels={keys.OWNER_UID_LABEL: "u1"},
    ) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "deepseek-r1-0-x7k2b",
            "namespace": "serving",
            "labels": {keys.OWNER_UID_LABEL: "u1"},
            "finalizers": [keys.PROTECTION_FINALIZER],
        },
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "deepseek-r1-0-x7k2b-channel"}}},
    }


def test_the_wrong_kind_is_rejected() -> None:
    wire = load("computedomain.yaml")
    wire["kind"] = "ComputeDomainClique"
    with pytest.raises(pydantic.ValidationError, match="kind"):
        models.ComputeDomain.model_validate(wire)


def test_the_feature_gate_is_off_unless_turned_on() -> None:
    assert models.Configuration().auto_compute_domain is False
    assert (
        models.Configuration.model_validate({"featureGates": {"AutoComputeDomain": False}}).auto_compute_domain is False
    )
    assert models.Configuration.model_validate(load("configuration.yaml")).auto_compute_domain is True


def test_configuration_defaults() -> None:
    config = models.Configuration()
    assert config.compute_domain.deletion_protection is configuration.DeletionProtection.FINALIZER
    assert config.webhook.port == 9443
    assert config.leader_election.leader_elect is True


def test_deny_protection_is_read() -> None:
    config = models.Configuration.model_validate(
        {
            "apiVersion": "config.lws.x-k8s.io/v1",
            "kind": "Configuration",
            "computeDomain": {"deletionProtection": "Deny"},
        }
    )
    assert config.compute_domain.deletion_protection is configuration.DeletionProtection.DENY


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param({"apiVersion": "config.lws.x-k8s.io/v1alpha1"}, "apiVersion", id="wrong-api-version"),
        pytest.param({"computeDomain": {"deletionProtection": "Never"}}, "deletionProtection", id="unknown-protection"),
        pytest.param({"featureGates": {"AutoComputeDomain": "maybe"}}, "featureGates", id="gate-not-a-bool"),
        pytest.param({"leaderElection": {"leaseDurationSeconds": 5}}, "renewDeadlineSeconds", id="renew-after-expiry"),
        pytest.param({"internalCertManagement": {"enable": True}}, "internalCertManagement", id="unknown-key"),
        pytest.param({"featureGates": {"OtherGate": True}}, "OtherGate", id="unknown-gate"),
    ],
)
def test_bad_configuration_names_the_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        models.Configuration.model_validate(document)


def test_kai_topology_levels_are_bounded() -> None:
    with pytest.raises(pydantic.ValidationError, match="levels"):
        models.Topology.model_validate({"metadata": {"name": "t"}, "spec": {"levels": []}})


def test_grove_binding_domains_follow_the_crd_pattern() -> None:
    with pytest.raises(pydantic.ValidationError, match="domain"):
        models.ClusterTopologyBinding.model_validate(
            {"metadata": {"name": "b"}, "spec": {"levels": [{"domain": "GPU.clique", "key": "nvidia.com/gpu.clique"}]}}
        )
