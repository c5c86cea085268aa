"""Every benchmark scenario runs to the end at a tiny size and reports numbers and a plot.

Benchmarks measure, they never assert a threshold; these tests only make sure a scenario still works. They
run on the session's testbed (the scenarios restart the controllers there, as `./dev bench` does on its own).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from mnnvl_testbed import cluster

BENCH = pathlib.Path(__file__).parents[2] / "benchmarks" / "bench.py"
#: A table row with a measured number in it: `| mnnvl-lws | 12 | 6.00 |` (headers and rules have none).
NUMBER_ROW = re.compile(r"^\|.*\| *-?[\d,]+\.\d+ *\|")


def run(testbed: cluster.Testbed, tmp_path: pathlib.Path, scenario: str, *arguments: str) -> str:
    plot = tmp_path / f"{scenario}.png"
    state = ["--state-dir", str(testbed.state_dir)]
    finished = subprocess.run(
        [sys.executable, str(BENCH), scenario, *arguments, *state, "--plot", str(plot)],
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


def test_ungate_reports_latencies_of_small_bursts(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert len(number_rows(run(testbed, tmp_path, "ungate", "--bursts", "1", "3"))) == 2


def test_restart_reports_latencies_of_each_step(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    output = run(testbed, tmp_path, "restart", "--groups", "2", "--restarts", "1", "--scale-up", "1")
    assert len(number_rows(output)) == 3


def test_slices_reports_latencies_of_a_small_burst(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert len(number_rows(run(testbed, tmp_path, "slices", "--bursts", "2", "--roles", "2"))) == 1


def test_writes_reports_writes_per_group(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert number_rows(run(testbed, tmp_path, "writes", "--groups", "2"))


def test_webhook_reports_added_latency(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert number_rows(run(testbed, tmp_path, "webhook", "--seconds", "2", "--rate", "10"))


def test_memory_reports_rss_ratios(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert number_rows(run(testbed, tmp_path, "memory", "--workloads", "1", "--groups", "3"))


def test_topology_memory_reports_rss_ratios(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert number_rows(run(testbed, tmp_path, "topology-memory", "--pods", "20", "--per-deployment", "10"))


def test_cli_reports_command_times_against_a_pod_list(testbed: cluster.Testbed, tmp_path: pathlib.Path) -> None:
    assert len(number_rows(run(testbed, tmp_path, "cli", "--workloads", "1", "--groups", "2", "--repeats", "1"))) == 5
