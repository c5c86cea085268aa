from __future__ import annotations

import os
import pathlib

import pytest
import yaml

from mnnvl_api.models import configuration
from mnnvl_runtime import settings


def test_without_a_file_the_gate_is_off(tmp_path: pathlib.Path) -> None:
    assert settings.load_configuration(None).auto_compute_domain is False


def test_the_file_turns_the_gate_on_and_picks_the_protection_mode(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: config.lws.x-k8s.io/v1\nkind: Configuration\nfeatureGates:\n  AutoComputeDomain: true\n"
        "computeDomain:\n  deletionProtection: Deny\n"
    )
    loaded = settings.load_configuration(path)
    assert loaded.auto_compute_domain is True
    assert loaded.compute_domain.deletion_protection is configuration.DeletionProtection.DENY


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "featureGates: {AutoComputeDomain: maybe}\n",
            "featureGates.AutoComputeDomain: Input should be a valid boolean",
            id="gate",
        ),
        pytest.param(
            "computeDomain: {deletionProtection: Never}\n",
            "computeDomain.deletionProtection: Input should be 'Finalizer' or 'Deny'",
            id="mode",
        ),
        pytest.param("webhook: {port: 0}\n", "webhook.port: Input should be greater than or equal to 1", id="port"),
        pytest.param("kind: [unclosed\n", "cannot read the configuration file", id="yaml"),
    ],
)
def test_a_bad_file_is_named_with_the_field(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(settings.SettingsError) as failure:
        settings.load_configuration(path)
    assert str(path) in str(failure.value)
    assert message in str(failure.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "featureGate: {AutoComputeDomain: true}\n",
            "unknown field featureGate (did you mean featureGates?)",
            id="top-level-typo",
        ),
        pytest.param(
            "webhook: {prot: 9443}\n", "unknown field webhook.prot (did you mean webhook.port?)", id="webhook"
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 20}\n",
            "unknown field leaderElection.leaseDuration (did you mean leaderElection.leaseDurationSeconds?)",
            id="leader-election",
        ),
        pytest.param(
            "computeDomain: {deletionProtect: Deny}\n",
            "unknown field computeDomain.deletionProtect (did you mean computeDomain.deletionProtection?)",
            id="compute-domain",
        ),
        pytest.param(
            "watching: {resync: 5}\n",
            "unknown field watching.resync; known fields of watching: storeResyncSeconds",
            id="no-close-match",
        ),
        pytest.param(
            "featureGates: {AutoComputeDomains: true}\n",
            "featureGates: unknown feature gate AutoComputeDomains (did you mean AutoComputeDomain?); "
            "known gates: AutoComputeDomain",
            id="unknown-gate",
        ),
        pytest.param(
            "metricsBindAddress: '8080'\n",
            "metricsBindAddress: must be host:port or :port with a port from 1 to 65535, or empty to disable; got '8080'",
            id="metrics-address",
        ),
        pytest.param(
            "healthBindAddress: ':70000'\n",
            "healthBindAddress: must be host:port or :port with a port from 1 to 65535, or empty to disable; got ':70000'",
            id="health-port",
        ),
        pytest.param(
            "leaderElection: {leaseDurationSeconds: 5}\n",
            "leaderElection: need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds",
            id="timing",
        ),
        pytest.param(
            "computeDomain: {deletionFenceSeconds: 30}\n",
            "computeDomain: deletionFenceSeconds 30 is shorter than a pod admission may take; set it to at least 61 "
            "(apiServerRequestTimeoutSeconds 60 + 1 s margin), or, if your kube-apiserver runs with a shorter "
            "--request-timeout, set apiServerRequestTimeoutSeconds to it",
            id="fence-below-the-default-request-timeout",
        ),
        pytest.param(
            "computeDomain: {apiServerRequestTimeoutSeconds: 5, deletionFenceSeconds: 5.5}\n",
            "computeDomain: deletionFenceSeconds 5.5 is shorter than a pod admission may take; set it to at least 6 "
            "(apiServerRequestTimeoutSeconds 5 + 1 s margin), or, if your kube-apiserver runs with a shorter "
            "--request-timeout, set apiServerRequestTimeoutSeconds to it",
            id="fence-below-a-declared-request-timeout",
        ),
        pytest.param(
            "computeDomain: {apiServerRequestTimeoutSeconds: 0}\n",
            "computeDomain.apiServerRequestTimeoutSeconds: Input should be greater than 0",
            id="no-request-timeout",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key_path_and_the_fix(
    tmp_path: pathlib.Path, text: str, problem: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(settings.SettingsError) as failure:
        settings.load_configuration(path)
    assert str(failure.value) == f"invalid configuration file {path}: {problem}"


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("featureGate: {}\nwebhook: {port: 0, prot: 1}\n")
    with pytest.raises(settings.SettingsError) as failure:
        settings.load_configuration(path)
    assert str(failure.value) == (
        f"invalid configuration file {path}: webhook.port: Input should be greater than or equal to 1; "
        "unknown field webhook.prot (did you mean webhook.port?); "
        "unknown field featureGate (did you mean featureGates?)"
    )


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without any MNNVL_* variable of the machine running the tests."""
    for variable in [name for name in os.environ if name.startswith("MNNVL_")]:
        monkeypatch.delenv(variable)
    return monkeypatch


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        pytest.param(
            "MNNVL_LOG_LEVEL",
            "verbose",
            "MNNVL_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case); got 'verbose'",
            id="log-level",
        ),
        pytest.param(
            "MNNVL_METRICS_ADDRESS",
            "localhost",
            "MNNVL_METRICS_ADDRESS: must be host:port or :port with a port from 1 to 65535, or empty to disable; "
            "got 'localhost'",
            id="metrics-address",
        ),
        pytest.param(
            "MNNVL_HEALTH_ADDRESS",
            "127.0.0.1:0",
            "MNNVL_HEALTH_ADDRESS: must be host:port or :port with a port from 1 to 65535, or empty to disable; "
            "got '127.0.0.1:0'",
            id="health-port",
        ),
    ],
)
def test_a_bad_environment_variable_is_one_line_naming_it_and_the_allowed_values(
    environment: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    environment.setenv(variable, value)
    with pytest.raises(settings.SettingsError) as failure:
        settings.load()
    assert str(failure.value) == f"invalid environment: {problem}"


def test_the_log_level_is_read_in_any_case(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("MNNVL_LOG_LEVEL", "debug")
    process, _ = settings.load()
    assert process.log_level == "DEBUG"


@pytest.mark.parametrize(
    ("environment_addresses", "file_addresses", "served"),
    [
        pytest.param({}, {}, ("0.0.0.0:8080", "0.0.0.0:8081"), id="defaults-on-every-interface"),
        pytest.param(
            {},
            {"metricsBindAddress": "127.0.0.1:9090", "healthBindAddress": ":9091"},
            ("127.0.0.1:9090", "0.0.0.0:9091"),
            id="from-the-file",
        ),
        pytest.param(
            {"MNNVL_METRICS_ADDRESS": "127.0.0.1:1234", "MNNVL_HEALTH_ADDRESS": "127.0.0.1:1235"},
            {"metricsBindAddress": ":9090", "healthBindAddress": ":9091"},
            ("127.0.0.1:1234", "127.0.0.1:1235"),
            id="the-environment-wins",
        ),
        pytest.param({}, {"metricsBindAddress": "", "healthBindAddress": ""}, (None, None), id="off-in-the-file"),
        pytest.param(
            {"MNNVL_METRICS_ADDRESS": "", "MNNVL_HEALTH_ADDRESS": ""}, {}, (None, None), id="off-by-the-environment"
        ),
    ],
)
def test_where_metrics_and_health_are_served(
    environment: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
    environment_addresses: dict[str, str],
    file_addresses: dict[str, str],
    served: tuple[str | None, str | None],
) -> None:
    """The (metrics, health) addresses: the environment wins when set, even to "", else the file decides."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(file_addresses))
    environment.setenv("MNNVL_CONFIG_FILE", str(path))
    for variable, value in environment_addresses.items():
        environment.setenv(variable, value)
    endpoints = settings.endpoints(*settings.load())
    assert (endpoints.metrics and endpoints.metrics.address, endpoints.health and endpoints.health.address) == served


def test_the_configuration_carries_the_deletion_fence_and_the_store_resync_period(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("computeDomain: {deletionFenceSeconds: 75}\nwatching: {storeResyncSeconds: 60}\n")
    loaded = settings.load_configuration(path)
    assert (loaded.compute_domain.deletion_fence_seconds, loaded.watching.store_resync_seconds) == (75.0, 60.0)
    defaults = settings.load_configuration(None)
    assert (defaults.compute_domain.deletion_fence_seconds, defaults.watching.store_resync_seconds) == (61.0, 120.0)


@pytest.mark.parametrize(
    ("text", "fence"),
    [
        pytest.param("computeDomain: {apiServerRequestTimeoutSeconds: 1}\n", 2.0, id="default-from-the-bound"),
        pytest.param("computeDomain: {apiServerRequestTimeoutSeconds: 1, deletionFenceSeconds: 2}\n", 2.0, id="at-it"),
        pytest.param("computeDomain: {apiServerRequestTimeoutSeconds: 120}\n", 121.0, id="a-longer-request-timeout"),
    ],
)
def test_the_fence_defaults_to_its_minimum_from_the_declared_request_timeout(
    tmp_path: pathlib.Path, text: str, fence: float
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert settings.load_configuration(path).compute_domain.deletion_fence_seconds == fence
