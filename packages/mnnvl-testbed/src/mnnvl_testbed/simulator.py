"""A stand-in for the NVIDIA DRA driver's ComputeDomain controller and kubelet plugin, for the testbed.

It behaves as the real driver does where mnnvl depends on it:
- publishes one `channel-0` device per fake node, so the real scheduler allocates channel claims with the
  real one-claim-per-node limit;
- adds its finalizer to each ComputeDomain, creates the workload ResourceClaimTemplate named in
  `spec.channel.resourceClaimTemplate.name` (labels, no ownerReference) and marks the domain Ready;
- as soon as a domain has a deletionTimestamp, deletes that template and drops its own finalizer, whatever
  other finalizers remain (IMEX teardown), and records the teardown as an Event naming the non-terminal
  pods that still referenced the domain. Tests read those Events to prove no in-use domain was torn down.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client import exceptions

from mnnvl_api import keys
from mnnvl_api.decisions import references

from . import manifests

COMPONENT = "mnnvl-testbed-dra-simulator"
TEARDOWN_REASON = "ComputeDomainTeardown"
#: On teardown Events: comma-separated names of the non-terminal pods that referenced the domain (empty: none).
REFERENCING_PODS_ANNOTATION = "mnnvl-testbed/referencing-pods"

registry = kopf.OperatorRegistry()
_api: client.ApiClient | None = None


def api() -> client.ApiClient:
    global _api  # noqa: PLW0603 - one client per process, created after kopf configured logging
    if _api is None:
        _api = config.new_client_from_config()
    return _api


@kopf.on.startup(registry=registry)
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False
    settings.persistence.finalizer = "testbed.mnnvl/simulator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="simulator.testbed.mnnvl")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="simulator.testbed.mnnvl")
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150


@kopf.index("pods", id="claim-template-users", registry=registry)
def claim_template_users(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict[tuple[str, str], str]:
    """(namespace, template) → names of non-terminal pods referencing it."""
    return {(namespace, template): name for template in references.live_claim_templates(body)}


@kopf.on.event("nodes", labels={manifests.TESTBED_NODE_LABEL: "true"}, id="publish-channel", registry=registry)
def publish_channel(body: kopf.Body, type: str | None, **_: Any) -> None:  # noqa: A002 - kopf's kwarg name
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return  # the slice's ownerReference lets the garbage collector remove it
    resource_slice = manifests.channel_resource_slice(dict(body))
    custom = client.CustomObjectsApi(api())
    try:
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", resource_slice)
    except exceptions.ApiException as error:
        if error.status != 409:
            raise


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL, id="drive", registry=registry
)
async def drive(body: kopf.Body, type: str | None, claim_template_users: kopf.Index[tuple[str, str], str], **_: Any) -> None:  # noqa: A002
    if type == "DELETED":
        return
    domain = dict(body)
    if domain["metadata"].get("deletionTimestamp"):
        if manifests.COMPUTE_DOMAIN_FINALIZER in domain["metadata"].get("finalizers", []):
            key = (domain["metadata"]["namespace"], domain["spec"]["channel"]["resourceClaimTemplate"]["name"])
            users = sorted(claim_template_users.get(key, []))
            await asyncio.to_thread(_tear_down, domain, users)
        return
    await asyncio.to_thread(_bring_up, domain)


def _bring_up(domain: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api())
    meta = domain["metadata"]
    if manifests.COMPUTE_DOMAIN_FINALIZER not in meta.get("finalizers", []):
        custom.patch_namespaced_custom_object(
            keys.COMPUTE_DOMAIN_GROUP,
            keys.COMPUTE_DOMAIN_VERSION,
            meta["namespace"],
            keys.COMPUTE_DOMAIN_PLURAL,
            meta["name"],
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                {"op": "add", "path": "/metadata/finalizers", "value": [*meta.get("finalizers", []), manifests.COMPUTE_DOMAIN_FINALIZER]},
            ],
        )
    template = manifests.workload_claim_template(domain)
    try:
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", meta["namespace"], "resourceclaimtemplates", template
        )
    except exceptions.ApiException as error:
        if error.status != 409:
            raise
    if (domain.get("status") or {}).get("status") != "Ready":
        custom.patch_namespaced_custom_object_status(
            keys.COMPUTE_DOMAIN_GROUP,
            keys.COMPUTE_DOMAIN_VERSION,
            meta["namespace"],
            keys.COMPUTE_DOMAIN_PLURAL,
            meta["name"],
            {"status": {"status": "Ready", "nodes": []}},
        )


def _tear_down(domain: dict[str, Any], users: list[str]) -> None:
    custom = client.CustomObjectsApi(api())
    meta = domain["metadata"]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    try:
        custom.delete_namespaced_custom_object("resource.k8s.io", "v1", meta["namespace"], "resourceclaimtemplates", template)
    except exceptions.ApiException as error:
        if error.status != 404:
            raise
    _record_teardown(domain, users)
    finalizers = meta.get("finalizers", [])
    index = finalizers.index(manifests.COMPUTE_DOMAIN_FINALIZER)
    try:
        custom.patch_namespaced_custom_object(
            keys.COMPUTE_DOMAIN_GROUP,
            keys.COMPUTE_DOMAIN_VERSION,
            meta["namespace"],
            keys.COMPUTE_DOMAIN_PLURAL,
            meta["name"],
            [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": manifests.COMPUTE_DOMAIN_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ],
        )
    except exceptions.ApiException as error:
        if error.status not in (404, 422):  # gone, or finalizers moved: the next event retries
            raise


def _record_teardown(domain: dict[str, Any], users: list[str]) -> None:
    meta = domain["metadata"]
    now = datetime.datetime.now(datetime.UTC)
    in_use = f"while referenced by non-terminal pods: {', '.join(users)}" if users else "with no pod referencing it"
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(
            generate_name=f"{meta['name']}.teardown.",
            namespace=meta["namespace"],
            annotations={REFERENCING_PODS_ANNOTATION: ",".join(users)},
        ),
        involved_object=client.V1ObjectReference(
            api_version=f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}",
            kind=keys.COMPUTE_DOMAIN_KIND,
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
        ),
        reason=TEARDOWN_REASON,
        message=f"IMEX teardown of ComputeDomain {meta['name']} {in_use}",
        type="Warning" if users else "Normal",
        source=client.V1EventSource(component=COMPONENT),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    client.CoreV1Api(api()).create_namespaced_event(meta["namespace"], event)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(kopf.operator(registry=registry, standalone=True, clusterwide=True))


if __name__ == "__main__":
    main()
