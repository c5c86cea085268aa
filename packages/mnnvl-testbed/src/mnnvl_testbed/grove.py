"""The Grove operator on the testbed, started only for the tests that ask for it (`ensure_running`), beside KAI.

Grove v0.1.0-alpha.11 (NVCF's pin) runs as its chart deploys it, without the Deployment: its configuration is the
chart's ConfigMap, rendered by helm from its module with topology-aware scheduling on (what the seed's
`topologyAwareScheduling` toggle sets), leader election off and listeners moved to 127.0.0.1 ports of its own. Its
three admission webhooks (PodCliqueSet defaulting and validation, ClusterTopologyBinding validation) are registered
from the chart too, called by URL with a certificate the testbed's CA signs ("manual" certificates: the chart's
automatic ones need an in-cluster Secret mount). It uses the testbed's admin kubeconfig, like KAI. Stopping it
removes its webhook configurations, so later tests' bindings are not refused by a webhook no one serves.
"""

from __future__ import annotations

import base64
import copy
import pathlib
from typing import Any

import yaml

from mnnvl_api import keys
from mnnvl_runtime import certs, kube

from . import building, chart, cluster, crds, processes, testing, versions, waiting

COMPONENT = versions.GROVE_OPERATOR.name
#: The operator's CRDs (it installs none itself): (module, directory inside it).
CRD_DIRECTORIES = (
    (versions.GROVE_API_MODULE, "core/v1alpha1/crds"),
    (versions.GROVE_SCHEDULER_API_MODULE, "core/v1alpha1/crds"),
)
CHART = "charts"  # inside the operator's module
NAMESPACE = "grove-system"
RELEASE = "grove-operator"
#: The webhook configurations the chart registers (its authorizer webhook is off by default).
WEBHOOK_KINDS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def module_tree(module: str | None = None) -> pathlib.Path:
    """The operator's module, or one of the API modules beside it."""
    return building.module_tree(versions.GROVE_OPERATOR, module)


def rendered_chart(ca_bundle: bytes) -> list[dict[str, Any]]:
    """The chart's ConfigMap and webhook configurations, rendered with the values a topology-aware install on the
    testbed needs."""
    overrides = {
        "config": {
            "leaderElection": {"enabled": False},
            "topologyAwareScheduling": {"enabled": True},
            # As an install with KAI sets it: workloads that name no scheduler go to KAI.
            "scheduler": {
                "profiles": [{"name": "default-scheduler"}, {"name": "kai-scheduler"}],
                "defaultProfileName": "kai-scheduler",
            },
            "server": {"webhooks": {"certProvisionMode": "manual"}},
        },
        "webhooks": {"caBundle": base64.b64encode(ca_bundle).decode()},
    }
    rendered = chart.render(overrides=overrides, release=RELEASE, namespace=NAMESPACE, chart_dir=module_tree() / CHART)
    return [document for document in rendered if document["kind"] in {"ConfigMap", *WEBHOOK_KINDS}]


def configuration(rendered: list[dict[str, Any]], *, ports: dict[str, int], cert_dir: pathlib.Path) -> dict[str, Any]:
    """The chart's operator configuration with every listener on 127.0.0.1 and the webhook certificate's directory."""
    (config_map,) = (document for document in rendered if document["kind"] == "ConfigMap")
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    server = config["server"]
    for listener in ("webhooks", "healthProbes", "metrics"):
        server[listener] = {**server[listener], "bindAddress": "127.0.0.1", "port": ports[listener]}
    server["webhooks"]["serverCertDir"] = str(cert_dir)
    return config


def local_webhooks(rendered: list[dict[str, Any]], *, base_url: str) -> list[dict[str, Any]]:
    """The chart's webhook configurations, called by URL (the caBundle is the chart's, from the values)."""
    configurations = [copy.deepcopy(document) for document in rendered if document["kind"] in WEBHOOK_KINDS]
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            client = webhook["clientConfig"]
            client["url"] = base_url + client.pop("service")["path"]
    return configurations


def install(api: kube.Kube) -> None:
    """Grove's CRDs from its API modules, and the namespace its chart installs into."""
    crds.install(
        api,
        [
            yaml.safe_load(path.read_text())
            for module, directory in CRD_DIRECTORIES
            for path in sorted((module_tree(module) / directory).glob("*.yaml"))
        ],
    )
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, "namespaces")


def ensure_running(testbed: cluster.Testbed) -> None:
    """Grove installed and its operator running; KAI's Topology CRD must be installed (`testing.topology_crds`):
    the operator reconciles ClusterTopologyBindings into KAI Topologies at startup and exits without it."""
    if testbed.topology_crds is None:
        raise cluster.TestbedError("the Grove operator reconciles KAI Topologies: install KAI's Topology CRD first")
    supervisor = processes.Supervisor(testbed.state_dir)
    if supervisor.alive(COMPONENT):
        return
    binary = building.ensure_binaries((versions.GROVE_OPERATOR,))[COMPONENT]
    api = testbed.api()
    install(api)
    directory = testbed.state_dir / "grove"
    cert_dir = directory / "certs"
    ca = certs.ensure_ca(testbed.state_dir / "pki")
    certs.issue(
        ca,
        certs.KeyPair(cert_dir / "tls.crt", cert_dir / "tls.key"),
        common_name="grove-operator",
        hosts=("127.0.0.1", "localhost"),
    )
    ports = {listener: processes.free_port() for listener in ("webhooks", "healthProbes", "metrics")}
    rendered = rendered_chart(ca.cert.read_bytes())
    config_file = directory / "config.yaml"
    config_file.write_text(yaml.safe_dump(configuration(rendered, ports=ports, cert_dir=cert_dir)))
    environment = {"KUBECONFIG": str(testbed.kubeconfig), "GROVE_INIT_CONTAINER_IMAGE": "grove-initc"}
    supervisor.start(COMPONENT, [str(binary), f"--config={config_file}"], env=environment)
    cluster.wait_http(supervisor, COMPONENT, f"http://127.0.0.1:{ports['healthProbes']}/readyz", context=None)
    for webhook_configuration in local_webhooks(rendered, base_url=f"https://127.0.0.1:{ports['webhooks']}"):
        api.apply(webhook_configuration, WEBHOOK_KINDS[webhook_configuration["kind"]])


#: Grove's objects that carry its finalizers, which only a running operator releases.
FINALIZED = ("podcliquesets", "podcliques", "podcliquescalinggroups")


def stop(testbed: cluster.Testbed) -> None:
    """The operator stopped once it has released what is being deleted (a test's namespace going: the namespace
    controller may not have marked its objects yet), and its webhook configurations removed, whatever happens."""
    api = testbed.api()

    def held() -> list[str]:
        going = testing.namespaces_being_deleted(api)
        return [
            f"{plural} {found['metadata']['namespace']}/{found['metadata']['name']}"
            for plural in FINALIZED
            for found in api.list_objects(keys.GROVE_API_VERSION, plural)
            if found["metadata"].get("deletionTimestamp") or found["metadata"]["namespace"] in going
        ]

    try:
        waiting.wait_for(lambda: not held(), what="Grove to release the objects being deleted", state=held, timeout=120)
    finally:
        try:
            for document in rendered_chart(b""):
                if document["kind"] in WEBHOOK_KINDS:
                    plural, name = WEBHOOK_KINDS[document["kind"]], document["metadata"]["name"]
                    api.delete(kube.path_of("admissionregistration.k8s.io/v1", plural, name=name))
        finally:
            processes.Supervisor(testbed.state_dir).stop(COMPONENT)
