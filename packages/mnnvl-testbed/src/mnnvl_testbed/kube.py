"""A thin client for the testbed itself: server-side apply of manifests and simple reads."""

from __future__ import annotations

import pathlib
from typing import Any

from kubernetes import client, config, dynamic
from kubernetes.client import exceptions

FIELD_MANAGER = "mnnvl-testbed"


def api_client(kubeconfig: pathlib.Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def apply(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply one object under the testbed's field manager."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    applied = resource.server_side_apply(
        body=manifest,
        name=manifest["metadata"]["name"],
        namespace=manifest["metadata"].get("namespace"),
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    result: dict[str, Any] = applied.to_dict()
    return result


def get(api: client.ApiClient, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=api_version, kind=kind)
    try:
        found: dict[str, Any] = resource.get(name=name, namespace=namespace).to_dict()
    except exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


def is_not_found(error: Exception) -> bool:
    return isinstance(error, exceptions.ApiException) and error.status == 404
