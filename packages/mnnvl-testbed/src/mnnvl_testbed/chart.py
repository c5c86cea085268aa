"""The Helm chart `charts/mnnvl` as the testbed and the chart tests use it: rendered with helm built like the
control plane's tools. Its webhook files are written by `python -m mnnvl_runtime.webhook_manifests`."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from . import building, versions

#: The chart in this repository (the testbed is only ever installed editable, from a clone).
CHART_DIR = pathlib.Path(__file__).resolve().parents[4] / "charts" / "mnnvl"


#: On a hook object: the release events it runs at (`pre-delete`, ...); Helm creates it only then, never on install.
HOOK_ANNOTATION = "helm.sh/hook"
HOOK_WEIGHT_ANNOTATION = "helm.sh/hook-weight"


def hook_events(manifest: Mapping[str, Any]) -> list[str]:
    """The release events a rendered object is a hook of; empty for the release's own objects."""
    found = (manifest["metadata"].get("annotations") or {}).get(HOOK_ANNOTATION, "")
    return [event.strip() for event in str(found).split(",") if event.strip()]


def hooks(objects: Sequence[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    """The hooks of `event` among rendered objects, in the order Helm creates them: by weight, then name."""
    found = [o for o in objects if event in hook_events(o)]
    return sorted(
        found,
        key=lambda o: (
            int((o["metadata"].get("annotations") or {}).get(HOOK_WEIGHT_ANNOTATION, "0")),
            o["metadata"]["name"],
        ),
    )


class RenderError(RuntimeError):
    """`helm template` refused the values; the message is helm's."""


def helm() -> pathlib.Path:
    return building.ensure_binaries((versions.HELM,))[versions.HELM.name]


def render(
    *,
    values: Sequence[pathlib.Path] = (),
    overrides: Mapping[str, Any] | None = None,
    release: str = "mnnvl",
    namespace: str = "mnnvl-system",
    api_versions: Sequence[str] = (),
    chart_dir: pathlib.Path = CHART_DIR,
) -> list[dict[str, Any]]:
    """The objects `helm template` renders; `overrides` is one more values document, applied last."""
    command = [str(helm()), "template", release, str(chart_dir), "--namespace", namespace]
    for path in values:
        command += ["--values", str(path)]
    if overrides:
        command += ["--values", "-"]
    for api_version in api_versions:
        command += ["--api-versions", api_version]
    result = subprocess.run(
        command, input=yaml.safe_dump(dict(overrides or {})), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    return [document for document in yaml.safe_load_all(result.stdout) if document]
