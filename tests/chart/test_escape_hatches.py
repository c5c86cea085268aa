"""The escape hatches of every controller block (extraEnv, extraVolumes and extraVolumeMounts, image.digest, the pod's
and the container's securityContext, serviceAccount.annotations, strategy), the global commonLabels and the opt-in
NetworkPolicies: each renders where it should (ci/escape-hatches-values.yaml sets them all, each block's
differently), the defaults render none of them, and a value that would replace the chart's own environment, volumes,
mounts or labels is refused with a message naming it and the fix. The matrix tests (test_rendering.py) lint the values
file and check every object it renders against the Kubernetes schemas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mnnvl_api import keys
from mnnvl_testbed import chart, release, versions

from .conftest import VALUES_FILES, Render, by_kind, one

CONTROLLERS = ("lws", "ds", "guardian", "topology")
WEBHOOK_SERVERS = ("lws", "ds", "guardian")
CASE = "escape-hatches"
VALUES: dict[str, Any] = yaml.safe_load(VALUES_FILES[CASE].read_text())
APP_VERSION = yaml.safe_load((chart.CHART_DIR / "Chart.yaml").read_text())["appVersion"]
#: The chart's pod and container securityContext, rendered whenever the block sets none.
CHART_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "fsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CHART_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
#: What an OpenShift restricted-v2 install sets (docs/install.md): no user or group, which the platform assigns.
OPENSHIFT_POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
OPENSHIFT_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
#: Where a label selector may sit in what the chart renders.
SELECTOR_FIELDS = {"selector", "matchLabels", "podSelector", "namespaceSelector", "objectSelector", "labelSelector"}


def deployment(objects: list[dict[str, Any]], controller: str) -> dict[str, Any]:
    return one(objects, "Deployment", f"mnnvl-{controller}")


def container(objects: list[dict[str, Any]], controller: str) -> dict[str, Any]:
    (found,) = deployment(objects, controller)["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = found
    return result


def selectors(value: Any) -> Iterator[Any]:
    """Every label selector in `value`, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SELECTOR_FIELDS:
                yield item
            else:
                yield from selectors(item)
    elif isinstance(value, list):
        for item in value:
            yield from selectors(item)


def keys_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in keys_in(item)}
    if isinstance(value, list):
        return {key for item in value for key in keys_in(item)}
    return set()


def test_the_defaults_render_the_charts_own_settings_and_no_escape_hatch(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["defaults"]
    assert by_kind(objects, "NetworkPolicy") == {}
    for controller in WEBHOOK_SERVERS:
        spec = deployment(objects, controller)["spec"]
        assert "strategy" not in spec
        pod = spec["template"]
        assert pod["metadata"]["labels"] == spec["selector"]["matchLabels"]
        assert pod["spec"]["securityContext"] == CHART_POD_SECURITY
        found = container(objects, controller)
        assert found["image"] == f"ghcr.io/mnnvl/mnnvl:{APP_VERSION}"
        assert found["securityContext"] == CHART_CONTAINER_SECURITY
        assert [variable["name"] for variable in found["env"]] == [
            "MNNVL_CONFIG_FILE",
            "MNNVL_NAMESPACE",
            "MNNVL_POD_NAME",
            "MNNVL_LOG_LEVEL",
        ]
        assert [volume["name"] for volume in pod["spec"]["volumes"]] == ["configuration", "tmp", "webhook-certs"]
        assert [mount["mountPath"] for mount in found["volumeMounts"]] == [
            "/etc/mnnvl",
            "/tmp",
            "/var/run/mnnvl/webhook-certs",
        ]
        assert "annotations" not in one(objects, "ServiceAccount", f"mnnvl-{controller}")["metadata"]


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_each_blocks_escape_hatches_reach_its_own_deployment_after_the_charts_own(
    rendered: dict[str, list[dict[str, Any]]], controller: str
) -> None:
    # all-on renders every controller with the chart's own environment, volumes and mounts, to append to.
    objects, baseline = rendered[CASE], rendered["all-on"]
    block = VALUES[controller]
    spec = deployment(objects, controller)["spec"]
    found, chart_own = container(objects, controller), container(baseline, controller)
    assert found["image"] == f"ghcr.io/mnnvl/mnnvl@{block['image']['digest']}"
    assert found["env"] == chart_own["env"] + block["extraEnv"]
    assert found["volumeMounts"] == chart_own["volumeMounts"] + block["extraVolumeMounts"]
    chart_volumes = deployment(baseline, controller)["spec"]["template"]["spec"]["volumes"]
    assert spec["template"]["spec"]["volumes"] == chart_volumes + block["extraVolumes"]
    # A map set replaces the chart's whole: nothing of the chart's (user 65532) is merged in.
    assert spec["template"]["spec"]["securityContext"] == block["podSecurityContext"]
    assert found["securityContext"] == block["securityContext"]
    assert spec["strategy"] == block["strategy"]
    account = one(objects, "ServiceAccount", f"mnnvl-{controller}")
    assert account["metadata"]["annotations"] == block["serviceAccount"]["annotations"]


def test_common_labels_reach_every_object_and_pod_but_no_selector(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered[CASE]
    common = VALUES["commonLabels"]
    for item in objects:
        labels = item["metadata"]["labels"]
        assert labels | common == labels, f"{item['kind']} {item['metadata']['name']}"
    for controller in CONTROLLERS:
        labels = deployment(objects, controller)["spec"]["template"]["metadata"]["labels"]
        # The block's podLabels win over commonLabels for a key both set.
        assert labels | common | VALUES[controller]["podLabels"] == labels
        assert labels["team"] == f"gpu-{controller}"
    found = list(selectors(objects))
    assert len(found) >= len(CONTROLLERS) * 3  # each Deployment's, Services', disruption budget's and policy's
    assert not keys_in(found) & set(common)


def test_network_policies_admit_only_the_webhook_and_metrics_ports_from_the_peers_named(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered[CASE]
    policy = VALUES["networkPolicy"]
    assert set(by_kind(objects, "NetworkPolicy")) == {f"mnnvl-{controller}" for controller in CONTROLLERS}
    for controller in CONTROLLERS:
        spec = one(objects, "NetworkPolicy", f"mnnvl-{controller}")["spec"]
        assert spec["podSelector"] == deployment(objects, controller)["spec"]["selector"]
        assert spec["policyTypes"] == ["Ingress"]
        expected = [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": policy["metricsFrom"]}]
        if controller in WEBHOOK_SERVERS:
            expected.insert(0, {"ports": [{"port": "webhook", "protocol": "TCP"}], "from": policy["webhookFrom"]})
        assert spec["ingress"] == expected
        # The named ports are the container's webhook and metrics ports (not its health port: kubelet probes come
        # from the node, which NetworkPolicy always admits).
        ports = {port["name"]: port["containerPort"] for port in container(objects, controller)["ports"]}
        allowed = {port["port"] for rule in spec["ingress"] for port in rule["ports"]}
        assert {name: ports[name] for name in allowed} == (
            {"webhook": 9443, "metrics": 8080} if controller in WEBHOOK_SERVERS else {"metrics": 8080}
        )


def test_network_policies_admit_from_anywhere_without_peers_and_skip_disabled_controllers(render: Render) -> None:
    objects = render(overrides={"networkPolicy": {"enabled": True}, "ds": {"enabled": False}})
    policies = by_kind(objects, "NetworkPolicy")
    assert set(policies) == {"mnnvl-lws", "mnnvl-guardian"}
    for policy in policies.values():
        assert [rule["ports"][0]["port"] for rule in policy["spec"]["ingress"]] == ["webhook", "metrics"]
        assert all("from" not in rule for rule in policy["spec"]["ingress"])


def test_openshift_security_contexts_leave_the_user_to_the_platform_and_the_testbed_copes(render: Render) -> None:
    block = {"podSecurityContext": OPENSHIFT_POD_SECURITY, "securityContext": OPENSHIFT_CONTAINER_SECURITY}
    objects = render(overrides=dict.fromkeys(WEBHOOK_SERVERS, block))
    installed = release.Release(objects)
    for controller, name in release.BLOCKS.items():
        if name not in WEBHOOK_SERVERS:
            continue
        found = deployment(objects, name)
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & keys_in(found)
        kubernetes_validate.validate(found, versions.CHART_SCHEMAS_KUBERNETES, strict=True)
        # The testbed runs the image's USER and leaves the volumes readable, as a kubelet would.
        assert (installed.user(controller), installed.volume_group(controller)) == (None, None)
    defaults = release.Release(render())
    assert (defaults.user(keys.LWS_CONTROLLER), defaults.volume_group(keys.LWS_CONTROLLER)) == ("65532:65532", 65532)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"lws": {"extraEnv": [{"name": "HTTPS_PROXY", "value": "x"}, {"name": "MNNVL_LOG_LEVEL", "value": "x"}]}},
            "lws.extraEnv[1] sets MNNVL_LOG_LEVEL, which the chart sets itself (MNNVL_CONFIG_FILE, MNNVL_NAMESPACE, "
            "MNNVL_POD_NAME, MNNVL_LOG_LEVEL): remove it or use another name",
            id="env",
        ),
        pytest.param(
            {"ds": {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]}},
            "ds.extraVolumes[0] is named tmp, as a volume of the chart's is (configuration, tmp, webhook-certs): use "
            "another name",
            id="volume",
        ),
        pytest.param(
            {"guardian": {"extraVolumeMounts": [{"name": "x", "mountPath": "/var/run/mnnvl/webhook-certs/"}]}},
            "guardian.extraVolumeMounts[0] mounts at /var/run/mnnvl/webhook-certs/, where the chart mounts a volume "
            "of its own (/etc/mnnvl, /tmp, /var/run/mnnvl/webhook-certs): use another mountPath",
            id="mount",
        ),
        pytest.param(
            {
                "topology": {
                    "enabled": True,
                    "kaiScheduler": {"installed": True},
                    "extraVolumeMounts": [{"name": "x", "mountPath": "/tmp"}],
                }
            },
            "topology.extraVolumeMounts[0] mounts at /tmp, where the chart mounts a volume of its own (/etc/mnnvl, "
            "/tmp): use another mountPath",
            id="topology-mount",
        ),
        pytest.param(
            {"commonLabels": {"app.kubernetes.io/name": "x"}},
            "commonLabels.app.kubernetes.io/name is a label the chart sets itself (app.kubernetes.io/component, "
            "app.kubernetes.io/instance, app.kubernetes.io/managed-by, app.kubernetes.io/name, "
            "app.kubernetes.io/part-of, app.kubernetes.io/version, helm.sh/chart, and mnnvl.dev/*): remove it from "
            "commonLabels",
            id="chart-label",
        ),
        pytest.param(
            {"commonLabels": {"mnnvl.dev/endpoint": "x"}},
            "commonLabels.mnnvl.dev/endpoint is a label the chart sets itself",
            id="chart-label-domain",
        ),
        pytest.param(
            {
                "commonLabels": {"release": "x"},
                "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "p"}}},
            },
            "commonLabels.release is also in metrics.serviceMonitor.labels, and a label takes one value on an object: "
            "keep it in one of them",
            id="monitoring-label",
        ),
        pytest.param(
            {"guardian": {"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}},
            "guardian.strategy.type=Recreate replaces every pod at once and takes no rollingUpdate: remove "
            "guardian.strategy.rollingUpdate, or set guardian.strategy.type=RollingUpdate",
            id="recreate-with-rolling-update",
        ),
        pytest.param(
            {"lws": {"image": {"digest": "sha256:abc"}}},
            "at '/lws/image/digest': 'sha256:abc' does not match pattern",
            id="digest",
        ),
        pytest.param(
            {"ds": {"podSecurityContext": {"runAsUsr": 1000}}},
            "at '/ds/podSecurityContext': additional properties 'runAsUsr' not allowed",
            id="pod-security-context",
        ),
        pytest.param(
            {"guardian": {"securityContext": {"capabilities": {"drop": "ALL"}}}},
            "at '/guardian/securityContext/capabilities/drop': got string, want array",
            id="container-security-context",
        ),
        pytest.param(
            {"lws": {"extraVolumes": [{"name": "cache"}]}},
            "at '/lws/extraVolumes/0': minProperties: got 1, want 2",
            id="volume-without-source",
        ),
        pytest.param(
            {"lws": {"extraEnv": [{"name": "A", "value": 3}]}},
            "at '/lws/extraEnv/0/value': got number, want string",
            id="env-value-not-a-string",
        ),
        pytest.param(
            {"networkPolicy": {"metricsFrom": [{"ports": [8080]}]}},
            "at '/networkPolicy/metricsFrom/0': additional properties 'ports' not allowed",
            id="peer",
        ),
        pytest.param(
            {"topology": {"strategy": {"type": "Replace"}}},
            "at '/topology/strategy/type': value must be one of 'RollingUpdate', 'Recreate'",
            id="strategy-type",
        ),
    ],
)
def test_values_that_would_replace_the_charts_own_or_are_malformed_are_refused(
    render: Render, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(chart.RenderError) as refused:
        render(overrides=overrides)
    assert message in str(refused.value)
