"""What keeps the controllers available through node drains and losses: disruption budgets that honour the values
and never block every drain, replicas spread over nodes and zones by default, readiness on /readyz, and a
termination grace period longer than the process's own stop deadline."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import models
from mnnvl_testbed import chart

from .conftest import Render, by_kind, one

CONTROLLERS = ("lws", "ds", "guardian", "topology")
ALL_ENABLED = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}


def pod_spec(objects: list[dict[str, Any]], controller: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment", f"mnnvl-{controller}")["spec"]["template"]["spec"]
    return spec


def budget(objects: list[dict[str, Any]], controller: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "PodDisruptionBudget", f"mnnvl-{controller}")["spec"]
    return spec


@pytest.mark.parametrize("max_unavailable", [2, "50%"])
def test_max_unavailable_is_rendered_as_given(render: Render, max_unavailable: int | str) -> None:
    objects = render(overrides={"lws": {"podDisruptionBudget": {"maxUnavailable": max_unavailable}}})
    assert budget(objects, "lws")["maxUnavailable"] == max_unavailable


def test_every_budget_lets_unhealthy_replicas_be_evicted(render: Render) -> None:
    objects = render(overrides=ALL_ENABLED)
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert set(budgets) == {f"mnnvl-{controller}" for controller in CONTROLLERS}
    assert {item["spec"]["unhealthyPodEvictionPolicy"] for item in budgets.values()} == {"AlwaysAllow"}


def test_one_replica_with_the_default_budget_stays_evictable(render: Render) -> None:
    objects = render(overrides={"guardian": {"replicas": 1}})
    assert budget(objects, "guardian")["maxUnavailable"] == 1


@pytest.mark.parametrize(
    ("block", "message"),
    [
        pytest.param(
            {"podDisruptionBudget": {"maxUnavailable": 0}},
            "lws.podDisruptionBudget.maxUnavailable=0 lets no replica be evicted, so no node running one can be "
            "drained: set maxUnavailable to 1 or more, or set lws.podDisruptionBudget.enabled=false",
            id="max-unavailable-0",
        ),
        pytest.param(
            {"podDisruptionBudget": {"maxUnavailable": "0%"}},
            "lws.podDisruptionBudget.maxUnavailable=0% lets no replica be evicted",
            id="max-unavailable-0-percent",
        ),
        pytest.param(
            {"podDisruptionBudget": {"minAvailable": 2}},
            "lws.podDisruptionBudget.minAvailable=2 keeps all 2 replicas from eviction, so no node running one can "
            "be drained: set minAvailable below lws.replicas (or use maxUnavailable: 1 instead), raise lws.replicas, "
            "or set lws.podDisruptionBudget.enabled=false",
            id="min-available-equals-replicas",
        ),
        pytest.param(
            {"replicas": 3, "podDisruptionBudget": {"minAvailable": 5}},
            "lws.podDisruptionBudget.minAvailable=5 keeps all 3 replicas from eviction",
            id="min-available-above-replicas",
        ),
        pytest.param(
            {"podDisruptionBudget": {"minAvailable": "100%"}},
            "lws.podDisruptionBudget.minAvailable=100% keeps all 2 replicas from eviction",
            id="min-available-100-percent",
        ),
        pytest.param(
            # Kubernetes rounds a percentage up: 60% of 2 is 2.
            {"podDisruptionBudget": {"minAvailable": "60%"}},
            "lws.podDisruptionBudget.minAvailable=60% keeps all 2 replicas from eviction",
            id="min-available-percent-rounding-up-to-all",
        ),
        pytest.param(
            {"podDisruptionBudget": {"maxUnavailable": None}},
            "lws.podDisruptionBudget sets neither maxUnavailable nor minAvailable: set maxUnavailable (1 by "
            "default), or set lws.podDisruptionBudget.enabled=false",
            id="neither",
        ),
    ],
)
def test_a_budget_that_blocks_every_drain_is_refused(render: Render, block: dict[str, Any], message: str) -> None:
    with pytest.raises(chart.RenderError) as refused:
        render(overrides={"lws": block})
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        pytest.param({"podDisruptionBudget": {"minAvailable": 1}}, {"minAvailable": 1}, id="min-available-1-of-2"),
        pytest.param({"podDisruptionBudget": {"minAvailable": "50%"}}, {"minAvailable": "50%"}, id="half-of-2"),
        pytest.param(
            {"podDisruptionBudget": {"maxUnavailable": 0, "enabled": False}}, None, id="disabled-budget-not-checked"
        ),
    ],
)
def test_a_budget_that_allows_an_eviction_renders(
    render: Render, block: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    objects = render(overrides={"lws": block})
    budgets = by_kind(objects, "PodDisruptionBudget")
    if expected is None:
        assert "mnnvl-lws" not in budgets
    else:
        spec = budgets["mnnvl-lws"]["spec"]
        assert {key: spec[key] for key in expected} == expected


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_replicas_spread_over_nodes_and_zones_by_default(render: Render, controller: str) -> None:
    objects = render(overrides=ALL_ENABLED)
    selector = one(objects, "Deployment", f"mnnvl-{controller}")["spec"]["selector"]["matchLabels"]
    constraints = pod_spec(objects, controller)["topologySpreadConstraints"]
    assert constraints == [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]


def test_a_users_spread_constraints_replace_the_default(render: Render) -> None:
    own = [
        {
            "maxSkew": 1,
            "topologyKey": "example.com/rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "ds"}},
        }
    ]
    objects = render(overrides={"ds": {"topologySpreadConstraints": own}})
    assert pod_spec(objects, "ds")["topologySpreadConstraints"] == own
    assert pod_spec(objects, "lws")["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_liveness_and_readiness_probe_different_paths(render: Render, controller: str) -> None:
    (container,) = pod_spec(render(overrides=ALL_ENABLED), controller)["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_the_grace_period_outlasts_the_processs_own_stop_deadline(render: Render) -> None:
    """The kubelet kills a pod after its grace period; the process gives up on its own after draining and its stop
    timeout, so the grace period must be longer, with the defaults the controllers apply and with values set."""
    defaults = models.Configuration().shutdown
    objects = render(overrides={"ds": {"configuration": {"shutdown": {"drainSeconds": 0, "stopTimeoutSeconds": 40.5}}}})
    default_grace = pod_spec(objects, "lws")["terminationGracePeriodSeconds"]
    assert default_grace >= defaults.drain_seconds + defaults.stop_timeout_seconds + 10
    assert pod_spec(objects, "ds")["terminationGracePeriodSeconds"] >= 0 + 40.5 + 10
