"""A thin JSON client for the testbed, on the official client's configured connection (TLS, auth).

Objects stay plain dicts: the testbed and the tests read them as the API server sends them.
"""

from __future__ import annotations

import json
import pathlib
import urllib.parse
from typing import Any

from kubernetes import client, config
from kubernetes.client import exceptions

FIELD_MANAGER = "mnnvl-testbed"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

Object = dict[str, Any]


def api_client(kubeconfig: pathlib.Path) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, str] | None = None,
    body: object = None,
    content_type: str = JSON,
) -> Object:
    """One API call; the decoded JSON response, or ApiException for any status >= 400."""
    url_query = f"?{urllib.parse.urlencode(query)}" if query else ""
    _, url, headers, payload, _ = api.param_serialize(
        method=method,
        resource_path=path + url_query,
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=payload)
    data: bytes = response.read()  # type: ignore[no-untyped-call]
    if response.status >= 400:
        raise exceptions.ApiException(
            status=response.status, reason=response.reason, body=data.decode(errors="replace")
        )
    decoded: Object = json.loads(data) if data else {}
    return decoded


def path_of(api_version: str, plural: str, *, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection or an object: `/api/v1/...` for core, `/apis/<group>/<version>/...` else."""
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    scoped = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
    return f"{scoped}/{name}" if name else scoped


def apply(api: client.ApiClient, manifest: Object, plural: str) -> Object:
    """Server-side apply one object under the testbed's field manager."""
    meta = manifest["metadata"]
    path = path_of(manifest["apiVersion"], plural, namespace=meta.get("namespace"), name=meta["name"])
    return request(
        api,
        "PATCH",
        path,
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
        body=manifest,
        content_type=APPLY_PATCH,
    )


def items(
    api: client.ApiClient, api_version: str, plural: str, *, namespace: str | None = None, **query: str
) -> list[Object]:
    listed: list[Object] = request(api, "GET", path_of(api_version, plural, namespace=namespace), query=query or None)[
        "items"
    ]
    return listed


def get(
    api: client.ApiClient, api_version: str, plural: str, name: str, *, namespace: str | None = None
) -> Object | None:
    try:
        return request(api, "GET", path_of(api_version, plural, namespace=namespace, name=name))
    except exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise


def is_condition_true(obj: Object, condition: str) -> bool:
    return any(
        c.get("type") == condition and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
