"""The values of NVIDIA's driver chart a testbed runs its controller with: built, checked and passed on as given."""

from __future__ import annotations

import pathlib
import shlex
from typing import Any

import pytest

from mnnvl_testbed import cli, cluster, dra_driver


def test_a_qps_becomes_the_controllers_env_with_twice_the_burst_as_strings() -> None:
    env = "controller.containers.computeDomain.env"
    assert dra_driver.client_rate_values(50) == (
        f"--set={env}[0].name=KUBE_API_QPS",
        # --set-string: with --set, helm would render the number 50, which the API server refuses as an env value.
        f"--set-string={env}[0].value=50",
        f"--set={env}[1].name=KUBE_API_BURST",
        f"--set-string={env}[1].value=100",
    )


@pytest.mark.parametrize(
    "word",
    ["logVerbosity=4", "--values=mine.yaml", "--set=logVerbosity", "--set-json=a={}", "--set", "-f=mine.yaml"],
)
def test_only_set_and_set_string_assignments_are_chart_values(word: str) -> None:
    with pytest.raises(ValueError, match="--set=KEY=VALUE or --set-string=KEY=VALUE"):
        dra_driver.chart_values(["--set=logVerbosity=4", word])


def test_the_variable_holds_shell_words(monkeypatch: pytest.MonkeyPatch) -> None:
    values = dra_driver.client_rate_values(20)
    monkeypatch.setenv(dra_driver.VALUES_VARIABLE, shlex.join(values))
    assert dra_driver.chart_values(dra_driver.values_from_environment()) == values
    monkeypatch.delenv(dra_driver.VALUES_VARIABLE)
    assert dra_driver.values_from_environment() == []


def test_up_refuses_what_is_no_chart_value_before_touching_the_state_dir(tmp_path: pathlib.Path) -> None:
    with pytest.raises(cluster.TestbedError, match="no chart value"):
        cluster.up(tmp_path / "state", driver_values=["logVerbosity=4"], echo=False)
    assert not (tmp_path / "state").exists()


def test_the_command_line_passes_driver_values_to_up_in_their_order(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: dict[str, Any] = {}

    def up(state_dir: pathlib.Path, **options: Any) -> None:
        asked.update(options)

    monkeypatch.setattr(cluster, "up", up)
    argv = ["--state-dir", str(tmp_path), "up", "--driver-set-string", "a.b=5", "--driver-set", "c[0].d=true"]
    assert cli.main(argv) == 0
    assert asked["driver_values"] == ["--set-string=a.b=5", "--set=c[0].d=true"]
    assert cli.main(["--state-dir", str(tmp_path), "up"]) == 0
    assert asked["driver_values"] is None  # up then reads the variable
