"""Every benchmark scenario runs to the end at a tiny size and reports numbers and a plot.

Benchmarks measure, they never assert a threshold; these tests only make sure a scenario still works. They
need matplotlib, which only the bench environment installs: run them with
`.tox/bench/bin/pytest tests/integration/test_benchmarks.py` (elsewhere they are skipped).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib", reason="the benchmarks plot with matplotlib, installed in the bench env only")

BENCH = pathlib.Path(__file__).parents[2] / "benchmarks" / "bench.py"
#: A table row of numbers: `| 3 | 633.80 | ...` (a header row has no digits in its first cell).
NUMBER_ROW = re.compile(r"^\| [\d,]+ \|.*\d+\.\d+")


def run(tmp_path: pathlib.Path, scenario: str, *arguments: str) -> str:
    plot = tmp_path / f"{scenario}.png"
    finished = subprocess.run(
        [sys.executable, str(BENCH), scenario, *arguments, "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert finished.returncode == 0, f"{scenario} failed:\n{finished.stdout}\n{finished.stderr}"
    assert plot.stat().st_size > 0
    return finished.stdout


def number_rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if NUMBER_ROW.match(line)]


def test_ungate_reports_latencies_of_small_bursts(tmp_path: pathlib.Path) -> None:
    assert len(number_rows(run(tmp_path, "ungate", "--bursts", "1", "3"))) == 2


def test_writes_reports_writes_per_group(tmp_path: pathlib.Path) -> None:
    assert number_rows(run(tmp_path, "writes", "--groups", "2"))


def test_webhook_reports_added_latency(tmp_path: pathlib.Path) -> None:
    assert number_rows(run(tmp_path, "webhook", "--seconds", "2", "--rate", "10"))


def test_memory_reports_rss_ratios(tmp_path: pathlib.Path) -> None:
    assert number_rows(run(tmp_path, "memory", "--workloads", "1", "--groups", "3"))
