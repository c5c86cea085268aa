"""Process settings (environment) and the cluster-level `Configuration` file, validated at startup.

Environment (prefix `MNNVL_`): where the configuration file is, which namespace holds the Lease, this
replica's name, the kubeconfig for running outside a cluster, the log level. The `Configuration` file holds
what the chart renders: feature gates, deletion protection, webhook and leader-election settings.
"""

from __future__ import annotations

import pathlib
import socket

import pydantic
import pydantic_settings
import yaml

from mnnvl_api import models


class SettingsError(RuntimeError):
    """The settings or the configuration file are invalid; the message names the field and the file."""


class ProcessSettings(pydantic_settings.BaseSettings):
    model_config = pydantic_settings.SettingsConfigDict(env_prefix="MNNVL_", extra="ignore")

    config_file: pathlib.Path | None = None
    namespace: str = "mnnvl-system"
    pod_name: str = pydantic.Field(default_factory=socket.gethostname)
    kubeconfig: pathlib.Path | None = pydantic.Field(
        default=None, validation_alias=pydantic.AliasChoices("MNNVL_KUBECONFIG", "KUBECONFIG")
    )
    log_level: str = "INFO"
    metrics_address: str | None = None
    health_address: str | None = None
    #: Set by the testbed and development setups; production mounts certificates instead.
    generate_webhook_certificate: bool = False
    webhook_hosts: str = "127.0.0.1,localhost"


def load_configuration(path: pathlib.Path | None) -> models.Configuration:
    """The `Configuration` file, or the defaults (AutoComputeDomain off) when there is none."""
    if path is None:
        return models.Configuration()
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise SettingsError(f"cannot read the configuration file {path}: {error}") from error
    try:
        return models.Configuration.model_validate(document)
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()
        )
        raise SettingsError(f"invalid configuration file {path}: {problems}") from error


def load() -> tuple[ProcessSettings, models.Configuration]:
    try:
        process = ProcessSettings()
    except pydantic.ValidationError as error:
        raise SettingsError(f"invalid MNNVL_* environment: {error}") from error
    return process, load_configuration(process.config_file)
