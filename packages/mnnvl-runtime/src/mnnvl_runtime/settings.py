"""Process settings (environment) and the cluster-level `Configuration` file, validated at startup.

Environment (prefix `MNNVL_`): where the configuration file is, which namespace holds the Lease, this
replica's name, the kubeconfig for running outside a cluster, the log level, and addresses that override the
file's. The `Configuration` file holds what the chart renders: feature gates, deletion protection, webhook,
leader-election and watch settings, where metrics and the liveness probe are served. Every problem is one
line naming the variable or the key path, so a bad setting stops the process before it does anything.
"""

from __future__ import annotations

import dataclasses
import pathlib
import socket
import typing

import pydantic
import pydantic_settings
import yaml

from mnnvl_api import models
from mnnvl_api.models import configuration as configuration_file

from . import logs

if typing.TYPE_CHECKING:
    import pydantic_core  # pydantic's own core, for the type of its error details

ENV_PREFIX = "MNNVL_"


class SettingsError(RuntimeError):
    """The settings or the configuration file are invalid; the message names the field and the file."""


class ProcessSettings(pydantic_settings.BaseSettings):
    model_config = pydantic_settings.SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    config_file: pathlib.Path | None = None
    namespace: str = "mnnvl-system"
    pod_name: str = pydantic.Field(default_factory=socket.gethostname)
    kubeconfig: pathlib.Path | None = pydantic.Field(
        default=None, validation_alias=pydantic.AliasChoices("MNNVL_KUBECONFIG", "KUBECONFIG")
    )
    log_level: str = "INFO"
    #: Override the file's metricsBindAddress / healthBindAddress when set (the testbed gives each replica its
    #: own ports); the empty string turns the endpoint off.
    metrics_address: str | None = None
    health_address: str | None = None
    #: Set by the testbed and development setups; production mounts certificates instead.
    generate_webhook_certificate: bool = False
    webhook_hosts: str = "127.0.0.1,localhost"

    @pydantic.field_validator("log_level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        if level.upper() not in logs.LEVELS:
            raise ValueError(f"must be one of {', '.join(logs.LEVELS)} (any case); got {level!r}")
        return level.upper()

    @pydantic.field_validator("metrics_address", "health_address")
    @classmethod
    def _bind_address_shape(cls, address: str | None) -> str | None:
        if address is not None:
            configuration_file.parse_bind_address(address)
        return address


@dataclasses.dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a process-level HTTP endpoint listens; an empty host means every interface."""

    host: str
    port: int

    @property
    def bind_host(self) -> str:
        return self.host or "0.0.0.0"

    @property
    def address(self) -> str:
        return f"{self.bind_host}:{self.port}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Endpoints:
    metrics: Endpoint | None
    health: Endpoint | None


def endpoints(process: ProcessSettings, configuration: models.Configuration) -> Endpoints:
    """The environment wins when set (even to "", which turns the endpoint off); else the file's address."""

    def endpoint(from_environment: str | None, from_file: str) -> Endpoint | None:
        address = from_file if from_environment is None else from_environment
        parsed = configuration_file.parse_bind_address(address)
        return None if parsed is None else Endpoint(host=parsed[0], port=parsed[1])

    return Endpoints(
        metrics=endpoint(process.metrics_address, configuration.metrics_bind_address),
        health=endpoint(process.health_address, configuration.health_bind_address),
    )


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
        problems = "; ".join(_file_problem(problem) for problem in error.errors())
        raise SettingsError(f"invalid configuration file {path}: {problems}") from error


def load() -> tuple[ProcessSettings, models.Configuration]:
    try:
        process = ProcessSettings()
    except pydantic.ValidationError as error:
        problems = "; ".join(_environment_problem(problem) for problem in error.errors())
        raise SettingsError(f"invalid environment: {problems}") from error
    return process, load_configuration(process.config_file)


def _file_problem(problem: pydantic_core.ErrorDetails) -> str:
    if problem["type"] == "extra_forbidden":
        return configuration_file.unknown_field_problem(problem["loc"])
    path = ".".join(str(part) for part in problem["loc"])
    return f"{path}: {_message(problem)}" if path else _message(problem)


def _environment_problem(problem: pydantic_core.ErrorDetails) -> str:
    variable = ENV_PREFIX + "_".join(str(part) for part in problem["loc"]).upper()
    return f"{variable}: {_message(problem)}"


def _message(problem: pydantic_core.ErrorDetails) -> str:
    """pydantic's message, without the "Value error, " it puts before our validators' own words."""
    error = (problem.get("ctx") or {}).get("error")
    return str(error) if problem["type"] == "value_error" and error is not None else problem["msg"]
