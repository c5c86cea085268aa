"""Configurations across one upgrade step (docs/upgrades.md, "The Configuration file"): the controllers of the upgrade
baseline (`mnnvl_testbed.baseline`) accept every Configuration this chart writes by itself, and this tree's
controllers accept every one the baseline's chart wrote.

Helm rewrites a controller's ConfigMap in place, so an old replica that restarts during a rollout reads the new file,
`<controller>.image.tag` runs an image of another version under the chart, and `helm rollback` writes the old file
under new replicas. The loader refuses unknown keys, so a key the chart starts writing before every image reads it
stops those controllers at start-up. Only the chart's own switches are set here: a key the user sets is the user's.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from mnnvl_runtime import settings
from mnnvl_testbed import baseline, chart

from .conftest import Render, by_kind

#: Values files inside a chart directory, by case: the defaults, and every controller and switch on.
CASES = {"defaults": (), "all-on": ("ci/all-on-values.yaml",)}

#: Loads each file named on the command line with the loader on PYTHONPATH; prints where that loader lives and the
#: problem of each file it refuses.
LOADER = """
import json, pathlib, sys
from mnnvl_runtime import settings
problems = {}
for name in sys.argv[1:]:
    try:
        settings.load_configuration(pathlib.Path(name))
    except settings.SettingsError as error:
        problems[name] = str(error)
print(json.dumps({"loader": settings.__file__, "problems": problems}))
"""


@pytest.fixture(scope="module")
def baseline_tree() -> pathlib.Path:
    return baseline.tree()


def write_configurations(objects: list[dict[str, Any]], directory: pathlib.Path) -> list[pathlib.Path]:
    """Each rendered Configuration as a file in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, item in by_kind(objects, "ConfigMap").items():
        if name.endswith("-configuration"):
            path = directory / f"{name}.yaml"
            path.write_text(item["data"]["configuration.yaml"])
            written.append(path)
    assert written, "no Configuration rendered"
    return written


def baseline_problems(tree: pathlib.Path, paths: list[pathlib.Path]) -> dict[str, str]:
    """What the baseline's own loader says of each file (only the refused ones)."""
    environment = {**os.environ, "PYTHONPATH": baseline.python_path(tree)}
    result = subprocess.run(
        [sys.executable, "-c", LOADER, *map(str, paths)], env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The baseline's packages must shadow this tree's, or the test would compare this tree with itself.
    assert pathlib.Path(report["loader"]).is_relative_to(tree), report["loader"]
    problems: dict[str, str] = report["problems"]
    return problems


@pytest.mark.parametrize("case", CASES)
def test_the_baseline_controllers_load_what_this_chart_writes(
    case: str, render: Render, baseline_tree: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    objects = render(values=[chart.CHART_DIR / name for name in CASES[case]])
    assert baseline_problems(baseline_tree, write_configurations(objects, tmp_path)) == {}


@pytest.mark.parametrize("case", CASES)
def test_this_tree_loads_what_the_baseline_chart_wrote(
    case: str, render: Render, baseline_tree: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    baseline_chart = baseline_tree / "charts" / "mnnvl"
    objects = render(chart_dir=baseline_chart, values=[baseline_chart / name for name in CASES[case]])
    for path in write_configurations(objects, tmp_path):
        settings.load_configuration(path)


def test_the_baseline_loader_refuses_a_key_it_does_not_know(
    baseline_tree: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """What makes the first test fail once the chart writes a key the baseline's controllers do not know."""
    path = tmp_path / "configuration.yaml"
    path.write_text("apiVersion: config.lws.x-k8s.io/v1\nkind: Configuration\nwatching:\n  notYetKnown: 1\n")
    problems = baseline_problems(baseline_tree, [path])
    assert "unknown field watching.notYetKnown" in problems[str(path)]
