"""An independent watch of the NVIDIA driver's ComputeDomain teardowns, the judge of mnnvl's first promise.

The driver tears a domain's IMEX down by deleting the domain's workload ResourceClaimTemplate and its daemon
DaemonSet. This process watches both (and the domains, to know each one's name and claim template) and, the first
time either of a domain starts going, reads the domain's namespace afresh and records an Event naming the
non-terminal pods that still use the domain: hold a claim from its template, or record the domain as a CPU-only
leader does. Tests read those Events (`testing.teardowns`) to prove no domain in use was torn down.

It judges with its own reading of "uses" rather than mnnvl's, so a mistake there cannot hide itself. What it sees
lags the teardown by a watch event; a pod that turns terminal in between is missed, never a pod wrongly named.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from mnnvl_api import keys
from mnnvl_runtime import kube

from . import kopf_process, manifests

COMPONENT = "teardown-witness"
TEARDOWN_REASON = "ComputeDomainTeardown"
#: On teardown Events: comma-separated names of the non-terminal pods that referenced the domain (empty: none).
REFERENCING_PODS_ANNOTATION = "mnnvl-testbed/referencing-pods"
CD_API_VERSION = f"{keys.COMPUTE_DOMAIN_GROUP}/{keys.COMPUTE_DOMAIN_VERSION}"

registry = kopf_process.registry(COMPONENT)


@dataclasses.dataclass(frozen=True)
class Domain:
    namespace: str
    name: str
    uid: str
    claim_template: str


#: Every domain seen, by UID: a teardown's objects name their domain only by its UID.
_domains: dict[str, Domain] = {}
#: UIDs of the domains whose teardown is recorded: it is seen on two objects, over several events.
_witnessed: set[str] = set()


def _domain_of(body: Mapping[str, Any]) -> Domain:
    meta = body["metadata"]
    return Domain(
        meta["namespace"], meta["name"], meta["uid"], body["spec"]["channel"]["resourceClaimTemplate"]["name"]
    )


@kopf.on.event(
    keys.COMPUTE_DOMAIN_GROUP, keys.COMPUTE_DOMAIN_VERSION, keys.COMPUTE_DOMAIN_PLURAL, id="learn", registry=registry
)
def learn(body: kopf.Body, **_: Any) -> None:
    domain = _domain_of(body)
    _domains[domain.uid] = domain


@kopf.on.event(
    "resource.k8s.io",
    "v1",
    "resourceclaimtemplates",
    labels={manifests.DRIVER_TARGET_LABEL: "Workload", manifests.DRIVER_LABEL: kopf.PRESENT},
    id="claim-template",
    registry=registry,
)
async def claim_template(body: kopf.Body, type: str, **_: Any) -> None:
    await _on_driver_object(body, type)


@kopf.on.event(
    "apps", "v1", "daemonsets", labels={manifests.DRIVER_LABEL: kopf.PRESENT}, id="daemon-set", registry=registry
)
async def daemon_set(body: kopf.Body, type: str, **_: Any) -> None:
    await _on_driver_object(body, type)


async def _on_driver_object(body: kopf.Body, type: str | None) -> None:
    uid = str(body["metadata"]["labels"][manifests.DRIVER_LABEL])
    going = type == "DELETED" or bool(body["metadata"].get("deletionTimestamp"))
    if not going or uid in _witnessed:
        return
    _witnessed.add(uid)
    await asyncio.to_thread(_witness, uid)


def _witness(uid: str) -> None:
    api = kopf_process.api(COMPONENT)
    domain = _domains.get(uid) or next(
        (
            _domain_of(found)
            for found in api.list_objects(CD_API_VERSION, keys.COMPUTE_DOMAIN_PLURAL)
            if found["metadata"]["uid"] == uid
        ),
        None,
    )
    if domain is None:
        logging.getLogger(__name__).warning("teardown of unknown ComputeDomain %s not recorded", uid)
        return
    users = users_of(api.list_objects("v1", "pods", namespace=domain.namespace), domain)
    _record(api, domain, users)


def users_of(pods: Iterable[Mapping[str, Any]], domain: Domain) -> list[str]:
    """The non-terminal pods among `pods` that hold a claim from the domain's template or record the domain."""
    found = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        templates = {
            claim.get("resourceClaimTemplateName") for claim in (pod.get("spec") or {}).get("resourceClaims") or ()
        }
        recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.COMPUTE_DOMAIN_NAME_ANNOTATION)
        if domain.claim_template in templates or recorded == domain.name:
            found.append(str(pod["metadata"]["name"]))
    return sorted(found)


def _record(api: kube.Kube, domain: Domain, users: list[str]) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    in_use = f"while referenced by non-terminal pods: {', '.join(users)}" if users else "with no pod referencing it"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{domain.name}.teardown.",
            "namespace": domain.namespace,
            "annotations": {REFERENCING_PODS_ANNOTATION: ",".join(users)},
        },
        "involvedObject": {
            "apiVersion": CD_API_VERSION,
            "kind": keys.COMPUTE_DOMAIN_KIND,
            "name": domain.name,
            "namespace": domain.namespace,
            "uid": domain.uid,
        },
        "reason": TEARDOWN_REASON,
        "message": f"IMEX teardown of ComputeDomain {domain.name} {in_use}",
        "type": "Warning" if users else "Normal",
        "source": {"component": f"mnnvl-testbed-{COMPONENT}"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        api.request("POST", kube.path_of("v1", "events", namespace=domain.namespace), body=event)
    except kube.ApiError as error:  # e.g. the namespace is terminating
        logging.getLogger(__name__).warning("teardown of %s not recorded: %s", domain.name, error.reason)


if __name__ == "__main__":
    kopf_process.run(registry)
