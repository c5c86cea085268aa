"""mnnvl installed on the testbed from its Helm chart, as a platform team installs it, except for one thing: the
controllers run as local processes instead of Deployments (there is no kubelet and no image here).

Every rendered object but the Deployments is applied to the API server: ServiceAccounts, RBAC, Configuration
ConfigMaps, webhook configurations (called by URL on 127.0.0.1, signed by the testbed's CA), Services, disruption
budgets, the FlowSchema. Each process then runs as its Deployment says (command, environment, Configuration),
authenticated as its ServiceAccount by a token from the TokenRequest API, so every permission the controllers use
is one the chart grants. The release's values are kept in the state directory, one block per controller that was
installed, so starting one controller again re-renders the release without dropping the others, and uninstalling one
re-renders it without that block and deletes what is no longer rendered, as `helm upgrade` does, after the
chart's check of uninstalling it. Hooks are set aside as Helm does on install and upgrade; `uninstall_all` runs the
`pre-delete` ones as `helm uninstall` does.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import chart, cluster, manifests

RELEASE = "mnnvl"
NAMESPACE = "mnnvl-system"
#: The installation identity the chart gives the release (`<namespace>/<name>`), recorded by mnnvl-topology.
INSTALLATION = f"{NAMESPACE}/{RELEASE}"
#: The chart's block of each controller.
BLOCKS = {
    keys.LWS_CONTROLLER: "lws",
    keys.DS_CONTROLLER: "ds",
    keys.GUARDIAN_CONTROLLER: "guardian",
    keys.TOPOLOGY_CONTROLLER: "topology",
}
#: Held while the release is read, changed and applied: threads of one test may change it at once (an upgrade
#: rolls every controller at once), and a change made on a stale read would undo another.
_changing = threading.RLock()
#: The serving certificate lives in each controller's state directory; the chart only names a Secret for it.
SERVING_SECRET = "testbed-webhook-serving"


@dataclasses.dataclass(frozen=True)
class Resource:
    """Where the API serves one kind the chart renders."""

    api_version: str
    plural: str
    namespaced: bool


#: Every kind the chart renders but the Deployments (the testbed runs processes instead).
RESOURCES = {
    "ServiceAccount": Resource("v1", "serviceaccounts", namespaced=True),
    "ClusterRole": Resource("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False),
    "Role": Resource("rbac.authorization.k8s.io/v1", "roles", namespaced=True),
    "RoleBinding": Resource("rbac.authorization.k8s.io/v1", "rolebindings", namespaced=True),
    "ConfigMap": Resource("v1", "configmaps", namespaced=True),
    "Service": Resource("v1", "services", namespaced=True),
    "PodDisruptionBudget": Resource("policy/v1", "poddisruptionbudgets", namespaced=True),
    "FlowSchema": Resource("flowcontrol.apiserver.k8s.io/v1", "flowschemas", namespaced=False),
    "NetworkPolicy": Resource("networking.k8s.io/v1", "networkpolicies", namespaced=True),
    "MutatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False
    ),
    "ValidatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False
    ),
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicies", namespaced=False
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", namespaced=False
    ),
}
#: What marks every object of the release (the chart's standard labels).
RELEASE_SELECTOR = f"app.kubernetes.io/instance={RELEASE}"


class Release:
    """The rendered release: what each controller's Deployment, ServiceAccount and Configuration say."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def _component(self, kind: str, block: str) -> dict[str, Any]:
        [found] = [
            o
            for o in self.objects
            if o["kind"] == kind and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == block
        ]
        return found

    def container(self, controller: str) -> dict[str, Any]:
        deployment = self._component("Deployment", BLOCKS[controller])
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        found: dict[str, Any] = container
        return found

    def service_account(self, controller: str) -> str:
        deployment = self._component("Deployment", BLOCKS[controller])
        return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])

    def user(self, controller: str) -> str | None:
        """`uid:gid` (or `uid` without a group) the Deployment's container runs as, its own securityContext over the
        Pod's; None when neither sets a user, so the image's USER applies, as it does for a Pod (an OpenShift
        restricted-v2 install leaves the user to the platform)."""
        pod = self._component("Deployment", BLOCKS[controller])["spec"]["template"]["spec"]
        context = {**pod.get("securityContext", {}), **self.container(controller).get("securityContext", {})}
        if "runAsUser" not in context:
            return None
        group = f":{context['runAsGroup']}" if "runAsGroup" in context else ""
        return f"{context['runAsUser']}{group}"

    def volume_group(self, controller: str) -> int | None:
        """The group the kubelet gives the Pod's volumes to (its `fsGroup`); None without one, when the kubelet
        leaves Secret and ConfigMap files readable by every user (their default mode, 0644)."""
        pod = self._component("Deployment", BLOCKS[controller])["spec"]["template"]["spec"]
        group = pod.get("securityContext", {}).get("fsGroup")
        return None if group is None else int(group)

    def configuration(self, controller: str) -> dict[str, Any]:
        config_map = self._component("ConfigMap", BLOCKS[controller])
        [text] = config_map["data"].values()
        found: dict[str, Any] = yaml.safe_load(text)
        return found


def _state_file(testbed: cluster.Testbed) -> pathlib.Path:
    return testbed.state_dir / "controllers" / "release.json"


def installed_blocks(testbed: cluster.Testbed) -> dict[str, dict[str, Any]]:
    path = _state_file(testbed)
    found: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    return found


def values(testbed: cluster.Testbed, blocks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The testbed's values: webhooks by URL with its CA, the ComputeDomain RBAC kept while a test turns the gate
    off (so a controller with the gate off still watches domains), and the installed controllers' blocks."""
    rendered: dict[str, Any] = {
        "certs": {
            "mode": "secret",
            "secretName": SERVING_SECRET,
            "caBundle": base64.b64encode(testbed.ca_cert.read_bytes()).decode(),
        },
        "computeDomainManagement": {"enabled": True},
    }
    for block in BLOCKS.values():
        rendered[block] = {"enabled": block in blocks, **blocks.get(block, {})}
    return rendered


def rendered(testbed: cluster.Testbed) -> Release:
    """The release as installed now (rendered again, nothing applied)."""
    return _render(testbed, installed_blocks(testbed))


def install(testbed: cluster.Testbed, controller: str, block_values: Mapping[str, Any]) -> Release:
    """Set `controller`'s block to `block_values` and apply the release (all but the Deployments)."""
    with _changing:
        blocks = installed_blocks(testbed)
        blocks[BLOCKS[controller]] = dict(block_values)
        return _apply(testbed, blocks)


def uninstall(testbed: cluster.Testbed, controller: str, *, checked: bool = True) -> Release:
    """`helm upgrade` with `controller`'s block disabled: first the chart's pre-upgrade check of it
    (`check_uninstall`), which refuses with `UninstallRefusedError` and changes nothing; then its RBAC,
    Configuration, webhooks and the rest are deleted. `checked=False` is `uninstall.check: false`."""
    with _changing:
        if checked:
            check_uninstall(testbed, controller)
        blocks = installed_blocks(testbed)
        blocks.pop(BLOCKS[controller], None)
        return _apply(testbed, blocks)


def chart_dir(testbed: cluster.Testbed) -> pathlib.Path:
    """The chart the release is installed from: this tree's, unless `upgrade` installed another version's."""
    path = _chart_file(testbed)
    return pathlib.Path(path.read_text()) if path.exists() else chart.CHART_DIR


def upgrade(testbed: cluster.Testbed, to_chart: pathlib.Path) -> Release:
    """`helm upgrade` (or `helm rollback`) of the release to the chart at `to_chart`, its values unchanged: every
    object is applied as that chart renders it, and what it no longer renders is deleted. The controllers' processes
    are not touched: their Deployments roll separately (`controllers.roll`)."""
    with _changing:
        _chart_file(testbed).parent.mkdir(parents=True, exist_ok=True)
        _chart_file(testbed).write_text(str(to_chart))
        return _apply(testbed, installed_blocks(testbed))


def _chart_file(testbed: cluster.Testbed) -> pathlib.Path:
    return testbed.state_dir / "controllers" / "chart"


def _render(testbed: cluster.Testbed, blocks: Mapping[str, Mapping[str, Any]]) -> Release:
    return Release(
        chart.render(
            overrides=values(testbed, blocks), release=RELEASE, namespace=NAMESPACE, chart_dir=chart_dir(testbed)
        )
    )


def _apply(testbed: cluster.Testbed, blocks: dict[str, dict[str, Any]]) -> Release:
    """Render the release with `blocks`, apply it, and delete the release's objects it no longer renders, as
    `helm upgrade` would."""
    release = _render(testbed, blocks)
    client = testbed.api()
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    kept: set[tuple[str, str]] = set()
    for manifest in release.objects:
        if manifest["kind"] != "Deployment" and not chart.hook_events(manifest):
            client.apply(manifest, RESOURCES[manifest["kind"]].plural)
            kept.add((manifest["kind"], manifest["metadata"]["name"]))
    _delete_release_objects(client, kept=kept)
    _record_blocks(testbed, blocks)
    return release


def _delete_release_objects(client: kube.Kube, *, kept: set[tuple[str, str]]) -> None:
    """Delete every object of the release (by its instance label) but those `kept`, (kind, name)."""
    for kind, resource in RESOURCES.items():
        namespace = NAMESPACE if resource.namespaced else None
        listed = client.list_objects(
            resource.api_version, resource.plural, namespace=namespace, labelSelector=RELEASE_SELECTOR
        )
        for item in listed:
            name = item["metadata"]["name"]
            if (kind, name) not in kept:
                client.delete(kube.path_of(resource.api_version, resource.plural, namespace=namespace, name=name))


def _record_blocks(testbed: cluster.Testbed, blocks: Mapping[str, Mapping[str, Any]]) -> None:
    path = _state_file(testbed)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Replaced whole: a thread may read it without the lock (`rendered`) while another applies.
    partial = path.with_name(f"{path.name}.{threading.get_ident()}")
    partial.write_text(json.dumps(blocks))
    partial.replace(path)


class UninstallRefusedError(RuntimeError):
    """A hook Job of the uninstall check failed, so `helm uninstall` (`pre-delete`), or `helm upgrade` disabling a
    controller (`pre-upgrade`), changed nothing; the message carries the Job's output."""


def uninstall_all(testbed: cluster.Testbed) -> None:
    """`helm uninstall` of the release: its `pre-delete` hooks first, in Helm's order (the check's RBAC, then its
    Job, whose container runs as a local process under the hook's ServiceAccount); when the Job fails,
    `UninstallRefusedError` with its output, and nothing is deleted (the hook objects stay, as Helm keeps a failed
    hook's). Otherwise every object of the release, the hooks' too, is deleted. The controllers' processes are the
    caller's to stop (`controllers.stop`), as deleting their Deployments would."""
    with _changing:
        _run_hooks(testbed, rendered(testbed).objects, "pre-delete")
        _delete_release_objects(testbed.api(), kept=set())
        _record_blocks(testbed, {})


def check_uninstall(testbed: cluster.Testbed, controller: str) -> None:
    """The chart's pre-upgrade check of a `helm upgrade` that disables `controller`: `UninstallRefusedError` while
    something is left that only it looks after; nothing when it is not installed. The chart renders that hook only
    where `lookup` finds the controller's Deployment, which it never does under `helm template`; the testbed runs
    instead the pre-delete hooks of the release with `controller`'s block alone: the same list-only RBAC and a Job
    checking `--controller <it>` in its image (tests/chart/test_uninstall_hook.py holds the two hooks alike)."""
    with _changing:
        block = installed_blocks(testbed).get(BLOCKS[controller])
        if block is not None:
            _run_hooks(testbed, _render(testbed, {BLOCKS[controller]: block}).objects, "pre-delete")


def _run_hooks(testbed: cluster.Testbed, objects: list[dict[str, Any]], event: str) -> None:
    """The `event` hooks among rendered `objects`, in Helm's order: the others applied, each Job run
    (`_run_hook_job`)."""
    client = testbed.api()
    for hook in chart.hooks(objects, event):
        if hook["kind"] == "Job":
            _run_hook_job(testbed, hook)
        else:
            client.apply(hook, RESOURCES[hook["kind"]].plural)


def _run_hook_job(testbed: cluster.Testbed, job: Mapping[str, Any]) -> None:
    """The Job's one container, run to its end as the kubelet would run it: its command (a console script of this
    interpreter's environment) and environment, authenticated as the Job's ServiceAccount by a TokenRequest token."""
    name = job["metadata"]["name"]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    kubeconfig = cluster.service_account_kubeconfig(
        testbed, NAMESPACE, pod["serviceAccountName"], testbed.state_dir / "hooks" / f"{name}.kubeconfig"
    )
    environment = manifests.container_environment(container, pod_name=name, namespace=NAMESPACE)
    script = pathlib.Path(sys.executable).parent / container["command"][0]
    result = subprocess.run(
        [sys.executable, str(script), *container["command"][1:], *container.get("args", [])],
        env={**os.environ, **environment, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=job["spec"].get("activeDeadlineSeconds"),
        check=False,
    )
    if result.returncode != 0:
        raise UninstallRefusedError(
            f"pre-delete hook Job {name} failed (exit code {result.returncode}):\n{result.stdout}{result.stderr}"
        )


def service_account_kubeconfig(testbed: cluster.Testbed, release: Release, controller: str) -> pathlib.Path:
    """A kubeconfig for `controller`'s ServiceAccount, with a token the API server issues for it."""
    path = testbed.state_dir / "controllers" / controller / "serviceaccount.kubeconfig"
    return cluster.service_account_kubeconfig(testbed, NAMESPACE, release.service_account(controller), path)


def process_environment(release: Release, controller: str, *, pod_name: str) -> dict[str, str]:
    """The Deployment's environment for one replica: literal values as rendered, the downward API's namespace and
    pod name filled in as the kubelet would."""
    return manifests.container_environment(release.container(controller), pod_name=pod_name, namespace=NAMESPACE)
