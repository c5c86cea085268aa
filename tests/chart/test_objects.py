"""What the rendered objects say: toggles, gates reaching each Configuration, webhook selectors, security
defaults, names carrying the release's full name, checksums, ComputeDomain RBAC iff either flag."""

from __future__ import annotations

import re
from typing import Any

import pytest

# The modules that define metrics register them on the shared registry when imported.
from mnnvl_guardian import telemetry  # noqa: F401
from mnnvl_runtime import domain_writer, executing, metrics, stores  # noqa: F401
from mnnvl_testbed import chart

from .conftest import Render, by_kind, configuration_of, one

CONTROLLERS = ("lws", "ds", "guardian", "topology")
ALL_ENABLED = {"topology": {"enabled": True, "kaiScheduler": {"installed": True}}}


def components(objects: list[dict[str, Any]]) -> set[str]:
    return {
        item["metadata"]["labels"]["app.kubernetes.io/component"] for item in by_kind(objects, "Deployment").values()
    }


def test_defaults_install_the_three_controllers_without_topology(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert components(rendered["defaults"]) == {"lws", "ds", "guardian"}


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_each_controller_installs_alone_with_only_its_own_objects(render: Render, controller: str) -> None:
    overrides: dict[str, Any] = {name: {"enabled": name == controller} for name in CONTROLLERS}
    overrides["topology"]["kaiScheduler"] = {"installed": True}
    if controller == "topology":
        overrides["certs"] = {"mode": "none"}
    objects = render(overrides=overrides)
    assert components(objects) == {controller}
    labelled = {
        item["metadata"]["labels"]["app.kubernetes.io/component"]
        for item in objects
        if "app.kubernetes.io/component" in item["metadata"].get("labels", {}) and not chart.hook_events(item)
    }
    assert labelled == {controller}
    if controller == "topology":
        assert not by_kind(objects, "Secret")
        assert not by_kind(objects, "MutatingWebhookConfiguration")
        assert not by_kind(objects, "ValidatingWebhookConfiguration")


@pytest.mark.parametrize(
    ("overrides", "lws", "ds"),
    [
        pytest.param({}, False, False, id="defaults"),
        pytest.param({"featureGates": {"AutoComputeDomain": True}}, True, True, id="global-gate"),
        pytest.param({"lws": {"featureGates": {"AutoComputeDomain": True}}}, True, False, id="lws-gate-only"),
        pytest.param(
            {"featureGates": {"AutoComputeDomain": True}, "ds": {"featureGates": {"AutoComputeDomain": False}}},
            True,
            False,
            id="ds-overrides-global",
        ),
    ],
)
def test_feature_gates_reach_each_configuration_merged_over_the_global_map(
    render: Render, overrides: dict[str, Any], lws: bool, ds: bool
) -> None:
    objects = render(overrides=overrides)
    assert configuration_of(objects, "mnnvl-lws")["featureGates"] == {"AutoComputeDomain": lws}
    assert configuration_of(objects, "mnnvl-ds")["featureGates"] == {"AutoComputeDomain": ds}


def compute_domain_rules(objects: list[dict[str, Any]], controller: str) -> list[dict[str, Any]]:
    role = one(objects, "ClusterRole", f"mnnvl-{controller}")
    return [rule for rule in role["rules"] if "resource.nvidia.com" in rule["apiGroups"]]


@pytest.mark.parametrize(
    ("overrides", "granted"),
    [
        pytest.param({}, False, id="neither"),
        pytest.param({"featureGates": {"AutoComputeDomain": True}}, True, id="gate"),
        pytest.param({"computeDomainManagement": {"enabled": True}}, True, id="management"),
        pytest.param(
            {"featureGates": {"AutoComputeDomain": True}, "computeDomainManagement": {"enabled": True}}, True, id="both"
        ),
    ],
)
def test_compute_domain_rbac_is_granted_exactly_when_the_gate_or_management_is_set(
    render: Render, overrides: dict[str, Any], granted: bool
) -> None:
    objects = render(overrides={**overrides, **ALL_ENABLED})
    expected = {
        "lws": ["get", "list", "watch", "create", "delete", "patch"],
        "ds": ["get", "list", "watch", "create", "delete", "patch"],
        "guardian": ["get", "list", "watch", "patch"],
    }
    for controller, verbs in expected.items():
        rules = compute_domain_rules(objects, controller)
        assert rules == (
            [{"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": verbs}] if granted else []
        ), controller
    # The census only reads domains (which claims are channels), whatever the gate says.
    assert compute_domain_rules(objects, "topology") == [
        {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": ["list", "watch"]}
    ]


def test_no_controller_may_read_secrets_or_delete_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["all-on"]
    for kind in ("ClusterRole", "Role"):
        for name, role in by_kind(objects, kind).items():
            for rule in role["rules"]:
                assert "secrets" not in rule["resources"], f"{kind} {name}"
                assert "*" not in rule["verbs"], f"{kind} {name}"
                assert "*" not in rule["resources"], f"{kind} {name}"
                if "pods" in rule["resources"]:
                    assert not {"delete", "deletecollection", "create", "update"} & set(rule["verbs"]), name


def test_leases_are_granted_in_the_release_namespace_only_for_the_controllers_own_lease(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["all-on"]
    for controller in CONTROLLERS:
        cluster_rules = one(objects, "ClusterRole", f"mnnvl-{controller}")["rules"]
        assert not any("leases" in rule["resources"] for rule in cluster_rules)
        role = one(objects, "Role", f"mnnvl-{controller}")
        assert role["metadata"]["namespace"] == "mnnvl-system"
        named = [rule for rule in role["rules"] if "leases" in rule["resources"] and "resourceNames" in rule]
        assert named == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [f"mnnvl-{controller}"],
                "verbs": ["get", "update", "patch"],
            }
        ]


@pytest.mark.parametrize("controller", ["lws", "ds", "guardian", "topology"])
def test_pods_run_non_root_read_only_without_privileges(
    rendered: dict[str, list[dict[str, Any]]], controller: str
) -> None:
    objects = rendered["all-on"]
    pod = one(objects, "Deployment", f"mnnvl-{controller}")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == f"mnnvl-{controller}"
    (container,) = pod["containers"]
    assert container["command"] == [f"mnnvl-{controller}"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["health"] == 8081
    assert ports["metrics"] == 8080
    assert ports.get("webhook") == (None if controller == "topology" else 9443)
    env = {variable["name"]: variable for variable in container["env"]}
    assert env["MNNVL_CONFIG_FILE"]["value"] == "/etc/mnnvl/configuration.yaml"
    assert env["MNNVL_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["MNNVL_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_image_tag_defaults_to_the_app_version_and_each_controller_can_pin_its_own(render: Render) -> None:
    objects = render(overrides={"ds": {"image": {"tag": "0.0.9"}}})
    images = {
        name: item["spec"]["template"]["spec"]["containers"][0]["image"]
        for name, item in by_kind(objects, "Deployment").items()
    }
    assert images == {
        "mnnvl-lws": "ghcr.io/mnnvl/mnnvl:0.1.0",
        "mnnvl-ds": "ghcr.io/mnnvl/mnnvl:0.0.9",
        "mnnvl-guardian": "ghcr.io/mnnvl/mnnvl:0.1.0",
    }


def checksums(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {
        name: item["spec"]["template"]["metadata"]["annotations"]["checksum/configuration"]
        for name, item in by_kind(objects, "Deployment").items()
    }


def test_a_configuration_change_rolls_only_its_own_controller(render: Render) -> None:
    before = checksums(render())
    after = checksums(render(overrides={"ds": {"featureGates": {"AutoComputeDomain": True}}}))
    assert {name for name in before if before[name] != after[name]} == {"mnnvl-ds"}


def test_a_global_gate_change_rolls_every_controller(render: Render) -> None:
    before = checksums(render())
    after = checksums(render(overrides={"featureGates": {"AutoComputeDomain": True}}))
    assert all(before[name] != after[name] for name in before)


CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "FlowSchema",
)


def test_two_releases_with_different_subsets_share_no_cluster_scoped_name(render: Render) -> None:
    first = render(release="replica", overrides={"ds": {"enabled": False}, "guardian": {"enabled": False}})
    second = render(release="slice", overrides={"lws": {"enabled": False}, "guardian": {"deletionProtection": "Deny"}})

    def names(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(item["kind"], item["metadata"]["name"]) for item in objects if item["kind"] in CLUSTER_SCOPED}

    assert names(first)
    assert names(second)
    assert not names(first) & names(second)
    assert all(name.startswith("replica-mnnvl-") for _, name in names(first))
    assert all(name.startswith("slice-mnnvl-") for _, name in names(second))


def test_webhooks_skip_kube_system_and_the_release_namespace(render: Render) -> None:
    objects = render(
        namespace="platform",
        overrides={"lws": {"webhook": {"excludedNamespaces": ["batch"]}}, "guardian": {"deletionProtection": "Deny"}},
    )
    configurations = [
        *by_kind(objects, "MutatingWebhookConfiguration").values(),
        *by_kind(objects, "ValidatingWebhookConfiguration").values(),
    ]
    assert len(configurations) == 5
    for item in configurations:
        expected = ["kube-system", "platform", *(["batch"] if item["metadata"]["name"].startswith("mnnvl-lws") else [])]
        for webhook in item["webhooks"]:
            assert webhook["namespaceSelector"] == {
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": expected}]
            }
            assert webhook["clientConfig"]["service"]["namespace"] == "platform"


def test_the_guardian_registers_its_webhook_only_in_deny_mode(render: Render) -> None:
    assert "mnnvl-guardian-validating" not in by_kind(render(), "ValidatingWebhookConfiguration")
    denying = render(overrides={"guardian": {"deletionProtection": "Deny"}})
    assert "mnnvl-guardian-validating" in by_kind(denying, "ValidatingWebhookConfiguration")
    assert configuration_of(denying, "mnnvl-guardian")["computeDomain"] == {"deletionProtection": "Deny"}


def test_webhook_settings_and_development_urls_reach_every_webhook(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["url"]
    ports = {"mnnvl-lws": 9443, "mnnvl-ds": 9444, "mnnvl-guardian": 9445}
    seen = 0
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for name, item in by_kind(objects, kind).items():
            port = ports[name.rsplit("-", 1)[0]]
            for webhook in item["webhooks"]:
                config = webhook["clientConfig"]
                assert "service" not in config
                assert config["url"].startswith(f"https://127.0.0.1:{port}/")
                assert config["caBundle"]
                seen += 1
    assert seen == 10


def test_the_certificate_modes_render_their_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    self_signed = by_kind(rendered["defaults"], "Secret")["mnnvl-webhook-tls"]
    assert set(self_signed["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    ca = self_signed["data"]["ca.crt"]
    for item in by_kind(rendered["defaults"], "MutatingWebhookConfiguration").values():
        assert {webhook["clientConfig"]["caBundle"] for webhook in item["webhooks"]} == {ca}

    manager = rendered["certmanager"]
    certificate = one(manager, "Certificate", "mnnvl-webhook")
    assert certificate["spec"]["issuerRef"] == {
        "name": "mnnvl-selfsigned",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert "mnnvl-guardian-webhook.mnnvl-system.svc" in certificate["spec"]["dnsNames"]
    assert not by_kind(manager, "Secret")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for item in by_kind(manager, kind).values():
            assert item["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "mnnvl-system/mnnvl-webhook"}
            assert all("caBundle" not in webhook["clientConfig"] for webhook in item["webhooks"])
    assert not by_kind(rendered["certmanager-issuer"], "Issuer")
    issued = one(rendered["certmanager-issuer"], "Certificate", "mnnvl-webhook")
    assert issued["spec"]["issuerRef"]["kind"] == "ClusterIssuer"

    secret = rendered["secret"]
    assert not by_kind(secret, "Secret")
    assert not by_kind(secret, "Certificate")
    volumes = one(secret, "Deployment", "mnnvl-lws")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-certs", "secret": {"secretName": "mnnvl-webhook-serving"}} in volumes


def test_the_flow_schema_puts_every_enabled_controllers_leases_in_the_leader_election_level(
    rendered: dict[str, list[dict[str, Any]]], render: Render
) -> None:
    schema = one(rendered["all-on"], "FlowSchema", "mnnvl-leader-election")
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": "leader-election"}
    (rule,) = schema["spec"]["rules"]
    assert {subject["serviceAccount"]["name"] for subject in rule["subjects"]} == {
        f"mnnvl-{controller}" for controller in CONTROLLERS
    }
    assert rule["resourceRules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update", "patch"],
            "namespaces": ["mnnvl-system"],
        }
    ]
    assert not by_kind(render(overrides={"flowSchema": {"enabled": False}}), "FlowSchema")


def test_monitoring_objects_are_optional_and_use_the_metrics_the_controllers_export(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert not by_kind(rendered["defaults"], kind)
    rule = one(rendered["all-on"], "PrometheusRule", "mnnvl-alerts")
    alerts = {item["alert"]: item["expr"] for group in rule["spec"]["groups"] for item in group["rules"]}
    assert set(alerts) == {
        "MnnvlPodsGatedTooLong",
        "MnnvlComputeDomainWriteErrors",
        "MnnvlReconcileErrors",
        "MnnvlInUseDeletionRefused",
        "MnnvlControllerNotLeading",
        "MnnvlWebhookErrors",
    }
    monitor = one(rendered["all-on"], "ServiceMonitor", "mnnvl-controllers")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    metrics_services = {
        name
        for name, item in by_kind(rendered["all-on"], "Service").items()
        if item["metadata"]["labels"].get("mnnvl.dev/endpoint") == "metrics"
    }
    assert metrics_services == {f"mnnvl-{controller}-metrics" for controller in CONTROLLERS}
    assert "mnnvl-dashboard" in by_kind(rendered["all-on"], "ConfigMap")


def test_alerts_and_the_dashboard_name_only_metrics_the_controllers_export(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    exported = set(metrics.REGISTRY._names_to_collectors)  # every sample name, suffixes included
    rule = one(rendered["all-on"], "PrometheusRule", "mnnvl-alerts")
    expressions = [item["expr"] for group in rule["spec"]["groups"] for item in group["rules"]]
    dashboard = by_kind(rendered["all-on"], "ConfigMap")["mnnvl-dashboard"]["data"]["mnnvl.json"]
    named = set(re.findall(r"\bmnnvl_[a-z_]+", " ".join(expressions) + dashboard))
    assert named, "no metric named"
    assert named <= exported, sorted(named - exported)


def test_a_disruption_budget_takes_min_available_when_set_else_max_unavailable(render: Render) -> None:
    objects = render(
        overrides={
            "ds": {"podDisruptionBudget": {"minAvailable": 1}},
            "guardian": {"podDisruptionBudget": {"enabled": False}},
        }
    )
    budgets = {name: item["spec"] for name, item in by_kind(objects, "PodDisruptionBudget").items()}
    assert {
        name: {key: value for key, value in spec.items() if key != "selector"} for name, spec in budgets.items()
    } == {
        "mnnvl-lws": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
        "mnnvl-ds": {"minAvailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def test_a_long_release_name_still_gives_service_names_that_are_dns_labels(render: Render) -> None:
    objects = render(release="a-release-name-long-enough-to-need-cutting-down-now-x", overrides=ALL_ENABLED)
    names = [item["metadata"]["name"] for item in by_kind(objects, "Service").values()]
    assert len(names) == 7
    assert all(len(name) <= 63 for name in names), names
