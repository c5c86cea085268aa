"""docs/compatibility.md states the versions the testbed pins, for the chart's appVersion."""

from __future__ import annotations

import re

import yaml

from mnnvl_testbed import chart, versions

COMPATIBILITY_DOC = chart.CHART_DIR.parents[1] / "docs" / "compatibility.md"


def pinned() -> dict[str, set[str]]:
    """Each column of the table: the versions the testbed runs or installs."""
    return {
        "Kubernetes": {versions.KUBERNETES_VERSION},
        "LeaderWorkerSet": {versions.LWS_VERSION},
        "NVIDIA DRA driver": {versions.DRA_DRIVER_VERSION},
        "ComputeDomain CRD": set(versions.COMPUTE_DOMAIN_CRDS),
        "KAI Scheduler": {versions.KAI_VERSION},
        "KAI Topology CRD": {name.removeprefix("kai-") for name in versions.TOPOLOGY_CRDS},
        "Grove": {versions.GROVE_VERSION},
        "Volcano": {versions.VOLCANO_VERSION},
    }


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every row of the tested-versions table, its header first."""
    rows = [line for line in markdown.splitlines() if line.startswith("| mnnvl |") or line.startswith("| `")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_the_table_has_a_row_for_this_release_with_the_pinned_versions() -> None:
    header, *rows = table_rows(COMPATIBILITY_DOC.read_text())
    assert header == ["mnnvl", *pinned()]
    app_version = yaml.safe_load((chart.CHART_DIR / "Chart.yaml").read_text())["appVersion"]
    this_release = [row for row in rows if row[0] == f"`{app_version}`"]
    assert len(this_release) == 1, f"docs/compatibility.md has no single row for mnnvl {app_version}"
    cells = zip(header[1:], this_release[0][1:], strict=True)
    stated = {column: set(re.findall(r"`([^`]+)`", cell)) for column, cell in cells}
    assert stated == pinned()
