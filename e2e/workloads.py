"""Builders, actions and expectations for end-to-end tests of mnnvl on the testbed."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import injection
from mnnvl_runtime import kube
from mnnvl_testbed import testing

LWS_API = "leaderworkerset.x-k8s.io/v1"
CD_API = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"
VLLM = {"name": "vllm", "image": "nvcr.io/nvidia/vllm:latest", "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
ROUTING_PROXY = {"name": "routing-proxy", "image": "envoyproxy/envoy:v1.31-latest"}
TIMEOUT = 120.0


def lws_manifest(
    name: str,
    *,
    replicas: int = 2,
    size: int = 2,
    opt_in: str | None = "enabled",
    containers: list[dict[str, Any]] | None = None,
    worker_annotations: dict[str, str] | None = None,
    leader_containers: list[dict[str, Any]] | None = None,
    max_surge: int | None = None,
) -> dict[str, Any]:
    worker: dict[str, Any] = {"spec": {"containers": copy.deepcopy(containers or [VLLM, ROUTING_PROXY])}}
    if worker_annotations:
        worker["metadata"] = {"annotations": dict(worker_annotations)}
    template: dict[str, Any] = {"size": size, "workerTemplate": worker}
    if leader_containers is not None:
        template["leaderTemplate"] = {"spec": {"containers": copy.deepcopy(leader_containers)}}
    spec: dict[str, Any] = {"replicas": replicas, "leaderWorkerTemplate": template}
    if max_surge is not None:
        spec["rolloutStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": max_surge, "maxUnavailable": 1},
        }
    annotations = {keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION: opt_in} if opt_in is not None else {}
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def lws_path(ns: str, name: str) -> str:
    return kube.path_of(LWS_API, "leaderworkersets", namespace=ns, name=name)


def create_lws(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> kube.Object:
    return api.request("POST", kube.path_of(LWS_API, "leaderworkersets", namespace=ns), body=manifest)


def patch_lws(api: kube.Kube, ns: str, name: str, merge_patch: dict[str, Any]) -> kube.Object:
    return api.request("PATCH", lws_path(ns, name), body=merge_patch, content_type=kube.MERGE_PATCH)


def rejection(call: Callable[[], object]) -> str:
    """The message of the admission error that `call` must meet."""
    with pytest.raises(kube.ApiError) as rejected:
        call()
    assert rejected.value.status in (400, 403, 422), f"expected a rejection, got {rejected.value.body}"
    message: str = json.loads(rejected.value.body or "{}").get("message", "")
    return message


def lws_pods(api: kube.Kube, ns: str, name: str) -> list[kube.Object]:
    return testing.pods(api, ns, f"{keys.LWS_NAME_LABEL}={name}")


def domains(api: kube.Kube, ns: str) -> dict[str, kube.Object]:
    return {d["metadata"]["name"]: d for d in api.list_objects(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns)}


def domain_of(pod: kube.Object) -> str | None:
    found: str | None = (pod["metadata"].get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
    return found


def claimed_containers(pod: kube.Object) -> list[str]:
    return [
        c["name"]
        for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        if any(r["name"] == keys.CHANNEL_CLAIM_NAME for r in (c.get("resources") or {}).get("claims", []))
    ]


def is_gated(pod: kube.Object) -> bool:
    return injection.is_gated(pod["spec"])


def summary(api: kube.Kube, ns: str) -> dict[str, Any]:
    """Pods and domains of a namespace, compactly, for failure messages."""
    return {
        "pods": [
            (
                p["metadata"]["name"],
                p["status"].get("phase"),
                p["spec"].get("nodeName"),
                domain_of(p),
                is_gated(p),
                bool(p["metadata"].get("deletionTimestamp")),
            )
            for p in testing.pods(api, ns)
        ],
        "domains": {
            name: {"labels": d["metadata"].get("labels"), "deleting": bool(d["metadata"].get("deletionTimestamp"))}
            for name, d in domains(api, ns).items()
        },
    }


def wait_groups_running(api: kube.Kube, ns: str, name: str, *, replicas: int, size: int) -> list[kube.Object]:
    """Every pod of the LWS Running on a node, ungated, and one domain per group recorded on its pods."""

    def settled() -> list[kube.Object] | None:
        pods = [p for p in lws_pods(api, ns, name) if not p["metadata"].get("deletionTimestamp")]
        running = testing.running(pods)
        if len(running) != replicas * size or len(pods) != replicas * size or any(is_gated(p) for p in pods):
            return None
        return sorted(running, key=lambda p: p["metadata"]["name"])

    return testing.wait_for(
        settled,
        what=f"{replicas} groups of {size} Running",
        state=testing.state_of(lambda: summary(api, ns)),
        timeout=TIMEOUT,
    )


def group_domains(pods: list[kube.Object]) -> dict[str, str | None]:
    """group index → the domain its pods record (asserting every pod of a group records the same one)."""
    found: dict[str, str | None] = {}
    for pod in pods:
        group = pod["metadata"]["labels"][keys.LWS_GROUP_INDEX_LABEL]
        domain = domain_of(pod)
        assert found.setdefault(group, domain) == domain, f"group {group} spans domains {found[group]} and {domain}"
    return found


def wait_domains(api: kube.Kube, ns: str, expected: set[str]) -> dict[str, kube.Object]:
    """Until exactly `expected` domains exist (not counting ones already gone)."""
    [found] = testing.wait_for(
        lambda: [current] if set(current := domains(api, ns)) == expected else None,
        what=f"exactly the domains {sorted(expected)}",
        state=testing.state_of(lambda: summary(api, ns)),
        timeout=TIMEOUT,
    )
    return found


def in_use_teardowns(api: kube.Kube, ns: str) -> list[dict[str, Any]]:
    return [t for t in testing.teardowns(api, ns) if t["referencing_pods"]]


def create_foreign_domain(api: kube.Kube, ns: str, name: str, labels: dict[str, str]) -> kube.Object:
    """A ComputeDomain someone else made: none of mnnvl's management labels."""
    return api.request(
        "POST",
        kube.path_of(CD_API, keys.COMPUTE_DOMAIN_PLURAL, namespace=ns),
        body={
            "apiVersion": CD_API,
            "kind": "ComputeDomain",
            "metadata": {"name": name, "labels": labels},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        },
    )


def generate_named(manifest: dict[str, Any], generate_name: str) -> dict[str, Any]:
    """`manifest` with `metadata.generateName` instead of a name: the API server picks the name."""
    generated = copy.deepcopy(manifest)
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = generate_name
    return generated


def create_lws_with_warnings(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> tuple[kube.Object, list[str]]:
    """Create an LWS, and return it with the warnings the API server sent back in `Warning` response headers
    (admission warnings among them), which `kube.Kube.request` does not expose."""
    _, url, headers, payload, _ = api.api.param_serialize(
        method="POST",
        resource_path=kube.path_of(LWS_API, "leaderworkersets", namespace=ns),
        header_params={"Accept": kube.JSON, "Content-Type": kube.JSON},
        body=manifest,
        auth_settings=["BearerToken"],
    )
    response = api.api.call_api("POST", url, header_params=headers, body=payload)
    data = response.read()
    if response.status >= 400:
        raise kube.ApiError(status=response.status, reason=response.reason, body=data.decode(errors="replace"))
    warnings = [_warning_text(value) for value in response.response.headers.getlist("Warning")]
    created: kube.Object = json.loads(data)
    return created, warnings


def _warning_text(header: str) -> str:
    """The text of one `Warning: 299 - "<text>"` header value, unquoted."""
    match = re.fullmatch(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"(?: .*)?', header)
    assert match is not None, f"not a Warning header value: {header!r}"
    return re.sub(r"\\(.)", r"\1", match.group(1))


def without_retries(api: kube.Kube) -> kube.Kube:
    """The same connection, trying each call once: a server error is the answer, not a reason to retry."""
    return kube.Kube(api.api, field_manager=api.field_manager, attempts=1)


def webhook_failure(call: Callable[[], object]) -> str:
    """The message of the error `call` must meet because a webhook could not be called (an internal error)."""
    with pytest.raises(kube.ApiError) as failed:
        call()
    assert failed.value.status == 500, f"expected a failed webhook call, got {failed.value.status}: {failed.value.body}"
    message: str = json.loads(failed.value.body or "{}").get("message", "")
    return message
