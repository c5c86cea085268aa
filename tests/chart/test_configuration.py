"""Every rendered Configuration is one the controllers accept: loaded with mnnvl_runtime.settings' own loader."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import settings
from mnnvl_testbed import chart

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
        "computeDomain": {"apiServerRequestTimeoutSeconds": 30, "deletionFenceSeconds": 45},
        "leaderElection": {
            "leaderElect": True,
            "leaseDurationSeconds": 30,
            "renewDeadlineSeconds": 20,
            "retryPeriodSeconds": 4,
        },
        "watching": {"storeResyncSeconds": 300},
        "reconciliation": {"concurrency": 32},
        "shutdown": {"drainSeconds": 2, "stopTimeoutSeconds": 20},
    }
    objects = render(overrides={"guardian": {"configuration": extra, "deletionProtection": "Deny"}})
    path = tmp_path / "guardian.yaml"
    path.write_text(by_kind(objects, "ConfigMap")["mnnvl-guardian-configuration"]["data"]["configuration.yaml"])
    loaded = settings.load_configuration(path)
    assert loaded.leader_election.lease_duration_seconds == 30
    assert loaded.reconciliation.concurrency == 32
    assert (loaded.shutdown.drain_seconds, loaded.shutdown.stop_timeout_seconds) == (2, 20)
    assert loaded.compute_domain.deletion_fence_seconds == 45
    assert loaded.compute_domain.api_server_request_timeout_seconds == 30
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


@pytest.mark.parametrize(
    ("compute_domain", "accepted"),
    [
        pytest.param({"deletionFenceSeconds": 61}, True, id="at-the-default-bound"),
        pytest.param({"apiServerRequestTimeoutSeconds": 1, "deletionFenceSeconds": 2}, True, id="at-a-declared-bound"),
        pytest.param({"apiServerRequestTimeoutSeconds": 1, "deletionFenceSeconds": 1.5}, False, id="below-a-declared"),
        pytest.param({"deletionFenceSeconds": 60.5}, False, id="below-the-default-bound"),
    ],
)
def test_the_chart_and_the_controllers_draw_the_fence_bound_at_the_same_place(
    render: Render, tmp_path: pathlib.Path, compute_domain: dict[str, float], accepted: bool
) -> None:
    """The chart refuses exactly the fences the controllers' loader refuses (the margin is written in both)."""
    path = tmp_path / "lws.yaml"
    path.write_text(yaml.safe_dump({"computeDomain": compute_domain}))
    try:
        settings.load_configuration(path)
        loader_accepts = True
    except settings.SettingsError:
        loader_accepts = False
    try:
        render(overrides={"lws": {"configuration": {"computeDomain": compute_domain}}})
        chart_accepts = True
    except chart.RenderError:
        chart_accepts = False
    assert (loader_accepts, chart_accepts) == (accepted, accepted)


def test_the_topology_controller_is_given_its_releases_installation_identity(
    render: Render, tmp_path: pathlib.Path
) -> None:
    """What it records on the Topologies and bindings it creates, so a second release never touches them."""
    enabled = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}
    objects = render(overrides=enabled, release="gpu", namespace="team-b")
    path = tmp_path / "topology.yaml"
    path.write_text(by_kind(objects, "ConfigMap")["gpu-mnnvl-topology-configuration"]["data"]["configuration.yaml"])
    assert settings.load_configuration(path).installation == "team-b/gpu"
