"""What a controller's console script does with settings it cannot use: one line on stderr and an exit code."""

from __future__ import annotations

import os
import pathlib
import socket

import kopf
import pytest

from mnnvl_api import keys
from mnnvl_runtime import identity, logs, operator

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: test, user: {token: test}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pytest.MonkeyPatch:
    """Only the MNNVL_* variables a test sets, a kubeconfig that reaches nothing, and logs left to pytest."""
    for variable in [name for name in os.environ if name.startswith("MNNVL_")]:
        monkeypatch.delenv(variable)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv("MNNVL_KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(logs, "configure", lambda controller, level: None)
    return monkeypatch


def run() -> int:
    return operator.run(
        identity.Identity(keys.LWS_CONTROLLER),
        kopf.OperatorRegistry(),
        preflight=lambda client, configuration: [],
        watch_selectors={},
    )


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        pytest.param(
            "MNNVL_LOG_LEVEL",
            "verbose",
            "mnnvl-lws: invalid environment: MNNVL_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL "
            "(any case); got 'verbose'",
            id="log-level",
        ),
        pytest.param(
            "MNNVL_METRICS_ADDRESS",
            "8080",
            "mnnvl-lws: invalid environment: MNNVL_METRICS_ADDRESS: must be host:port or :port with a port from 1 "
            "to 65535, or empty to disable; got '8080'",
            id="metrics-address",
        ),
    ],
)
def test_a_bad_environment_exits_2_with_one_line(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, line: str
) -> None:
    environment.setenv(variable, value)
    assert run() == 2
    assert capsys.readouterr().err == line + "\n"


def test_a_bad_configuration_file_exits_2_with_one_line(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("featureGate: {AutoComputeDomain: true}\n")
    environment.setenv("MNNVL_CONFIG_FILE", str(path))
    assert run() == 2
    assert capsys.readouterr().err == (
        f"mnnvl-lws: invalid configuration file {path}: unknown field featureGate (did you mean featureGates?)\n"
    )


def test_a_metrics_port_in_use_exits_1_with_one_line(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        environment.setenv("MNNVL_METRICS_ADDRESS", f"127.0.0.1:{port}")
        assert run() == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mnnvl-lws: cannot serve metrics on 127.0.0.1:{port}: [Errno")
    assert err.count("\n") == 1
