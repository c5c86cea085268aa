from __future__ import annotations

from typing import Any

import pydantic
import pytest

from mnnvl_api import models
from mnnvl_api.models import configuration


@pytest.mark.parametrize(
    ("document", "location"),
    [
        pytest.param({"featureGate": {}}, ("featureGate",), id="top-level"),
        pytest.param({"webhook": {"prot": 1}}, ("webhook", "prot"), id="webhook"),
        pytest.param({"leaderElection": {"leaseDuration": 20}}, ("leaderElection", "leaseDuration"), id="election"),
        pytest.param({"computeDomain": {"protection": "Deny"}}, ("computeDomain", "protection"), id="compute-domain"),
        pytest.param({"watching": {"resyncSeconds": 1}}, ("watching", "resyncSeconds"), id="watching"),
        pytest.param({"reconciliation": {"workers": 4}}, ("reconciliation", "workers"), id="reconciliation"),
    ],
)
def test_unknown_keys_are_rejected_at_every_level(document: dict[str, Any], location: tuple[str, ...]) -> None:
    with pytest.raises(pydantic.ValidationError) as failure:
        models.Configuration.model_validate(document)
    assert [(problem["type"], problem["loc"]) for problem in failure.value.errors()] == [("extra_forbidden", location)]


def test_other_models_still_keep_unknown_fields() -> None:
    meta = models.ObjectMeta.model_validate({"name": "x", "managedFields": [{"manager": "kubectl"}]})
    assert meta.to_wire()["managedFields"] == [{"manager": "kubectl"}]


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        pytest.param(("featureGate",), "unknown field featureGate (did you mean featureGates?)", id="top-level"),
        pytest.param(
            ("webhook", "certdir"), "unknown field webhook.certdir (did you mean webhook.certDir?)", id="case"
        ),
        pytest.param(
            ("leaderElection", "resourceName"),
            "unknown field leaderElection.resourceName; known fields of leaderElection: leaderElect, "
            "leaseDurationSeconds, renewDeadlineSeconds, retryPeriodSeconds",
            id="no-close-match",
        ),
        pytest.param(
            ("internalCertManagement",),
            "unknown field internalCertManagement; known fields: apiVersion, kind, featureGates, computeDomain, "
            "webhook, leaderElection, watching, reconciliation, shutdown, topologies, installation, metricsBindAddress, "
            "healthBindAddress, metrics",
            id="another-components-key",
        ),
    ],
)
def test_an_unknown_key_is_named_with_its_path_and_likely_spelling(location: tuple[str, ...], problem: str) -> None:
    assert configuration.unknown_field_problem(location) == problem


def test_only_known_feature_gates_are_accepted() -> None:
    with pytest.raises(pydantic.ValidationError) as failure:
        models.Configuration.model_validate({"featureGates": {"AutoComputeDomain": True, "Turbo": True}})
    assert [str(problem["ctx"]["error"]) for problem in failure.value.errors()] == [
        "unknown feature gate Turbo; known gates: AutoComputeDomain"
    ]


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        pytest.param(":8080", ("", 8080), id="every-interface"),
        pytest.param("127.0.0.1:9090", ("127.0.0.1", 9090), id="host-and-port"),
        pytest.param("[::1]:1", ("[::1]", 1), id="ipv6-lowest-port"),
        pytest.param("0.0.0.0:65535", ("0.0.0.0", 65535), id="highest-port"),
        pytest.param("", None, id="turned-off"),
    ],
)
def test_bind_addresses_are_host_and_port(address: str, parsed: tuple[str, int] | None) -> None:
    assert configuration.parse_bind_address(address) == parsed


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("8080", id="no-colon"),
        pytest.param("localhost:", id="no-port"),
        pytest.param(":0", id="port-zero"),
        pytest.param(":65536", id="port-too-high"),
        pytest.param(":http", id="named-port"),
        pytest.param(":-1", id="negative"),
    ],
)
def test_malformed_bind_addresses_are_rejected_with_the_rule(address: str) -> None:
    with pytest.raises(ValueError, match="must be host:port or :port with a port from 1 to 65535"):
        configuration.parse_bind_address(address)
    with pytest.raises(pydantic.ValidationError, match="metricsBindAddress"):
        models.Configuration.model_validate({"metricsBindAddress": address})


def test_secure_metrics_are_off_by_default_and_read_from_camel_case() -> None:
    assert models.Configuration().metrics == configuration.MetricsSettings(secure=False, cert_dir=None)
    loaded = models.Configuration.model_validate({"metrics": {"secure": True, "certDir": "/var/run/certs"}})
    assert loaded.metrics == configuration.MetricsSettings(secure=True, cert_dir="/var/run/certs")
    assert configuration.unknown_field_problem(("metrics", "secured")) == (
        "unknown field metrics.secured (did you mean metrics.secure?)"
    )


def test_the_deletion_fence_and_the_store_resync_period_are_bounded() -> None:
    for fence in (0, -1, 60.5):  # 60 s: Kubernetes' default request timeout, the bound when none is declared
        with pytest.raises(pydantic.ValidationError, match="deletionFenceSeconds"):
            models.Configuration.model_validate({"computeDomain": {"deletionFenceSeconds": fence}})
    assert models.Configuration.model_validate({"computeDomain": {"deletionFenceSeconds": 61}})
    with pytest.raises(pydantic.ValidationError, match="storeResyncSeconds"):
        models.Configuration.model_validate({"watching": {"storeResyncSeconds": 0}})


def test_reconciliation_concurrency_defaults_to_16_and_is_read_from_camel_case() -> None:
    assert models.Configuration().reconciliation.concurrency == 16
    loaded = models.Configuration.model_validate({"reconciliation": {"concurrency": 64}})
    assert loaded.reconciliation.concurrency == 64


@pytest.mark.parametrize(
    "concurrency", [pytest.param(0, id="zero"), pytest.param(-1, id="negative"), pytest.param(257, id="too-many")]
)
def test_reconciliation_concurrency_is_bounded(concurrency: int) -> None:
    with pytest.raises(pydantic.ValidationError, match=r"reconciliation\.concurrency"):
        models.Configuration.model_validate({"reconciliation": {"concurrency": concurrency}})


def test_the_shutdown_drains_5_s_then_allows_15_s_and_is_read_from_camel_case() -> None:
    assert models.Configuration().shutdown == configuration.ShutdownSettings(drain_seconds=5, stop_timeout_seconds=15)
    loaded = models.Configuration.model_validate({"shutdown": {"drainSeconds": 0, "stopTimeoutSeconds": 30}})
    assert loaded.shutdown == configuration.ShutdownSettings(drain_seconds=0, stop_timeout_seconds=30)


@pytest.mark.parametrize(
    ("shutdown", "field"),
    [
        pytest.param({"drainSeconds": -1}, "drainSeconds", id="negative-drain"),
        pytest.param({"stopTimeoutSeconds": 0}, "stopTimeoutSeconds", id="no-time-to-stop"),
    ],
)
def test_the_shutdown_timings_are_bounded(shutdown: dict[str, float], field: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=rf"shutdown\.{field}"):
        models.Configuration.model_validate({"shutdown": shutdown})
