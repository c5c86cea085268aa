"""Every rendered Configuration is one the controllers accept: loaded with mnnvl_runtime.settings' own loader."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import settings

from .conftest import MATRIX, Render, by_kind


@pytest.mark.parametrize("case", MATRIX)
def test_every_rendered_configuration_loads_with_the_controllers_loader(
    case: str, rendered: dict[str, list[dict[str, Any]]], tmp_path: pathlib.Path
) -> None:
    maps = {
        name: item for name, item in by_kind(rendered[case], "ConfigMap").items() if name.endswith("-configuration")
    }
    assert maps, f"{case}: no Configuration rendered"
    for name, item in maps.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(item["data"]["configuration.yaml"])
        settings.load_configuration(path)


def test_every_configuration_key_the_chart_accepts_is_one_the_controllers_accept(
    render: Render, tmp_path: pathlib.Path
) -> None:
    extra = {
        "computeDomain": {"deletionFenceSeconds": 45},
        "leaderElection": {
            "leaderElect": True,
            "leaseDurationSeconds": 30,
            "renewDeadlineSeconds": 20,
            "retryPeriodSeconds": 4,
        },
        "watching": {"storeResyncSeconds": 300},
        "reconciliation": {"concurrency": 32},
    }
    objects = render(overrides={"guardian": {"configuration": extra, "deletionProtection": "Deny"}})
    path = tmp_path / "guardian.yaml"
    path.write_text(by_kind(objects, "ConfigMap")["mnnvl-guardian-configuration"]["data"]["configuration.yaml"])
    loaded = settings.load_configuration(path)
    assert loaded.leader_election.lease_duration_seconds == 30
    assert loaded.reconciliation.concurrency == 32
    assert loaded.compute_domain.deletion_fence_seconds == 45
    assert loaded.compute_domain.deletion_protection is configuration_file.DeletionProtection.DENY
    assert loaded.webhook.cert_dir == "/var/run/mnnvl/webhook-certs"
    assert (loaded.metrics_bind_address, loaded.health_bind_address) == (":8080", ":8081")


def test_a_custom_topologies_list_reaches_the_rendered_configuration_and_loads(
    render: Render, tmp_path: pathlib.Path
) -> None:
    topologies = [
        {
            "name": "gb200",
            "levels": [
                {"nodeLabel": "nvidia.com/gpu.clique", "alias": "clique"},
                {"nodeLabel": "kubernetes.io/hostname"},
            ],
            "groveBinding": {"name": "gb200-grove"},
        },
        {"name": "racks", "levels": [{"nodeLabel": "example.com/rack"}], "groveBinding": {"enabled": False}},
    ]
    objects = render(
        overrides={
            "topology": {
                "enabled": True,
                "kaiScheduler": {"installed": True},
                "configuration": {"topologies": topologies},
            }
        }
    )
    path = tmp_path / "topology.yaml"
    path.write_text(by_kind(objects, "ConfigMap")["mnnvl-topology-configuration"]["data"]["configuration.yaml"])
    loaded = settings.load_configuration(path)
    assert [(entry.name, entry.binding_name, entry.grove_binding.enabled) for entry in loaded.topologies] == [
        ("gb200", "gb200-grove", True),
        ("racks", "racks-binding", False),
    ]
    assert [level.alias for level in loaded.topologies[0].levels] == ["clique", None]


def test_the_topology_controller_is_given_its_releases_installation_identity(
    render: Render, tmp_path: pathlib.Path
) -> None:
    """What it records on the Topologies and bindings it creates, so a second release never touches them."""
    enabled = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}
    objects = render(overrides=enabled, release="gpu", namespace="team-b")
    path = tmp_path / "topology.yaml"
    path.write_text(by_kind(objects, "ConfigMap")["gpu-mnnvl-topology-configuration"]["data"]["configuration.yaml"])
    assert settings.load_configuration(path).installation == "team-b/gpu"
