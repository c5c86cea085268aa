"""The Helm chart `charts/mnnvl` as the testbed and the chart tests use it: rendered with helm built like the
control plane's tools, and its webhook files written from each controller's `registration.py`.

The chart cannot import Python, so it carries each controller's webhook configurations as JSON under
`files/webhooks/`, with a `clientConfig` holding only the webhook's path; the chart adds names, the Service or
URL, the CA bundle, failurePolicy, timeoutSeconds and a namespaceSelector. `python -m mnnvl_testbed.chart`
rewrites those files; tests/chart fails while they differ from what `registration.py` builds.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from mnnvl_api.models import configuration
from mnnvl_ds import registration as ds_registration
from mnnvl_guardian import registration as guardian_registration
from mnnvl_lws import registration as lws_registration

from . import building, versions

#: The chart in this repository (the testbed is only ever installed editable, from a clone).
CHART_DIR = pathlib.Path(__file__).resolve().parents[4] / "charts" / "mnnvl"


class RenderError(RuntimeError):
    """`helm template` refused the values; the message is helm's."""


def path_only(path: str) -> dict[str, Any]:
    """The `clientConfig` the chart's webhook files carry: the path alone."""
    return {"path": path}


def registered_webhooks() -> dict[str, list[dict[str, Any]]]:
    """Every controller's webhook configurations as `registration.py` builds them, by chart block. The guardian's
    exist only in Deny mode, which the chart renders them for."""
    return {
        "lws": lws_registration.configurations(path_only),
        "ds": ds_registration.configurations(path_only),
        "guardian": guardian_registration.configurations(path_only, configuration.DeletionProtection.DENY),
    }


def webhook_files(chart_dir: pathlib.Path = CHART_DIR) -> dict[pathlib.Path, str]:
    """The chart's webhook files and their content."""
    return {
        chart_dir / "files" / "webhooks" / f"{block}.json": json.dumps(configurations, indent=2) + "\n"
        for block, configurations in registered_webhooks().items()
    }


def write_webhook_files(chart_dir: pathlib.Path = CHART_DIR) -> list[pathlib.Path]:
    written = []
    for path, text in webhook_files(chart_dir).items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


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


def main() -> int:
    for path in write_webhook_files():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
