"""The installed mnnvl release as the API server shows it: each controller's Configuration (the chart's ConfigMap),
its Lease and the webhook configurations; read with one labelled list per kind."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Final

import pydantic
import yaml

from mnnvl_api import keys
from mnnvl_api.models import configuration as configuration_file
from mnnvl_runtime import kube, webhooks

from . import reading
from .snapshot import Object

#: What marks every object of the chart (`app.kubernetes.io/part-of`).
PART_OF_SELECTOR: Final = "app.kubernetes.io/part-of=mnnvl"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
CONFIGURATION_SUFFIX: Final = "-configuration"
#: `<component name>-configuration`, as the chart names it, with kustomize's content hash after it when generated.
CONFIGURATION_NAME: Final = re.compile(rf"^(?P<component>.+){CONFIGURATION_SUFFIX}(-[a-z0-9]{{10}})?$")
CONFIGURATION_KEY: Final = "configuration.yaml"
WEBHOOK_API: Final = "admissionregistration.k8s.io/v1"
#: plural → kind of the two webhook configuration kinds.
WEBHOOK_KINDS: Final = {
    "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
    "validatingwebhookconfigurations": "ValidatingWebhookConfiguration",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstalledController:
    """One controller of the release, from its Configuration ConfigMap."""

    controller: str  # its identity: mnnvl-lws, mnnvl-ds, mnnvl-guardian, mnnvl-topology
    namespace: str
    #: The chart's name of its objects (Deployment, ServiceAccount), `<release>-<component>`.
    component_name: str
    #: The ConfigMap holding its Configuration.
    config_map: str
    #: None when the ConfigMap holds no valid Configuration (`problem` says why).
    configuration: configuration_file.Configuration | None
    problem: str = ""

    @property
    def gate_enabled(self) -> bool | None:
        return None if self.configuration is None else self.configuration.auto_compute_domain

    @property
    def service_account(self) -> str:
        return self.component_name


def controller_of(config_map: Mapping[str, object]) -> InstalledController | None:
    """The controller a release ConfigMap configures; None for another ConfigMap of the release."""
    meta = config_map["metadata"]
    assert isinstance(meta, Mapping)
    name = str(meta["name"])
    component = (meta.get("labels") or {}).get(COMPONENT_LABEL)
    data = config_map.get("data") or {}
    assert isinstance(data, Mapping)
    named = CONFIGURATION_NAME.match(name)
    if not component or named is None or CONFIGURATION_KEY not in data:
        return None
    configuration: configuration_file.Configuration | None = None
    problem = ""
    try:
        configuration = configuration_file.Configuration.model_validate(yaml.safe_load(str(data[CONFIGURATION_KEY])))
    except (yaml.YAMLError, pydantic.ValidationError) as error:
        problem = f"its Configuration is invalid: {str(error).splitlines()[0]}"
    return InstalledController(
        controller=f"mnnvl-{component}",
        namespace=str(meta.get("namespace") or ""),
        component_name=named.group("component"),
        config_map=name,
        configuration=configuration,
        problem=problem,
    )


def installed_controllers(client: kube.Kube) -> list[InstalledController]:
    """Every mnnvl controller installed in the cluster (any namespace), by its chart ConfigMap."""
    found = reading.list_all(client, "v1", "configmaps", label_selector=PART_OF_SELECTOR) or []
    return sorted((c for m in found if (c := controller_of(m))), key=lambda c: (c.namespace, c.controller))


def webhook_configurations(client: kube.Kube) -> list[Object]:
    """mnnvl's mutating and validating webhook configurations, with their `kind` set."""
    found: list[Object] = []
    for plural, kind in WEBHOOK_KINDS.items():
        for item in reading.list_all(client, WEBHOOK_API, plural, label_selector=PART_OF_SELECTOR) or []:
            found.append({**item, "kind": kind})
    return found


def webhook_names(configurations: Sequence[Object]) -> set[str]:
    return {str(w["name"]) for c in configurations for w in c.get("webhooks") or ()}


def scope_controller(scope: str) -> str:
    """The controller that manages pods of a scope (the value of the scope label)."""
    return keys.DS_CONTROLLER if scope == keys.SCOPE_SLICE else keys.LWS_CONTROLLER


def pod_webhook(controller: str) -> str:
    """The name of the pod webhook of a scope controller (as its registration names it)."""
    return webhooks.webhook_name(controller, webhooks.POD_WEBHOOK)
