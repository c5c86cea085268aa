"""Secure metrics (`metrics.secure`): off by default with nothing granted; on, every controller's Configuration
turns it on, its ClusterRole may create the token and access reviews, a metrics-reader ClusterRole is there to bind,
and the ServiceMonitor scrapes over HTTPS with a bearer token, trusting the webhook certificate's CA."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_testbed import chart

from .conftest import Render, by_kind, configuration_of, one

CONTROLLERS = ("lws", "ds", "guardian", "topology")
TOPOLOGY_ON = {"enabled": True, "kaiScheduler": {"installed": True}}
REVIEWS = {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")}
CERT_DIR = "/var/run/mnnvl/webhook-certs"


def reviews_granted(objects: list[dict[str, Any]], component: str) -> set[tuple[str, str]]:
    """The review kinds `component`'s ClusterRole may create."""
    rules = one(objects, "ClusterRole", component)["rules"]
    return {
        (group, resource)
        for rule in rules
        if "create" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if (group, resource) in REVIEWS
    }


def endpoint(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [scraped] = one(objects, "ServiceMonitor", "mnnvl-controllers")["spec"]["endpoints"]
    found: dict[str, Any] = scraped
    return found


def certificate_mount(objects: list[dict[str, Any]], component: str) -> tuple[list[str], list[str]]:
    """The Secret volumes of `component`'s pod and where its container mounts `webhook-certs`."""
    pod = one(objects, "Deployment", component)["spec"]["template"]["spec"]
    secrets = [volume["secret"]["secretName"] for volume in pod["volumes"] if "secret" in volume]
    [container] = pod["containers"]
    paths = [mount["mountPath"] for mount in container["volumeMounts"] if mount["name"] == "webhook-certs"]
    return secrets, paths


def test_off_by_default_nothing_is_granted_and_metrics_stay_plain(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["all-on"]
    for controller in CONTROLLERS:
        assert "metrics" not in configuration_of(objects, f"mnnvl-{controller}")
        assert reviews_granted(objects, f"mnnvl-{controller}") == set()
    assert "mnnvl-metrics-reader" not in by_kind(objects, "ClusterRole")
    scraped = endpoint(objects)
    assert "scheme" not in scraped
    assert "tlsConfig" not in scraped
    assert certificate_mount(objects, "mnnvl-topology") == ([], [])


def test_on_every_controller_serves_securely_and_may_review_tokens(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["secure-metrics"]
    for controller in CONTROLLERS:
        assert configuration_of(objects, f"mnnvl-{controller}")["metrics"]["secure"] is True
        assert reviews_granted(objects, f"mnnvl-{controller}") == REVIEWS
    reader = one(objects, "ClusterRole", "mnnvl-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "mnnvl-metrics-reader" not in by_kind(objects, "ClusterRoleBinding")  # the user binds it to Prometheus


def test_on_the_service_monitor_scrapes_https_with_a_token_trusting_the_webhook_ca(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["secure-metrics"]
    scraped = endpoint(objects)
    assert scraped["scheme"] == "https"
    assert scraped["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert scraped["tlsConfig"]["ca"] == {"secret": {"name": "mnnvl-webhook-tls", "key": "ca.crt"}}
    secret = one(objects, "Secret", "mnnvl-webhook-tls")
    names = secret["metadata"]["annotations"]["mnnvl.dev/dns-names"].split(",")
    assert scraped["tlsConfig"]["serverName"] in names
    assert "ca.crt" in secret["data"]


def test_topology_serves_the_webhook_certificate_when_the_release_has_one(
    rendered: dict[str, list[dict[str, Any]]], render: Render
) -> None:
    objects = rendered["secure-metrics"]
    assert configuration_of(objects, "mnnvl-topology")["metrics"]["certDir"] == CERT_DIR
    assert certificate_mount(objects, "mnnvl-topology") == (["mnnvl-webhook-tls"], [CERT_DIR])
    for controller in ("lws", "ds", "guardian"):  # their webhook certificate, where the webhook reads it
        assert "certDir" not in configuration_of(objects, f"mnnvl-{controller}")["metrics"]
    alone = render(
        overrides={
            "metrics": {"secure": True, "serviceMonitor": {"enabled": True}},
            "certs": {"mode": "none"},
            "lws": {"enabled": False},
            "ds": {"enabled": False},
            "guardian": {"enabled": False},
            "topology": TOPOLOGY_ON,
        }
    )
    assert configuration_of(alone, "mnnvl-topology")["metrics"] == {"secure": True}  # a self-signed certificate
    assert certificate_mount(alone, "mnnvl-topology") == ([], [])
    assert endpoint(alone)["tlsConfig"] == {"insecureSkipVerify": True}


def test_own_certificates_are_not_verified_by_name(render: Render) -> None:
    """certs.mode=secret: the chart has the CA only as a bundle, which a ServiceMonitor cannot take."""
    objects = render(
        overrides={
            "metrics": {"secure": True, "serviceMonitor": {"enabled": True}},
            "certs": {"mode": "secret", "secretName": "mine", "caBundle": "Zm9v"},
        }
    )
    assert endpoint(objects)["tlsConfig"] == {"insecureSkipVerify": True}


def test_one_controller_can_turn_it_on_alone_and_only_it_is_granted(render: Render) -> None:
    objects = render(overrides={"guardian": {"configuration": {"metrics": {"secure": True}}}})
    assert reviews_granted(objects, "mnnvl-guardian") == REVIEWS
    assert reviews_granted(objects, "mnnvl-lws") == set()
    assert "metrics" not in configuration_of(objects, "mnnvl-lws")
    assert "mnnvl-metrics-reader" in by_kind(objects, "ClusterRole")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"metrics": {"secured": True}}, "additional properties 'secured' not allowed", id="misspelt"),
        pytest.param(
            {"lws": {"configuration": {"metrics": {"certDir": "/elsewhere"}}}},
            "additional properties 'certDir' not allowed",
            id="cert-dir-is-the-charts",
        ),
        pytest.param({"metrics": {"secure": "yes"}}, "at '/metrics/secure'", id="not-a-boolean"),
    ],
)
def test_bad_values_are_refused_by_the_schema(render: Render, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(chart.RenderError) as refused:
        render(overrides=overrides)
    assert message in str(refused.value)
