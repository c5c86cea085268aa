"""Prerequisites and Installation."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube
from mnnvl_testbed import cluster, controllers, processes, testing


@pytest.fixture
def controller_against(tmp_path: pathlib.Path) -> Iterator[Controller]:
    started: list[subprocess.Popen[str]] = []
    yield Controller(tmp_path, started)
    for process in started:
        process.kill()
        process.communicate()


class Controller:
    """mnnvl-lws as a child process against some cluster, with a health endpoint to poll."""

    def __init__(self, work: pathlib.Path, started: list[subprocess.Popen[str]]) -> None:
        self.work = work
        self.started = started
        self.health_port = processes.free_port()

    def start(
        self, target: cluster.Testbed, *, gate: bool, kubeconfig: pathlib.Path | None = None
    ) -> subprocess.Popen[str]:
        config = self.work / "config.yaml"
        webhook = {"host": "127.0.0.1", "port": processes.free_port(), "certDir": str(self.work / "certs")}
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.lws.x-k8s.io/v1",
                    "kind": "Configuration",
                    "featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: gate},
                    "webhook": webhook,
                }
            )
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "KUBECONFIG": str(kubeconfig or target.kubeconfig),
            "MNNVL_CONFIG_FILE": str(config),
            "MNNVL_GENERATE_WEBHOOK_CERTIFICATE": "true",
            "MNNVL_HEALTH_ADDRESS": f"127.0.0.1:{self.health_port}",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "mnnvl_lws"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.started.append(process)
        return process

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def test_the_controller_exits_at_startup_if_the_gate_is_enabled_and_the_api_is_not_served(
    cluster_without_the_driver: cluster.Testbed, controller_against: Controller
) -> None:
    """The controller manager exits at startup if the gate is enabled and this API is not served."""
    process = controller_against.start(cluster_without_the_driver, gate=True)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert (
        "mnnvl-lws: cannot start: the ComputeDomain API (computedomains.resource.nvidia.com/v1beta1) is not served: "
        "install the NVIDIA DRA driver (k8s-dra-driver-gpu) with ComputeDomain support, or set the AutoComputeDomain "
        "feature gate to false"
    ) in stderr


def test_the_controller_exits_at_startup_if_it_may_not_manage_compute_domains(
    testbed: cluster.Testbed, controller_against: Controller
) -> None:
    """Without the ComputeDomain RBAC the controller manager fails to start, saying what to grant."""
    process = controller_against.start(testbed, gate=True, kubeconfig=controllers.user_kubeconfig(testbed, "no-rbac"))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert (
        "mnnvl-lws: cannot start: this controller's service account may not get computedomains.resource.nvidia.com, "
        "list computedomains.resource.nvidia.com, watch computedomains.resource.nvidia.com, create "
        "computedomains.resource.nvidia.com, delete computedomains.resource.nvidia.com, patch "
        "computedomains.resource.nvidia.com: enable the chart's ComputeDomain RBAC (featureGates.AutoComputeDomain=true) "
        "or include the config/components/computedomain kustomize component"
    ) in stderr


def test_the_controller_exits_at_startup_if_it_may_not_read_what_it_binds_pods_through(
    testbed: cluster.Testbed, api: kube.Kube, controller_against: Controller
) -> None:
    """Without the reads beside the ComputeDomain RBAC (the LeaderWorkerSets read afresh before their domains are
    created, the StatefulSets workers are bound through, the ControllerRevisions that tell an opted-in template
    revision) the controller fails to start, naming each."""
    user = "computedomains-only"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": user},
        "rules": [
            {"apiGroups": [keys.COMPUTE_DOMAIN_GROUP], "resources": [keys.COMPUTE_DOMAIN_PLURAL], "verbs": ["*"]}
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    api.apply(role, "clusterroles")
    api.apply(binding, "clusterrolebindings")
    process = controller_against.start(testbed, gate=True, kubeconfig=controllers.user_kubeconfig(testbed, user))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert (
        "mnnvl-lws: cannot start: this controller's service account may not get "
        "leaderworkersets.leaderworkerset.x-k8s.io, get statefulsets.apps, list controllerrevisions.apps, watch "
        "controllerrevisions.apps: grant it in the controller's ClusterRole"
    ) in stderr


def test_with_the_gate_disabled_the_controller_runs_without_the_api(
    cluster_without_the_driver: cluster.Testbed, controller_against: Controller
) -> None:
    """A cluster without the NVIDIA driver can run mnnvl with the feature gate off."""
    process = controller_against.start(cluster_without_the_driver, gate=False)

    def up_and_healthy() -> bool:
        assert process.poll() is None, f"mnnvl-lws exited: {process.communicate()[1]}"
        return controller_against.healthy()

    testing.wait_for(up_and_healthy, what="mnnvl-lws healthy with the gate off", timeout=60)


def test_an_invalid_configuration_file_is_named_with_the_field(
    testbed: cluster.Testbed, controller_against: Controller
) -> None:
    """Bad configuration gets a precise error naming the field and changes nothing."""
    (controller_against.work / "config.yaml").write_text("featureGates: {AutoComputeDomain: maybe}\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": str(testbed.kubeconfig),
        "MNNVL_CONFIG_FILE": str(controller_against.work / "config.yaml"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "mnnvl_lws"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "featureGates.AutoComputeDomain: Input should be a valid boolean" in result.stderr
