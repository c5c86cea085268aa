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
import shlex
import subprocess
from collections.abc import Mapping, Sequence
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
#: Where a platform engineer's values of the chart come from when `cluster.up` is given none: shell words, each
#: `--set=KEY=VALUE` or `--set-string=KEY=VALUE`, passed to `helm template` after `CHART_VALUES`.
VALUES_VARIABLE = "MNNVL_TESTBED_DRIVER_CHART_VALUES"
#: The helm options a value may be given with: `--set-string` for what must stay a string, such as an environment
#: variable's value (`--set` makes `50` a number, which the API server refuses in a Deployment).
VALUE_OPTIONS = ("--set", "--set-string")
#: The controller's Kubernetes client limits when nothing sets them (its `--kube-api-qps` / `--kube-api-burst`
#: defaults, pkg/flags/kubeclient.go), and the environment variables those flags also read.
DEFAULT_CLIENT_LIMITS = {"KUBE_API_QPS": "5", "KUBE_API_BURST": "10"}
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


def chart_values(words: Sequence[str]) -> tuple[str, ...]:
    """`words` checked to be values of the driver's chart, each `--set=KEY=VALUE` or `--set-string=KEY=VALUE` (one
    word, so a recorded set compares and prints as it was given): the only options the testbed passes on to helm."""
    for word in words:
        option, _, assignment = word.partition("=")
        if option not in VALUE_OPTIONS or "=" not in assignment:
            raise ValueError(f"{word!r} is no chart value: write --set=KEY=VALUE or --set-string=KEY=VALUE")
    return tuple(words)


def values_from_environment() -> list[str]:
    """The words `VALUES_VARIABLE` holds (none when it is unset), for `chart_values` to check."""
    return shlex.split(os.environ.get(VALUES_VARIABLE, ""))


def client_rate_values(qps: int) -> tuple[str, ...]:
    """Chart values raising the controller's client limits to `qps` requests per second, burst twice that, as a
    platform engineer would raise them: through the controller container's environment, which its flags read."""
    env = "controller.containers.computeDomain.env"
    return (
        f"--set={env}[0].name=KUBE_API_QPS",
        f"--set-string={env}[0].value={qps}",
        f"--set={env}[1].name=KUBE_API_BURST",
        f"--set-string={env}[1].value={2 * qps}",
    )


@functools.cache
def rendered_chart(values: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    """The chart's objects the testbed uses, rendered by helm from the driver's tree with `CHART_VALUES` and then
    `values` (`chart_values`): once per process and values, since nothing else it depends on changes (read them,
    never change them)."""
    helm = building.ensure_binaries((versions.HELM,))["helm"]
    command = [str(helm), "template", RELEASE, str(source() / versions.DRA_DRIVER_CHART), f"--namespace={NAMESPACE}"]
    for value in CHART_VALUES:
        command += ["--set", value]
    command += chart_values(values)
    for file in CHART_FILES:
        command += ["--show-only", file]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise building.BuildError(f"`{' '.join(command)}` failed:\n{result.stderr}")
    return tuple(document for document in yaml.safe_load_all(result.stdout) if document)


def install(api: kube.Kube, computedomain_crd: str, values: tuple[str, ...] = ()) -> None:
    """What installing the driver's chart with `values` provides, but its Deployment: the ComputeDomain CRD at
    `computedomain_crd` (a release of `versions.COMPUTE_DOMAIN_CRDS`, upstream's file as is), the tree's
    ComputeDomainClique CRD, the driver's namespace, and `apply_chart`'s objects."""
    crds.install_computedomain_crd(api, computedomain_crd)
    clique_crd = source() / versions.DRA_DRIVER_CHART / CLIQUE_CRD
    crds.install(api, [document for document in yaml.safe_load_all(clique_crd.read_text()) if document])
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    apply_chart(api, values)


def apply_chart(api: kube.Kube, values: tuple[str, ...] = ()) -> None:
    """The controller's ServiceAccount and RBAC and the DeviceClasses, as the chart renders them with `values`."""
    for document in rendered_chart(values):
        if document["kind"] in _APPLIED:
            api.apply(document, _APPLIED[document["kind"]])


def service_account(values: tuple[str, ...] = ()) -> str:
    """The controller's ServiceAccount, as the chart names it."""
    return str(_deployment(rendered_chart(values))["spec"]["template"]["spec"]["serviceAccountName"])


def controller_environment(values: tuple[str, ...] = ()) -> dict[str, str]:
    """The controller container's environment as the chart renders it with `values`, as a kubelet sets it."""
    container = _controller_container(values)
    return manifests.container_environment(container, pod_name=f"{COMPONENT}-0", namespace=NAMESPACE)


def client_limits(environment: Mapping[str, str]) -> dict[str, str]:
    """The client limits a controller running with `environment` uses: `DEFAULT_CLIENT_LIMITS`' variables as its
    flags read them."""
    return {variable: environment.get(variable, default) for variable, default in DEFAULT_CLIENT_LIMITS.items()}


def controller_command(
    kubeconfig: pathlib.Path, state_dir: pathlib.Path, values: tuple[str, ...] = ()
) -> tuple[list[str], dict[str, str]]:
    """How the controller runs against the cluster `kubeconfig` reaches, as the chart's Deployment rendered with
    `values` runs it: (command, environment). Its root directory is `<state_dir>/dra-controller/root`."""
    binary = building.ensure_binaries((versions.COMPUTE_DOMAIN_CONTROLLER,))[versions.COMPUTE_DOMAIN_CONTROLLER.name]
    environment = controller_environment(values)
    program, *arguments = manifests.expanded_command(_controller_container(values)["command"], environment)
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


def commands(
    *,
    kubeconfig: pathlib.Path,
    controller_kubeconfig: pathlib.Path,
    state_dir: pathlib.Path,
    values: tuple[str, ...] = (),
) -> Commands:
    """(command, environment) of each of `PARTS`: the stand-ins use `kubeconfig`, the controller
    `controller_kubeconfig` (its ServiceAccount's, where the cluster can issue one) and the chart's `values`."""
    return {
        teardown_witness.COMPONENT: kopf_process.command(teardown_witness.__name__, kubeconfig),
        kubelet_plugin.COMPONENT: kopf_process.command(kubelet_plugin.__name__, kubeconfig),
        COMPONENT: controller_command(controller_kubeconfig, state_dir, values),
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


def _controller_container(values: tuple[str, ...]) -> dict[str, Any]:
    return dict(_deployment(rendered_chart(values))["spec"]["template"]["spec"]["containers"][0])
