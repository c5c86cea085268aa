"""NVIDIA's DRA driver on the testbed: its real ComputeDomain controller, installed from its own chart.

The controller (v25.12.0, built from the driver's module or source archive) runs as a process with the chart's
ServiceAccount, RBAC and DeviceClasses applied and the command and environment of the chart's Deployment, in its
default driverManaged IMEX mode with IMEXDaemonsWithDNSNames on. It reads its object templates from the fixed path
`/templates`, as in its image: the process runs in a private mount namespace whose root mirrors the host's and
adds `/templates` from the driver's tree, so nothing is written outside the state directory.

What the controller cannot do on kwok nodes is left to stand-ins: the kubelet plugin's channel ResourceSlices
(`kubelet_plugin`). Its per-domain DaemonSet gets no pods (no kubelet plugin labels a node), so a domain's
`numNodes: 0` makes it Ready as soon as its workload claim template exists.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
from typing import Any

import yaml

from mnnvl_runtime import kube

from . import building, crds, kopf_process, kubelet_plugin, manifests, processes, teardown_witness, versions

NAMESPACE = "nvidia-dra-driver-gpu"
RELEASE = "nvidia-dra-driver-gpu"
COMPONENT = "dra-controller"
#: The processes of the driver on the testbed, in start order: the witness first, so it sees every domain.
PARTS = (teardown_witness.COMPONENT, kubelet_plugin.COMPONENT, COMPONENT)
#: The chart's files the testbed installs: the controller's RBAC, the ComputeDomain DeviceClasses, its Deployment.
CHART_FILES = (
    "templates/rbac-controller.yaml",
    "templates/deviceclass-compute-domain-default-channel.yaml",
    "templates/deviceclass-compute-domain-daemon.yaml",
    "templates/controller.yaml",
)
#: Chart values: only ComputeDomains (no GPU kubelet plugin), the seed's feature gate stated, quieter logs.
CHART_VALUES = (
    "resources.gpus.enabled=false",
    "featureGates.IMEXDaemonsWithDNSNames=true",
    "logVerbosity=2",
)
CLIQUE_CRD = "crds/resource.nvidia.com_computedomaincliques.yaml"
#: Kinds applied from the chart (the Deployment is run as a process instead).
_APPLIED = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "DeviceClass": "deviceclasses",
}
#: Sets up the controller's root and runs it: $1 the (empty) root directory, $2 the templates, then the command.
_IN_OWN_ROOT = """set -eu
root=$1 templates=$2
shift 2
mount -t tmpfs -o mode=0755 mnnvl-testbed-root "$root"
for entry in /*; do
  name=${entry#/}
  [ "$name" = templates ] && continue
  if [ -L "$entry" ]; then
    ln -s "$(readlink "$entry")" "$root/$name"
  elif [ -d "$entry" ]; then
    mkdir "$root/$name"
    mount --rbind "$entry" "$root/$name"
  fi
done
mkdir "$root/templates"
mount --bind "$templates" "$root/templates"
exec chroot "$root" "$@"
"""


def source() -> pathlib.Path:
    """The driver's source tree: its module from the proxy, or its unpacked source archive."""
    return building.source_dir(versions.COMPUTE_DOMAIN_CONTROLLER)


@functools.cache
def rendered_chart() -> tuple[dict[str, Any], ...]:
    """The chart's objects the testbed uses, rendered by helm from the driver's tree: once per process, since
    nothing it depends on changes (read them, never change them)."""
    helm = building.ensure_binaries((versions.HELM,))["helm"]
    command = [str(helm), "template", RELEASE, str(source() / versions.DRA_DRIVER_CHART), f"--namespace={NAMESPACE}"]
    for value in CHART_VALUES:
        command += ["--set", value]
    for file in CHART_FILES:
        command += ["--show-only", file]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise building.BuildError(f"`{' '.join(command)}` failed:\n{result.stderr}")
    return tuple(document for document in yaml.safe_load_all(result.stdout) if document)


def install(api: kube.Kube, computedomain_crd: str) -> None:
    """What installing the driver's chart provides, but its Deployment: the ComputeDomain CRD at `computedomain_crd`
    (a release of `versions.COMPUTE_DOMAIN_CRDS`, upstream's file as is), the tree's ComputeDomainClique CRD,
    the driver's namespace, the controller's ServiceAccount and RBAC, and the DeviceClasses."""
    crds.install_computedomain_crd(api, computedomain_crd)
    clique_crd = source() / versions.DRA_DRIVER_CHART / CLIQUE_CRD
    crds.install(api, [document for document in yaml.safe_load_all(clique_crd.read_text()) if document])
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    for document in rendered_chart():
        if document["kind"] in _APPLIED:
            api.apply(document, _APPLIED[document["kind"]])


def service_account() -> str:
    """The controller's ServiceAccount, as the chart names it."""
    return str(_deployment(rendered_chart())["spec"]["template"]["spec"]["serviceAccountName"])


def controller_command(kubeconfig: pathlib.Path, state_dir: pathlib.Path) -> tuple[list[str], dict[str, str]]:
    """How the controller runs against the cluster `kubeconfig` reaches, as the chart's Deployment runs it:
    (command, environment). Its root directory is `<state_dir>/dra-controller/root`."""
    binary = building.ensure_binaries((versions.COMPUTE_DOMAIN_CONTROLLER,))[versions.COMPUTE_DOMAIN_CONTROLLER.name]
    container = _deployment(rendered_chart())["spec"]["template"]["spec"]["containers"][0]
    environment = manifests.container_environment(container, pod_name=f"{COMPONENT}-0", namespace=NAMESPACE)
    program, *arguments = manifests.expanded_command(container["command"], environment)
    if program != versions.COMPUTE_DOMAIN_CONTROLLER.name:
        raise building.BuildError(f"the driver's chart runs {program!r}, not {versions.COMPUTE_DOMAIN_CONTROLLER.name}")
    root = state_dir / COMPONENT / "root"
    root.mkdir(parents=True, exist_ok=True)
    isolation = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        isolation.append("--map-root-user")  # mounting needs root, inside a user namespace of its own if not here
    command = [
        *isolation,
        "sh",
        "-c",
        _IN_OWN_ROOT,
        "sh",
        str(root),
        str(source() / versions.DRA_DRIVER_TEMPLATES),
        str(binary),
        *arguments,
        f"--kubeconfig={kubeconfig}",
    ]
    return command, environment


Commands = dict[str, tuple[list[str], dict[str, str]]]


def commands(*, kubeconfig: pathlib.Path, controller_kubeconfig: pathlib.Path, state_dir: pathlib.Path) -> Commands:
    """(command, environment) of each of `PARTS`: the stand-ins use `kubeconfig`, the controller
    `controller_kubeconfig` (its ServiceAccount's, where the cluster can issue one)."""
    return {
        teardown_witness.COMPONENT: kopf_process.command(teardown_witness.__name__, kubeconfig),
        kubelet_plugin.COMPONENT: kopf_process.command(kubelet_plugin.__name__, kubeconfig),
        COMPONENT: controller_command(controller_kubeconfig, state_dir),
    }


def start(supervisor: processes.Supervisor, commands: Commands, name: str) -> None:
    """Start part `name` of the driver with its command of `commands`."""
    command, environment = commands[name]
    # The controller's command sets up its root, then execs the controller: the pid file names both.
    program = str(building.binary_path(versions.COMPUTE_DOMAIN_CONTROLLER)) if name == COMPONENT else None
    supervisor.start(name, command, env=environment, program=program)


def _deployment(documents: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    [deployment] = [document for document in documents if document["kind"] == "Deployment"]
    return deployment
