"""NOTES.txt lists what is enabled and how to check it, and warns when a scope controller has no
LeaderWorkerSet API to work on. helm renders NOTES only on install, against a cluster; here a copy of the chart
renders the same template into a ConfigMap, so `helm template` shows it."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import pytest

from mnnvl_testbed import chart

from .conftest import Render, one

LWS_API = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"
DS_API = "disaggregatedset.x-k8s.io/v1/DisaggregatedSet"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1/ComputeDomain"
KAI_TOPOLOGY_API = "kai.scheduler/v1alpha1/Topology"
#: What a cluster with everything mnnvl works on serves.
EVERY_API = [LWS_API, DS_API, COMPUTE_DOMAIN_API, KAI_TOPOLOGY_API]
GATE_ON = {"featureGates": {"AutoComputeDomain": True}}
LWS_WARNING = "WARNING: lws is enabled but the cluster does not serve leaderworkerset.x-k8s.io/v1 LeaderWorkerSets"
DS_WARNING = "WARNING: ds is enabled but the cluster does not serve disaggregatedset.x-k8s.io/v1 DisaggregatedSets"
TOPOLOGY_WARNING = "WARNING: topology is enabled but the cluster does not serve kai.scheduler/v1alpha1 Topologies"
GATE_OFF_WARNING = "WARNING: the AutoComputeDomain feature gate is off for "
DOMAINS_WARNING = (
    "run with AutoComputeDomain on but the cluster does not serve\nresource.nvidia.com/v1beta1 ComputeDomains"
)
TOPOLOGY_ON = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    copy = tmp_path_factory.mktemp("chart") / "mnnvl"
    shutil.copytree(chart.CHART_DIR, copy)
    templates = copy / "templates"
    notes = (templates / "NOTES.txt").read_text()
    (templates / "_notes.tpl").write_text('{{- define "test.notes" -}}\n' + notes + "\n{{- end }}\n")
    (templates / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: |\n    {{- include "test.notes" . | nindent 4 }}\n'
    )
    return copy


def notes(render: Render, chart_dir: pathlib.Path, **arguments: Any) -> str:
    text: str = one(render(chart_dir=chart_dir, **arguments), "ConfigMap", "notes")["data"]["notes"]
    return text


def test_notes_list_each_controller_and_how_to_check_it(render: Render, notes_chart: pathlib.Path) -> None:
    text = notes(render, notes_chart, api_versions=EVERY_API, overrides=GATE_ON)
    assert "mnnvl-lws: enabled, 2 replica(s), AutoComputeDomain=true, ComputeDomain RBAC granted" in text
    assert "mnnvl-guardian: enabled, 2 replica(s), AutoComputeDomain=true, ComputeDomain RBAC granted" in text
    assert "mnnvl-topology: disabled" in text
    assert "kubectl -n mnnvl-system get leases mnnvl-lws mnnvl-ds mnnvl-guardian" in text
    assert "kubectl -n mnnvl-system logs deployment/mnnvl-ds" in text
    assert "WARNING" not in text


def test_notes_check_the_api_each_scope_controller_works_on(render: Render, notes_chart: pathlib.Path) -> None:
    # LeaderWorkerSets alone do not serve mnnvl-ds: it needs DisaggregatedSets.
    only_lws = notes(render, notes_chart, api_versions=[LWS_API, COMPUTE_DOMAIN_API], overrides=GATE_ON)
    assert DS_WARNING in only_lws
    assert LWS_WARNING not in only_lws
    only_ds = notes(render, notes_chart, api_versions=[DS_API, COMPUTE_DOMAIN_API], overrides=GATE_ON)
    assert LWS_WARNING in only_ds
    assert DS_WARNING not in only_ds
    without_ds = notes(render, notes_chart, overrides={**GATE_ON, "ds": {"enabled": False}})
    assert DS_WARNING not in without_ds
    assert LWS_WARNING in without_ds


def test_notes_warn_when_topology_has_no_kai_topology_api(render: Render, notes_chart: pathlib.Path) -> None:
    assert TOPOLOGY_WARNING in notes(render, notes_chart, api_versions=[LWS_API, DS_API], overrides=TOPOLOGY_ON)
    assert TOPOLOGY_WARNING not in notes(render, notes_chart, api_versions=EVERY_API, overrides=TOPOLOGY_ON)
    assert TOPOLOGY_WARNING not in notes(render, notes_chart, api_versions=[LWS_API, DS_API])


def test_notes_warn_that_a_release_with_the_gate_off_manages_nothing(render: Render, notes_chart: pathlib.Path) -> None:
    text = notes(render, notes_chart, api_versions=EVERY_API)
    assert "mnnvl-ds: enabled, 2 replica(s), AutoComputeDomain=false, ComputeDomain RBAC not granted" in text
    assert GATE_OFF_WARNING + "mnnvl-lws, mnnvl-ds:" in text
    assert "--reset-then-reuse-values --set featureGates.AutoComputeDomain=true" in text
    # A controller's own gate counts: only the one still off is named.
    lws_on = notes(
        render, notes_chart, api_versions=EVERY_API, overrides={"lws": {"featureGates": GATE_ON["featureGates"]}}
    )
    assert GATE_OFF_WARNING + "mnnvl-ds:" in lws_on
    # The warning is about workloads, which only the scope controllers manage: never for the guardian alone.
    guardian_only = notes(
        render, notes_chart, api_versions=EVERY_API, overrides={"lws": {"enabled": False}, "ds": {"enabled": False}}
    )
    assert GATE_OFF_WARNING not in guardian_only
    assert GATE_OFF_WARNING not in notes(render, notes_chart, api_versions=EVERY_API, overrides=GATE_ON)


def test_notes_warn_when_the_gate_is_on_without_the_computedomain_api(
    render: Render, notes_chart: pathlib.Path
) -> None:
    text = notes(render, notes_chart, api_versions=[LWS_API, DS_API], overrides=GATE_ON)
    assert "WARNING: mnnvl-lws, mnnvl-ds, mnnvl-guardian " + DOMAINS_WARNING in text
    # With the gate off the controllers never ask for ComputeDomains.
    assert DOMAINS_WARNING not in notes(render, notes_chart, api_versions=[LWS_API, DS_API])
