"""The kind backend, as far as it can be tested without a container engine: what it checks first, the commands
it would run, and that choosing it where it cannot run makes tests error instead of passing or skipping."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

import pytest

from mnnvl_testbed import kind

TOOLS = {tool: f"/opt/bin/{tool}" for tool in kind.TOOLS}


def answering(returncode: int, stderr: str = "") -> kind.Run:
    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert list(command) == ["/opt/bin/docker", "info", "--format", "{{.ServerVersion}}"]
        return subprocess.CompletedProcess(list(command), returncode, stdout="", stderr=stderr)

    return run


def test_missing_tools_are_named() -> None:
    with pytest.raises(kind.KindBackendError) as raised:
        kind.require_container_engine(which=lambda tool: None if tool in ("kind", "helm") else f"/bin/{tool}")
    assert str(raised.value) == (
        "--backend kind needs kind, helm on PATH (and a running container engine); use --backend testbed where there is none"
    )


def test_a_docker_client_without_an_engine_is_refused() -> None:
    with pytest.raises(kind.KindBackendError) as raised:
        kind.require_container_engine(
            which=TOOLS.get,
            run=answering(
                1,
                "Client:\nCannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
            ),
        )
    assert str(raised.value) == (
        "--backend kind needs a running container engine; `docker info` failed: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    )


def test_an_answering_engine_gives_the_tool_paths() -> None:
    assert kind.require_container_engine(which=TOOLS.get, run=answering(0)) == TOOLS


def test_the_image_lws_and_kwok_go_in_before_the_chart() -> None:
    commands = kind.prerequisite_commands(
        TOOLS, root=pathlib.Path("/src"), kubeconfig=pathlib.Path("/k/config"), name="pytest-kind"
    )
    assert commands == [
        ["/opt/bin/docker", "build", "--tag", "mnnvl.local/mnnvl:e2e", "/src"],
        ["/opt/bin/kind", "load", "docker-image", "mnnvl.local/mnnvl:e2e", "--name", "pytest-kind"],
        [
            "/opt/bin/kubectl",
            "--kubeconfig=/k/config",
            "apply",
            "--server-side",
            "-f",
            "https://github.com/kubernetes-sigs/lws/releases/download/v0.10.0/manifests.yaml",
        ],
        [
            "/opt/bin/kubectl",
            "--kubeconfig=/k/config",
            "apply",
            "--server-side",
            "-f",
            "https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0/kwok.yaml",
        ],
        [
            "/opt/bin/kubectl",
            "--kubeconfig=/k/config",
            "apply",
            "--server-side",
            "-f",
            "https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0/stage-fast.yaml",
        ],
        [
            "/opt/bin/kubectl",
            "--kubeconfig=/k/config",
            "rollout",
            "status",
            "--namespace=lws-system",
            "deployment/lws-controller-manager",
            "--timeout=5m",
        ],
        [
            "/opt/bin/kubectl",
            "--kubeconfig=/k/config",
            "rollout",
            "status",
            "--namespace=kube-system",
            "deployment/kwok-controller",
            "--timeout=5m",
        ],
    ]


def test_the_chart_runs_every_controller_from_the_loaded_image_with_the_gate_on() -> None:
    assert kind.chart_command(TOOLS, root=pathlib.Path("/src"), kubeconfig=pathlib.Path("/k/config")) == [
        "/opt/bin/helm", "upgrade", "--install", "mnnvl", "/src/charts/mnnvl", "--kubeconfig=/k/config",
        "--namespace=mnnvl-system", "--create-namespace", "--wait", "--timeout=5m",
        "--set", "lws.enabled=true", "--set", "lws.image.repository=mnnvl.local/mnnvl", "--set", "lws.image.tag=e2e",
        "--set", "ds.enabled=true", "--set", "ds.image.repository=mnnvl.local/mnnvl", "--set", "ds.image.tag=e2e",
        "--set", "guardian.enabled=true", "--set", "guardian.image.repository=mnnvl.local/mnnvl", "--set", "guardian.image.tag=e2e",
        "--set", "featureGates.AutoComputeDomain=true", "--set", "certs.mode=selfSigned",
    ]  # fmt: skip


SUITE = """
import pytest

def test_on_the_cluster(api):
    pass

def test_on_the_testbed_itself(testbed):
    pass
"""


def run_suite(tmp_path: pathlib.Path, *options: str, path: str) -> subprocess.CompletedProcess[str]:
    """pytest on a two-test suite with the testbed plugin, in a directory of its own, with only `path` on PATH."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["mnnvl_testbed.fixtures"]\n')
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *options],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_choosing_kind_without_a_container_engine_errors_every_test(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "--backend", "kind", path=str(tmp_path))
    assert result.returncode == 1, result.stdout
    assert "2 errors" in result.stdout
    assert "passed" not in result.stdout
    assert "skipped" not in result.stdout
    assert "--backend kind needs docker, kind, kubectl, helm on PATH" in result.stdout
    assert kind.NEEDS_TESTBED in result.stdout


def test_a_kind_run_can_deselect_the_tests_that_need_the_testbed_openly(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "--backend", "kind", "-m", "not testbed", path=str(tmp_path))
    assert result.returncode == 1, result.stdout
    assert "1 deselected, 1 error" in result.stdout


def test_an_unknown_backend_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    result = run_suite(tmp_path, "--backend", "minikube", path=str(tmp_path))
    assert result.returncode == 4
    assert "argument --backend: invalid choice: 'minikube' (choose from 'testbed', 'kind')" in result.stderr
