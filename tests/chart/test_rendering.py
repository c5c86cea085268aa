"""The chart lints, renders every values file of its matrix into objects the schemas accept, and refuses
impossible combinations with a message naming the values and the fix."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest

from mnnvl_testbed import chart

from .conftest import MATRIX, Render, values_for


def test_the_chart_passes_helm_lint_strict_with_every_values_file(tools: dict[str, pathlib.Path]) -> None:
    for case in MATRIX:
        command = [str(tools["helm"]), "lint", "--strict", str(chart.CHART_DIR)]
        for path in values_for(case):
            command += ["--values", str(path)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{case}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("case", MATRIX)
def test_every_rendered_object_is_valid_against_its_schema(
    case: str, rendered: dict[str, list[dict[str, Any]]], schema_problems: dict[str, list[str]]
) -> None:
    assert rendered[case], f"{case} rendered nothing"
    assert schema_problems[case] == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"topology": {"enabled": True}},
            "topology.enabled=true needs KAI Scheduler (kai.scheduler/v1alpha1 Topology): install it and set "
            "topology.kaiScheduler.installed=true, or set topology.enabled=false",
            id="topology-without-kai",
        ),
        pytest.param(
            {"certs": {"mode": "none"}, "lws": {"enabled": False}, "ds": {"enabled": False}},
            "certs.mode=none, but guardian serve admission webhooks and need a serving certificate: set certs.mode "
            "to certManager, secret or selfSigned, or disable guardian",
            id="webhook-controller-without-certificates",
        ),
        pytest.param(
            {"certs": {"mode": "secret", "secretName": "mine"}},
            "certs.mode=secret needs certs.caBundle: the base64-encoded PEM CA that signed the certificate in "
            "certs.secretName",
            id="secret-without-ca-bundle",
        ),
        pytest.param(
            {"certs": {"mode": "secret", "caBundle": "Zm9v"}},
            "certs.mode=secret needs certs.secretName",
            id="secret-without-secret-name",
        ),
        pytest.param(
            {"lws": {"webhook": {"url": "https://127.0.0.1:9443"}}},
            "lws.webhook.url is set (development only), which needs certs.mode=secret and certs.caBundle",
            id="url-without-secret-mode",
        ),
        pytest.param(
            {"lws": {"webhook": {"url": "http://127.0.0.1:9443"}}},
            "at '/lws/webhook/url': 'http://127.0.0.1:9443' does not match pattern",
            id="url-without-tls",
        ),
        pytest.param(
            {"certs": {"mode": "certManager", "certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}},
            "at '/certs/certManager/issuerRef'",
            id="issuer-without-name",
        ),
        pytest.param(
            {"lws": {"replica": 3}},
            "additional properties 'replica' not allowed",
            id="unknown-key",
        ),
        pytest.param(
            {"featureGates": {"AutoComputeDomian": True}},
            "additional properties 'AutoComputeDomian' not allowed",
            id="unknown-feature-gate",
        ),
        pytest.param(
            {
                "topology": {
                    "enabled": True,
                    "kaiScheduler": {"installed": True},
                    "configuration": {
                        "topologies": [
                            {"name": "t", "levels": [{"nodeLabel": "h"}], "groveBinding": {"schedulerName": "KAI"}}
                        ]
                    },
                }
            },
            "at '/topology/configuration/topologies/0/groveBinding/schedulerName': 'KAI' does not match pattern",
            id="topology-scheduler-name-not-dns",
        ),
        pytest.param(
            {"lws": {"configuration": {"computeDomain": {"deletionFenceSeconds": 30}}}},
            "lws.configuration.computeDomain.deletionFenceSeconds=30 is shorter than a pod admission may take: set it "
            "to at least 61 (apiServerRequestTimeoutSeconds 60 + 1 s margin), or, if your kube-apiserver runs with a "
            "shorter --request-timeout, set lws.configuration.computeDomain.apiServerRequestTimeoutSeconds to it",
            id="fence-below-the-default-request-timeout",
        ),
        pytest.param(
            {
                "ds": {
                    "configuration": {
                        "computeDomain": {"apiServerRequestTimeoutSeconds": 5, "deletionFenceSeconds": 5.5}
                    }
                }
            },
            "ds.configuration.computeDomain.deletionFenceSeconds=5.5 is shorter than a pod admission may take: set it "
            "to at least 6 (apiServerRequestTimeoutSeconds 5 + 1 s margin)",
            id="fence-below-a-declared-request-timeout",
        ),
        pytest.param(
            {"guardian": {"configuration": {"computeDomain": {"deletionFenceSeconds": 0}}}},
            "at '/guardian/configuration/computeDomain/deletionFenceSeconds': minimum: got 0, want 1",
            id="no-fence",
        ),
        pytest.param(
            {"guardian": {"deletionProtection": "Block"}},
            "at '/guardian/deletionProtection': value must be one of 'Finalizer', 'Deny'",
            id="unknown-deletion-protection",
        ),
    ],
)
def test_impossible_values_fail_with_their_message(render: Render, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(chart.RenderError) as refused:
        render(overrides=overrides)
    assert message in str(refused.value)
