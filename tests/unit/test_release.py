"""One version per release (docs/release.md): the chart's `version` and `appVersion`, which is the image's tag and
version label, and the version of every package the image ships, so a release that bumps one and forgets another
fails here."""

from __future__ import annotations

import pathlib

import yaml
from requirements import sbom

ROOT = pathlib.Path(__file__).parents[2]


def test_the_chart_and_every_shipped_package_carry_one_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "mnnvl" / "Chart.yaml").read_text())
    versions = {package.name: package.version for package in sbom.own_distributions(ROOT)}
    assert len(versions) >= 7  # every package runtime.in lists was read
    assert chart["version"] == chart["appVersion"]
    assert versions == dict.fromkeys(versions, chart["appVersion"])
