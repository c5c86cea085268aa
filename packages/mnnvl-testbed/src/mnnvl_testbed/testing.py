"""Helpers for tests against the testbed: a session-wide testbed, namespaces, and waits that explain themselves.

`MNNVL_TESTBED_STATE` names the state dir of a testbed to reuse; without it, tests use (and start if
needed) the default one. A testbed started by a test session keeps running afterwards, so the next
session starts warm; `mnnvl-testbed down` stops it.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml

from mnnvl_runtime import kube

from . import cluster, teardown_witness, versions, waiting

wait_for = waiting.wait_for


#: Tests run many workloads one after another while earlier namespaces drain; give them room.
TEST_NODES = 24


def start_or_reuse() -> cluster.Testbed:
    """The session's testbed, with the driver's default ComputeDomain CRD (whatever an earlier session left)."""
    return cluster.up(
        cluster.default_state_dir(), nodes=TEST_NODES, computedomain_crd=versions.COMPUTE_DOMAIN_CRD, echo=False
    )


@contextlib.contextmanager
def computedomain_crd(testbed: cluster.Testbed, release: str) -> Iterator[cluster.Testbed]:
    """The testbed with the driver's ComputeDomain CRD at `release` (a key of `versions.COMPUTE_DOMAIN_CRDS`) for
    the duration, switched in place and back as a driver upgrade or downgrade would switch it."""
    before = cluster.Testbed.load(testbed.state_dir) or testbed
    switched = cluster.up(testbed.state_dir, nodes=before.nodes, computedomain_crd=release, echo=False)
    try:
        yield switched
    finally:
        cluster.up(testbed.state_dir, nodes=before.nodes, computedomain_crd=before.computedomain_crd, echo=False)


def topology_crds(testbed: cluster.Testbed, release: str) -> cluster.Testbed:
    """The testbed with KAI's Topology CRD at `release` (a key of `versions.TOPOLOGY_CRDS`) and Grove's binding
    CRD installed, in place (later tests may switch the release again)."""
    current = cluster.Testbed.load(testbed.state_dir) or testbed
    return cluster.up(testbed.state_dir, nodes=current.nodes, topology_crds=release, echo=False)


@contextlib.contextmanager
def namespace(api: kube.Kube, prefix: str) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting for it to drain)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", prefix.lower())[:40].strip("-") or "test"
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    api.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"mnnvl-test": "true"}}},
    )
    try:
        yield name
    finally:
        with contextlib.suppress(kube.ApiError):
            api.request("DELETE", f"/api/v1/namespaces/{name}")


def dump(objects: Any) -> str:
    """Objects as YAML for failure messages, without the noise of managedFields."""

    def clean(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: clean(v) for k, v in item.items() if k != "managedFields"}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return yaml.safe_dump(clean(objects), sort_keys=False, width=160)


def namespaces_being_deleted(api: kube.Kube) -> set[str]:
    """The names of the namespaces whose deletion has begun (their objects go while the namespace lingers)."""
    return {
        found["metadata"]["name"]
        for found in api.list_objects("v1", "namespaces")
        if found["metadata"].get("deletionTimestamp")
    }


def pods(api: kube.Kube, ns: str, selector: str = "") -> list[kube.Object]:
    query = {"labelSelector": selector} if selector else {}
    return api.list_objects("v1", "pods", namespace=ns, **query)


def running(found: list[kube.Object]) -> list[kube.Object]:
    """The pods that are bound to a node and Running."""
    return [p for p in found if p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")]


def placement(found: list[kube.Object]) -> list[tuple[str, str | None, str | None]]:
    """(name, phase, node) of each pod: a compact state for failure messages."""
    return [(p["metadata"]["name"], p.get("status", {}).get("phase"), p["spec"].get("nodeName")) for p in found]


def service_account_allowed(api: kube.Kube, namespace: str, account: str, attributes: Mapping[str, str]) -> bool:
    """Whether the API server lets ServiceAccount `namespace/account` do what `attributes` (a SubjectAccessReview's
    resourceAttributes: verb, group, resource, ...) describe, asked as its token authenticates: user and groups."""
    review = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                "resourceAttributes": dict(attributes),
            },
        },
    )
    return bool(review["status"].get("allowed"))


def teardowns(api: kube.Kube, ns: str) -> list[dict[str, Any]]:
    """Every ComputeDomain teardown the teardown witness recorded in `ns`, with the pods that still used it."""
    events = api.list_objects("v1", "events", namespace=ns, fieldSelector=f"reason={teardown_witness.TEARDOWN_REASON}")
    return [
        {
            "domain": event["involvedObject"]["name"],
            "referencing_pods": [
                name
                for name in event["metadata"]
                .get("annotations", {})
                .get(teardown_witness.REFERENCING_PODS_ANNOTATION, "")
                .split(",")
                if name
            ],
            "message": event["message"],
        }
        for event in events
    ]


def state_of(read: Callable[[], Any]) -> Callable[[], str]:
    """A `state` callback for `wait_for` that dumps whatever `read` returns (or why it could not)."""

    def render() -> str:
        try:
            return dump(read())
        except kube.ApiError as error:
            return f"(could not read: {error.status} {error.reason}: {error.body})"

    return render
