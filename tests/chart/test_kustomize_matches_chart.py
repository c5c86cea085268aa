"""`kubectl apply -k config/default` installs what `helm install` does for the matching values: the same kinds and
names, and the same content once what only one of them has is set aside (Helm's release labels and checksums,
kustomize's Namespace and ConfigMap hash suffixes)."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from mnnvl_testbed import chart

from .conftest import Render

CONFIG = chart.CHART_DIR.parents[1] / "config"
GENERATED_SUFFIX = re.compile(r"-configuration-[a-z0-9]{10}$")
#: Labels only Helm sets: every object's release labels, and the instance label in selectors.
HELM_ONLY_LABEL = "app.kubernetes.io/instance"


def kustomize(tools: dict[str, pathlib.Path], tmp_path: pathlib.Path, components: list[str]) -> list[dict[str, Any]]:
    """`kustomize build config/default` with `components` uncommented, as its kustomization.yaml says to."""
    tree = tmp_path / "config"
    shutil.copytree(CONFIG, tree)
    kustomization_path = tree / "default" / "kustomization.yaml"
    kustomization = yaml.safe_load(kustomization_path.read_text())
    kustomization["components"] = [*kustomization["components"], *(f"../components/{name}" for name in components)]
    kustomization_path.write_text(yaml.safe_dump(kustomization))
    result = subprocess.run(
        [str(tools["kustomize"]), "build", str(tree / "default")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def without_helm_only_labels(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_helm_only_labels(item) for key, item in value.items() if key != HELM_ONLY_LABEL}
    if isinstance(value, list):
        return [without_helm_only_labels(item) for item in value]
    return value


def comparable(item: dict[str, Any]) -> tuple[tuple[str, str], dict[str, Any]]:
    """(kind, name) and the object without metadata but its name, ConfigMap data parsed, generated names unhashed."""
    body = without_helm_only_labels({key: value for key, value in item.items() if key != "metadata"})
    name = GENERATED_SUFFIX.sub("-configuration", item["metadata"]["name"])
    if item["kind"] == "ConfigMap":
        body["data"] = {key: yaml.safe_load(text) for key, text in body["data"].items()}
    if item["kind"] == "Deployment":
        template = body["spec"]["template"]
        template["metadata"].pop("annotations", None)  # Helm's checksum; kustomize rolls by the ConfigMap's name
        for volume in template["spec"]["volumes"]:
            if "configMap" in volume:
                volume["configMap"]["name"] = GENERATED_SUFFIX.sub("-configuration", volume["configMap"]["name"])
    return (item["kind"], name), body


@pytest.mark.parametrize(
    ("components", "values"),
    [
        pytest.param([], {"certs": {"mode": "certManager"}}, id="default"),
        pytest.param(
            ["computedomain", "topology", "prometheus"],
            {
                "certs": {"mode": "certManager"},
                "featureGates": {"AutoComputeDomain": True},
                # The computedomain component turns the gate on for the ComputeDomain controllers only.
                "topology": {
                    "enabled": True,
                    "kaiScheduler": {"installed": True},
                    "featureGates": {"AutoComputeDomain": False},
                },
                "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
            },
            id="every-component",
        ),
    ],
)
def test_kustomize_and_the_chart_install_the_same_objects(
    tools: dict[str, pathlib.Path],
    render: Render,
    tmp_path: pathlib.Path,
    components: list[str],
    values: dict[str, Any],
) -> None:
    built = dict(map(comparable, kustomize(tools, tmp_path, components)))
    assert built.pop(("Namespace", "mnnvl-system"))  # the chart installs into a namespace Helm is given
    # The kustomize tree has no hooks (docs/install.md says the uninstall order to follow instead).
    rendered = dict(map(comparable, (item for item in render(overrides=values) if not chart.hook_events(item))))
    assert sorted(built) == sorted(rendered)
    # Every kind is compared, the admission policies and their bindings among them.
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= {kind for kind, _ in rendered}
    for key, body in rendered.items():
        assert built[key] == body, key
