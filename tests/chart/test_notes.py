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
DS_WARNING = "WARNING: ds is enabled but the cluster does not serve leaderworkerset.x-k8s.io/v1 LeaderWorkerSets"


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
    text = notes(render, notes_chart, api_versions=[LWS_API], overrides={"featureGates": {"AutoComputeDomain": True}})
    assert "mnnvl-lws: enabled, 2 replica(s), AutoComputeDomain=true, ComputeDomain RBAC granted" in text
    assert "mnnvl-guardian: enabled, 2 replica(s), AutoComputeDomain=true, ComputeDomain RBAC granted" in text
    assert "mnnvl-topology: disabled" in text
    assert "kubectl -n mnnvl-system get leases mnnvl-lws mnnvl-ds mnnvl-guardian" in text
    assert "kubectl -n mnnvl-system logs deployment/mnnvl-ds" in text
    assert "WARNING" not in text


def test_notes_warn_when_ds_is_enabled_without_leaderworkerset_crds(render: Render, notes_chart: pathlib.Path) -> None:
    assert DS_WARNING in notes(render, notes_chart, overrides={"lws": {"enabled": False}})
    assert DS_WARNING not in notes(render, notes_chart, overrides={"ds": {"enabled": False}})


def test_notes_say_the_gate_is_off_and_the_rbac_absent_by_default(render: Render, notes_chart: pathlib.Path) -> None:
    text = notes(render, notes_chart, api_versions=[LWS_API])
    assert "mnnvl-ds: enabled, 2 replica(s), AutoComputeDomain=false, ComputeDomain RBAC not granted" in text
