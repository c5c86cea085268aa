"""mnnvl installed on the testbed from its Helm chart, as a platform team installs it, except for one thing: the
controllers run as local processes instead of Deployments (there is no kubelet and no image here).

Every rendered object but the Deployments is applied to the API server: ServiceAccounts, RBAC, Configuration
ConfigMaps, webhook configurations (called by URL on 127.0.0.1, signed by the testbed's CA), Services, disruption
budgets, the FlowSchema. Each process then runs as its Deployment says (command, environment, Configuration),
authenticated as its ServiceAccount by a token from the TokenRequest API, so every permission the controllers use
is one the chart grants. The release's values are kept in the state directory, one block per controller that was
installed, so starting one controller again re-renders the release without dropping the others.
"""

from __future__ import annotations

import base64
import json
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import chart, cluster

RELEASE = "mnnvl"
NAMESPACE = "mnnvl-system"
#: The chart's block of each controller.
BLOCKS = {
    keys.LWS_CONTROLLER: "lws",
    keys.DS_CONTROLLER: "ds",
    keys.GUARDIAN_CONTROLLER: "guardian",
    keys.TOPOLOGY_CONTROLLER: "topology",
}
#: The serving certificate lives in each controller's state directory; the chart only names a Secret for it.
SERVING_SECRET = "testbed-webhook-serving"
#: How the kinds the chart renders are named in API paths.
PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ConfigMap": "configmaps",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "FlowSchema": "flowschemas",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}
WEBHOOK_API = "admissionregistration.k8s.io/v1"
WEBHOOK_PLURALS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
TOKEN_SECONDS = 24 * 3600


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

    def configuration(self, controller: str) -> dict[str, Any]:
        config_map = self._component("ConfigMap", BLOCKS[controller])
        [text] = config_map["data"].values()
        found: dict[str, Any] = yaml.safe_load(text)
        return found

    def webhook_configurations(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if PLURALS.get(o["kind"]) in WEBHOOK_PLURALS]


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


def install(testbed: cluster.Testbed, controller: str, block_values: Mapping[str, Any]) -> Release:
    """Set `controller`'s block to `block_values`, render the release and apply it (all but the Deployments);
    webhook configurations the release no longer renders are removed, as `helm upgrade` would."""
    blocks = installed_blocks(testbed)
    blocks[BLOCKS[controller]] = dict(block_values)
    release = Release(chart.render(overrides=values(testbed, blocks), release=RELEASE, namespace=NAMESPACE))
    client = testbed.api()
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")
    for manifest in release.objects:
        if manifest["kind"] != "Deployment":
            client.apply(manifest, PLURALS[manifest["kind"]])
    rendered = {o["metadata"]["name"] for o in release.webhook_configurations()}
    for plural in WEBHOOK_PLURALS:
        listed = client.request(
            "GET", kube.path_of(WEBHOOK_API, plural), query={"labelSelector": f"app.kubernetes.io/instance={RELEASE}"}
        )
        for item in listed.get("items", []):
            if item["metadata"]["name"] not in rendered:
                client.delete(kube.path_of(WEBHOOK_API, plural, name=item["metadata"]["name"]))
    path = _state_file(testbed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(blocks))
    return release


def service_account_kubeconfig(testbed: cluster.Testbed, release: Release, controller: str) -> pathlib.Path:
    """A kubeconfig for `controller`'s ServiceAccount, with a token the API server issues for it."""
    account = release.service_account(controller)
    answer = testbed.api().request(
        "POST",
        kube.path_of("v1", "serviceaccounts", namespace=NAMESPACE, name=account) + "/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    path = testbed.state_dir / "controllers" / controller / "serviceaccount.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    cluster.write_token_kubeconfig(
        path, testbed, f"system:serviceaccount:{NAMESPACE}:{account}", str(answer["status"]["token"])
    )
    return path


def process_environment(release: Release, controller: str, *, pod_name: str) -> dict[str, str]:
    """The Deployment's environment for one replica: literal values as rendered, the downward API's namespace and
    pod name filled in as the kubelet would."""
    downward = {"metadata.namespace": NAMESPACE, "metadata.name": pod_name}
    environment: dict[str, str] = {}
    for variable in release.container(controller).get("env", []):
        if "value" in variable:
            environment[variable["name"]] = str(variable["value"])
        else:
            environment[variable["name"]] = downward[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return environment
