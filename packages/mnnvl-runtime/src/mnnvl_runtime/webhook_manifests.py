"""Writes every installer's copy of the controllers' webhook configurations from the one source, what each
controller registers (a scope's `scopes.Registered.configurations`), found through the `mnnvl.webhooks` entry
points (so the runtime never imports a controller): the chart's `files/webhooks/<block>.json` (the clientConfig
holds only the path; the chart adds the rest) and, for a controller whose kustomization installs a
`webhooks.yaml`, that file in full.

`python -m mnnvl_runtime.webhook_manifests [--check] [ROOT]` (ROOT: a checkout, by default the current
directory); with `--check` nothing is written and the exit code is 1 when a file differs from what registration
builds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from . import webhooks

ENTRY_POINTS = "mnnvl.webhooks"
#: The namespaces no webhook of ours is asked about, in every installer.
EXCLUDED_NAMESPACES = ["kube-system", "mnnvl-system"]
#: Where kustomize's base puts every object (`config/default` then sets the namespace and the `mnnvl-` prefix).
KUSTOMIZE_NAMESPACE = "system"
NAME_PREFIX = "mnnvl-"


def registered() -> dict[str, Callable[[webhooks.ClientConfig], list[dict[str, Any]]]]:
    """Each controller's webhook configurations, by its chart block (`lws`, `ds`, `guardian`)."""
    found = importlib.metadata.entry_points(group=ENTRY_POINTS)
    return {point.name: point.load() for point in sorted(found, key=lambda point: point.name)}


def path_only(path: str) -> dict[str, Any]:
    """The `clientConfig` the chart's files carry: the path alone."""
    return {"path": path}


def chart_files(root: pathlib.Path) -> dict[pathlib.Path, str]:
    return {
        root / "charts" / "mnnvl" / "files" / "webhooks" / f"{block}.json": json.dumps(build(path_only), indent=2)
        + "\n"
        for block, build in registered().items()
    }


def kustomize_files(root: pathlib.Path) -> dict[pathlib.Path, str]:
    """`config/<block>/webhooks.yaml` for each block whose kustomization lists it."""
    files = {}
    for block, build in registered().items():
        kustomization = root / "config" / block / "kustomization.yaml"
        if not kustomization.is_file() or "webhooks.yaml" not in yaml.safe_load(kustomization.read_text())["resources"]:
            continue

        def service(path: str, block: str = block) -> dict[str, Any]:
            return {
                "service": {"name": f"{block}-webhook", "namespace": KUSTOMIZE_NAMESPACE, "path": path, "port": 443}
            }

        documents = [_for_kustomize(configuration) for configuration in build(service)]
        files[kustomization.parent / "webhooks.yaml"] = yaml.safe_dump_all(documents, sort_keys=True, width=120)
    return files


def _for_kustomize(configuration: dict[str, Any]) -> dict[str, Any]:
    excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED_NAMESPACES}
    return {
        **configuration,
        "metadata": {"name": configuration["metadata"]["name"].removeprefix(NAME_PREFIX)},
        "webhooks": [
            {**webhook, "namespaceSelector": {"matchExpressions": [excluded]}} for webhook in configuration["webhooks"]
        ],
    }


def files(root: pathlib.Path) -> dict[pathlib.Path, str]:
    return {**chart_files(root), **kustomize_files(root)}


def stale(root: pathlib.Path) -> dict[pathlib.Path, str]:
    """The files that differ from what registration builds, with what it builds."""
    return {path: text for path, text in files(root).items() if not path.is_file() or path.read_text() != text}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mnnvl_runtime.webhook_manifests", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    parser.add_argument("root", nargs="?", type=pathlib.Path, default=pathlib.Path.cwd())
    arguments = parser.parse_args(argv)
    found = stale(arguments.root)
    if arguments.check:
        for path in found:
            print(f"stale: {path} (rewrite it: python -m mnnvl_runtime.webhook_manifests)")
        return 1 if found else 0
    for path, text in found.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
