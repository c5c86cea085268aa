"""A stand-in for the NVIDIA DRA driver's ComputeDomain controller and kubelet plugin, for the testbed.

It behaves as the real driver does where mnnvl depends on it:
- installs the driver's own ComputeDomain CRD (upstream's file, at the release the testbed asks for);
- publishes one `channel-0` device per fake node, so the real scheduler allocates channel claims with the
  real one-claim-per-node limit;
- adds its finalizer to each ComputeDomain, creates the workload ResourceClaimTemplate named in
  `spec.channel.resourceClaimTemplate.name` (labels, no ownerReference) and marks the domain Ready;
- as soon as a domain has a deletionTimestamp, deletes that template and drops its own finalizer, whatever
  other finalizers remain (IMEX teardown), and records the teardown as an Event naming the non-terminal
  pods that still used the domain (held its claim or recorded it), read afresh at that moment. Tests read
  those Events to prove no in-use domain was torn down.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import pathlib
import sys
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_api.decisions import references
from mnnvl_runtime import kube

from . import crds, manifests

COMPONENT = "mnnvl-testbed-dra-simulator"
TEARDOWN_REASON = "ComputeDomainTeardown"
#: On teardown Events: comma-separated names of the non-terminal pods that referenced the domain (empty: none).
REFERENCING_PODS_ANNOTATION = "mnnvl-testbed/referencing-pods"
CD_API_VERSION = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"

registry = kopf.OperatorRegistry()
_api: kube.Kube | None = None
#: UIDs of the domains already torn down: later events of a Terminating domain must not count again.
_torn_down: set[str] = set()


def api() -> kube.Kube:
    global _api  # noqa: PLW0603 - one client per process, created once kopf has started
    if _api is None:
        _api = kube.Kube(kube.load_api_client(pathlib.Path(os.environ["KUBECONFIG"])), field_manager=COMPONENT)
    return _api


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup(registry=registry)
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False
    settings.persistence.finalizer = "simulator.testbed.mnnvl/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="simulator.testbed.mnnvl")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="simulator.testbed.mnnvl")
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150


@kopf.on.event("nodes", labels={manifests.TESTBED_NODE_LABEL: "true"}, id="publish-channel", registry=registry)
def publish_channel(body: kopf.Body, type: str, **_: Any) -> None:
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return  # the slice's ownerReference lets the garbage collector remove it
    resource_slice = manifests.channel_resource_slice(dict(body))
    _create_if_absent(kube.path_of("resource.k8s.io/v1", "resourceslices"), resource_slice)


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL, id="drive", registry=registry
)
async def drive(body: kopf.Body, type: str, **_: Any) -> None:
    if type == "DELETED":
        return
    domain = dict(body)
    if domain["metadata"].get("deletionTimestamp"):
        if manifests.COMPUTE_DOMAIN_FINALIZER in domain["metadata"].get("finalizers", []):
            await asyncio.to_thread(_tear_down, domain, await asyncio.to_thread(_users, domain))
        return
    await asyncio.to_thread(_bring_up, domain)


def _users(domain: dict[str, Any]) -> list[str]:
    """The non-terminal pods using the domain right now (read afresh): holding its claim, or recording it as a
    CPU-only leader does."""
    meta = domain["metadata"]
    pods = api().list_objects("v1", "pods", namespace=meta["namespace"])
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    return sorted(references.users_of(pods, domain=meta["name"], claim_template=template))


def _domain_path(meta: dict[str, Any]) -> str:
    return kube.path_of(CD_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL, namespace=meta["namespace"], name=meta["name"])


def _bring_up(domain: dict[str, Any]) -> None:
    meta = domain["metadata"]
    if manifests.COMPUTE_DOMAIN_FINALIZER not in meta.get("finalizers", []):
        finalizers = [*meta.get("finalizers", []), manifests.COMPUTE_DOMAIN_FINALIZER]
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ]
        if not _patch_or_skip(_domain_path(meta), patch):
            return  # the domain changed meanwhile; its next event brings it up
    template = manifests.workload_claim_template(domain)
    _create_if_absent(
        kube.path_of("resource.k8s.io/v1", "resourceclaimtemplates", namespace=meta["namespace"]), template
    )
    if (domain.get("status") or {}).get("status") != "Ready":
        api().request(
            "PATCH",
            _domain_path(meta) + "/status",
            body={"status": {"status": "Ready", "nodes": []}},
            content_type=kube.MERGE_PATCH,
        )


def _tear_down(domain: dict[str, Any], users: list[str]) -> None:
    meta = domain["metadata"]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    try:
        api().request(
            "DELETE",
            kube.path_of("resource.k8s.io/v1", "resourceclaimtemplates", namespace=meta["namespace"], name=template),
        )
    except kube.ApiError as error:
        if error.status != 404:
            raise
    if meta["uid"] not in _torn_down:
        _torn_down.add(meta["uid"])
        _record_teardown(domain, users)
    index = meta["finalizers"].index(manifests.COMPUTE_DOMAIN_FINALIZER)
    pointer = f"/metadata/finalizers/{index}"
    _patch_or_skip(
        _domain_path(meta),
        [
            {"op": "test", "path": pointer, "value": manifests.COMPUTE_DOMAIN_FINALIZER},
            {"op": "remove", "path": pointer},
        ],
    )


def _patch_or_skip(path: str, patch: list[dict[str, Any]]) -> bool:
    """Apply a JSON patch guarded by `test`; False when the object moved on or is gone (a later event retries)."""
    try:
        api().request("PATCH", path, body=patch, content_type=kube.JSON_PATCH)
    except kube.ApiError as error:
        if error.status in (404, 409, 422):
            return False
        raise
    return True


def _create_if_absent(collection: str, manifest: dict[str, Any]) -> None:
    try:
        api().request("POST", collection, body=manifest)
    except kube.ApiError as error:
        if error.status != 409:
            raise


def _record_teardown(domain: dict[str, Any], users: list[str]) -> None:
    meta = domain["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    in_use = f"while referenced by non-terminal pods: {', '.join(users)}" if users else "with no pod referencing it"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta['name']}.teardown.",
            "namespace": meta["namespace"],
            "annotations": {REFERENCING_PODS_ANNOTATION: ",".join(users)},
        },
        "involvedObject": {
            "apiVersion": CD_API_VERSION,
            "kind": keys.COMPUTE_DOMAIN_KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": TEARDOWN_REASON,
        "message": f"IMEX teardown of ComputeDomain {meta['name']} {in_use}",
        "type": "Warning" if users else "Normal",
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        api().request("POST", kube.path_of("v1", "events", namespace=meta["namespace"]), body=event)
    except kube.ApiError as error:  # e.g. the namespace is terminating: the teardown itself must go on
        logging.getLogger(__name__).warning("teardown of %s not recorded: %s", meta["name"], error.reason)


def install_api(api: kube.Kube, computedomain_crd: str) -> None:
    """What installing the driver provides: its ComputeDomain CRD at `computedomain_crd` (a release in
    `versions.COMPUTE_DOMAIN_CRDS`, upstream's file as is) and the default channel DeviceClass."""
    crds.install_computedomain_crd(api, computedomain_crd)
    api.apply(manifests.channel_device_class(), "deviceclasses")


def command(kubeconfig: pathlib.Path) -> tuple[list[str], dict[str, str]]:
    """How the simulator runs against the cluster `kubeconfig` reaches: (command, environment)."""
    return [sys.executable, "-m", "mnnvl_testbed.simulator"], {"KUBECONFIG": str(kubeconfig)}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(kopf.operator(registry=registry, standalone=True, clusterwide=True))


if __name__ == "__main__":
    main()
