"""Every installer's copy of the webhook configurations is what the controllers register: the
chart's JSON files and the kustomize `webhooks.yaml` files, written by `python -m mnnvl_runtime.webhook_manifests`."""

from __future__ import annotations

import pathlib
import shutil

import pytest
import yaml

from mnnvl_runtime import webhook_manifests

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_controller_registers_its_webhooks_through_the_entry_points() -> None:
    assert sorted(webhook_manifests.registered()) == ["ds", "guardian", "lws"]


def test_the_committed_files_are_what_registration_builds() -> None:
    stale = webhook_manifests.stale(ROOT)
    assert stale == {}, f"run `python -m mnnvl_runtime.webhook_manifests` to rewrite {', '.join(map(str, stale))}"


def test_the_kustomize_files_reach_the_service_and_the_chart_files_hold_only_the_path() -> None:
    files = webhook_manifests.files(ROOT)
    assert sorted(path.relative_to(ROOT).as_posix() for path in files) == [
        "charts/mnnvl/files/webhooks/ds.json",
        "charts/mnnvl/files/webhooks/guardian.json",
        "charts/mnnvl/files/webhooks/lws.json",
        "config/ds/webhooks.yaml",
        "config/lws/webhooks.yaml",
    ]
    (mutating, _) = yaml.safe_load_all(files[ROOT / "config/lws/webhooks.yaml"])
    assert mutating["metadata"] == {"name": "lws-mutating"}
    assert mutating["webhooks"][0]["clientConfig"] == {
        "service": {"name": "lws-webhook", "namespace": "system", "path": "/mutate-leaderworkerset", "port": 443}
    }


@pytest.mark.parametrize("drifted", ["charts/mnnvl/files/webhooks/ds.json", "config/lws/webhooks.yaml"])
def test_check_fails_on_a_drifted_file_and_writing_mends_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], drifted: str
) -> None:
    shutil.copytree(ROOT / "charts", tmp_path / "charts")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    (tmp_path / drifted).write_text((tmp_path / drifted).read_text().replace("Fail", "Ignore"))
    assert webhook_manifests.main(["--check", str(tmp_path)]) == 1
    assert f"stale: {tmp_path / drifted}" in capsys.readouterr().out
    assert webhook_manifests.main([str(tmp_path)]) == 0
    assert webhook_manifests.main(["--check", str(tmp_path)]) == 0
    assert (tmp_path / drifted).read_text() == (ROOT / drifted).read_text()
