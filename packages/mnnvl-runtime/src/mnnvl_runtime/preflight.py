"""Startup checks that turn a silent misconfiguration into one clear message saying what to install or grant."""

from __future__ import annotations

import dataclasses

from mnnvl_api import keys

from . import kube

CD_API = keys.COMPUTE_DOMAIN_API_VERSION


@dataclasses.dataclass(frozen=True, kw_only=True)
class Access:
    group: str
    resource: str
    verbs: tuple[str, ...]
    namespace: str | None = None


def is_served(client: kube.Kube, api_version: str, plural: str) -> bool:
    """Whether discovery lists `plural` under `api_version`."""
    try:
        return _lists(client.request("GET", _discovery_path(api_version)), plural)
    except kube.ApiError as error:
        if error.status == 404:
            return False
        raise


async def is_served_now(client: kube.Kube, api_version: str, plural: str) -> bool:
    """`is_served` from a running event loop (a periodic pass asking whether an API has appeared since)."""
    try:
        return _lists(await client.arequest("GET", _discovery_path(api_version)), plural)
    except kube.ApiError as error:
        if error.status == 404:
            return False
        raise


def _discovery_path(api_version: str) -> str:
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def _lists(discovery: kube.Object, plural: str) -> bool:
    return any(resource.get("name") == plural for resource in discovery.get("resources") or ())


def missing_access(client: kube.Kube, wanted: list[Access]) -> list[str]:
    """`verb group/resource` for each permission this process lacks (SelfSubjectAccessReview)."""
    missing: list[str] = []
    for access in wanted:
        for verb in access.verbs:
            attributes = {"group": access.group, "resource": access.resource, "verb": verb}
            if access.namespace:
                attributes["namespace"] = access.namespace
            review = client.request(
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                body={
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attributes},
                },
            )
            if not (review.get("status") or {}).get("allowed"):
                missing.append(f"{verb} {access.resource}.{access.group or 'core'}")
    return missing


def compute_domain_problems(client: kube.Kube, verbs: tuple[str, ...], reads: tuple[Access, ...] = ()) -> list[str]:
    """Why a controller that needs ComputeDomains (and the `reads` beside them) cannot run with the feature gate
    on (empty: it can)."""
    if not is_served(client, CD_API, keys.COMPUTE_DOMAIN_PLURAL):
        return [
            f"the ComputeDomain API ({keys.COMPUTE_DOMAIN_PLURAL}.{CD_API}) is not served: install the NVIDIA DRA "
            "driver (k8s-dra-driver-gpu) with ComputeDomain support, or set the AutoComputeDomain feature gate "
            "to false"
        ]
    missing = missing_access(
        client, [Access(group=keys.COMPUTE_DOMAIN_GROUP, resource=keys.COMPUTE_DOMAIN_PLURAL, verbs=verbs)]
    )
    if missing:
        return [
            f"this controller's service account may not {', '.join(missing)}: enable the chart's ComputeDomain RBAC "
            "(featureGates.AutoComputeDomain=true) or include the config/components/computedomain kustomize component"
        ]
    missing = missing_access(client, list(reads))
    if missing:
        return [
            f"this controller's service account may not {', '.join(missing)}: grant it in the controller's ClusterRole"
        ]
    return []
