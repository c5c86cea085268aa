"""The e2e suite's second backend: a kind cluster (created with pytest-kind-ng) with mnnvl installed as users
install it, from its image and its chart, beside upstream LWS, kwok's fake GB200 nodes and NVIDIA's
ComputeDomain controller (run locally against the cluster, as the testbed runs it).

It needs a container engine, which the project's machines do not have, so it is not exercised there
(docs/testing.md). Chosen without one, it fails; it never skips.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
from collections.abc import Callable, Sequence

from mnnvl_runtime import kube

from . import cluster, controllers, dra_driver, manifests, processes, testing, versions

TESTBED = "testbed"
KIND = "kind"
BACKENDS = (TESTBED, KIND)
TOOLS = ("docker", "kind", "kubectl", "helm")
IMAGE_REPOSITORY = "mnnvl.local/mnnvl"
IMAGE_TAG = "e2e"
RELEASE = "mnnvl"
#: The chart's per-controller blocks, all enabled as the testbed's session runs all three.
CHART_CONTROLLERS = ("lws", "ds", "guardian")
#: The Kubernetes release the testbed runs (a kindest/node image of it; override with --kind-image).
NODE_IMAGE = f"kindest/node:{versions.KUBERNETES_VERSION}"
LWS_MANIFESTS = f"https://github.com/kubernetes-sigs/lws/releases/download/{versions.LWS_VERSION}/manifests.yaml"
KWOK_MANIFESTS = tuple(
    f"https://github.com/kubernetes-sigs/kwok/releases/download/{versions.KWOK_VERSION}/{name}"
    for name in ("kwok.yaml", "stage-fast.yaml")
)
NEEDS_TESTBED = (
    "this test drives the testbed's own processes or files (it uses the `testbed` fixture), which a kind "
    "cluster does not have; run it with --backend testbed, or deselect it with -m 'not testbed'"
)

Which = Callable[[str], str | None]
Run = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


class KindBackendError(RuntimeError):
    """The kind backend cannot run here (the message names what is missing)."""


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False)


def require_container_engine(which: Which = shutil.which, run: Run = _run) -> dict[str, str]:
    """The path of each tool the backend runs, once a container engine answers; else KindBackendError."""
    found = {tool: which(tool) for tool in TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        raise KindBackendError(
            f"--backend kind needs {', '.join(missing)} on PATH (and a running container engine); "
            "use --backend testbed where there is none"
        )
    paths = {tool: path for tool, path in found.items() if path is not None}
    info = run([paths["docker"], "info", "--format", "{{.ServerVersion}}"])
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no output"])[-1]
        raise KindBackendError(f"--backend kind needs a running container engine; `docker info` failed: {reason}")
    return paths


def chart_values() -> list[str]:
    """`--set` arguments: every controller from the image just loaded, the gate on, a self-signed webhook CA."""
    values = [
        f"{name}.{key}={value}"
        for name in CHART_CONTROLLERS
        for key, value in (("enabled", "true"), ("image.repository", IMAGE_REPOSITORY), ("image.tag", IMAGE_TAG))
    ]
    values += ["featureGates.AutoComputeDomain=true", "certs.mode=selfSigned"]
    return [argument for value in values for argument in ("--set", value)]


def prerequisite_commands(
    tools: dict[str, str], *, root: pathlib.Path, kubeconfig: pathlib.Path, name: str
) -> list[list[str]]:
    """Build the image and load it into the cluster; install upstream LWS and kwok, and wait for them."""
    kubectl = [tools["kubectl"], f"--kubeconfig={kubeconfig}"]
    image = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
    return [
        [tools["docker"], "build", "--tag", image, str(root)],
        [tools["kind"], "load", "docker-image", image, "--name", name],
        *([*kubectl, "apply", "--server-side", "-f", manifest] for manifest in (LWS_MANIFESTS, *KWOK_MANIFESTS)),
        [*kubectl, "rollout", "status", "--namespace=lws-system", "deployment/lws-controller-manager", "--timeout=5m"],
        [*kubectl, "rollout", "status", "--namespace=kube-system", "deployment/kwok-controller", "--timeout=5m"],
    ]


def chart_command(tools: dict[str, str], *, root: pathlib.Path, kubeconfig: pathlib.Path) -> list[str]:
    """Install (or upgrade) the chart from this tree and wait until every controller is ready."""
    return [
        tools["helm"],
        "upgrade",
        "--install",
        RELEASE,
        str(root / "charts" / "mnnvl"),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={controllers.NAMESPACE}",
        "--create-namespace",
        "--wait",
        "--timeout=5m",
        *chart_values(),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Installation:
    """A kind cluster with mnnvl installed and the NVIDIA driver's parts running against it."""

    kubeconfig: pathlib.Path
    state_dir: pathlib.Path

    def api(self) -> kube.Kube:
        return kube.Kube(kube.load_api_client(self.kubeconfig), field_manager=cluster.FIELD_MANAGER)

    def stop(self) -> None:
        for name in reversed(dra_driver.PARTS):
            processes.Supervisor(self.state_dir).stop(name)


def install(
    tools: dict[str, str], *, root: pathlib.Path, kubeconfig: pathlib.Path, name: str, state_dir: pathlib.Path
) -> Installation:
    """Everything after `kind create cluster`, in the order the controllers' preflight needs: the driver's API
    before the chart (with the gate on a controller refuses to start without it), fake nodes after it (so no
    controller Pod lands on a node kwok only pretends to run)."""
    for command in prerequisite_commands(tools, root=root, kubeconfig=kubeconfig, name=name):
        _check(command)
    installation = Installation(kubeconfig=kubeconfig, state_dir=state_dir)
    api = installation.api()
    dra_driver.install(api, versions.COMPUTE_DOMAIN_CRD)
    _check(chart_command(tools, root=root, kubeconfig=kubeconfig))
    cluster.create_nodes(api, nodes=testing.TEST_NODES, nodes_per_clique=manifests.NODES_PER_CLIQUE)
    # The controller runs with the cluster's admin kubeconfig here: kind's own, whose tokens the testbed cannot issue.
    commands = dra_driver.commands(kubeconfig=kubeconfig, controller_kubeconfig=kubeconfig, state_dir=state_dir)
    for part in dra_driver.PARTS:
        dra_driver.start(processes.Supervisor(state_dir), commands, part)

    def channels_published() -> bool:
        return len(api.list_objects("resource.k8s.io/v1", "resourceslices")) >= testing.TEST_NODES

    testing.wait_for(
        channels_published, what="the kubelet plugin stand-in to publish a channel per fake node", timeout=120
    )
    return installation


def _check(command: list[str]) -> None:
    result = _run(command)
    if result.returncode != 0:
        raise KindBackendError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
