from __future__ import annotations

import pathlib

import pytest

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
