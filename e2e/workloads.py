"""Builders, actions and expectations for end-to-end tests of mnnvl on the testbed."""

from __future__ import annotations

import contextlib
import datetime
import json
import pathlib
import re
import ssl
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mnnvl_api import keys, names
from mnnvl_api.decisions import injection
from mnnvl_runtime import kube
from mnnvl_testbed import controllers, testing
from mnnvl_testbed.workloads import (
    CD_API,
    DS_API,
    LWS_API,
    ROUTING_PROXY,
    VLLM,
    create_foreign_domain,
    domains,
    ds_manifest,
    generate_named,
    lws_manifest,
    role_manifest,
)

__all__ = [
    "CD_API",
    "DS_API",
    "LWS_API",
    "ROUTING_PROXY",
    "VLLM",
    "create_foreign_domain",
    "domains",
    "ds_manifest",
    "generate_named",
    "lws_manifest",
    "role_manifest",
]

TIMEOUT = 120.0
#: A finalizer that keeps a deleted pod Terminating (non-terminal, phase Running) until a test lets it go: what a
#: kubelet's grace period does, which kwok's instant pod removal skips.
HOLD_FINALIZER = "e2e.mnnvl.test/hold"


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


def unscheduled_because(pod: kube.Object) -> str | None:
    """What the pod's scheduler said when it could not place it (kube-scheduler, KAI and Volcano all say it in
    `PodScheduled=False`), if it did."""
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return f"{condition.get('reason')}: {condition.get('message')}"
    return None


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
                unscheduled_because(p),
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


def restart_group(api: kube.Kube, ns: str, name: str, group: int) -> None:
    """Delete a worker of group `group` as a crashed pod is, until upstream LWS deletes the group's leader to restart
    the group."""
    leader_path = kube.path_of("v1", "pods", namespace=ns, name=f"{name}-{group}")
    old_leader = api.request("GET", leader_path)["metadata"]["uid"]
    worker = kube.path_of("v1", "pods", namespace=ns, name=f"{name}-{group}-1")
    # A kubelet takes the grace period to stop a pod; kwok removes it at once, and upstream LWS restarts the group
    # only if it reads the worker while it terminates. The finalizer plays the grace period.
    api.patch(worker, {"metadata": {"finalizers": [HOLD_FINALIZER]}})
    try:
        api.request("DELETE", worker)

        def leader_going() -> bool:
            # Upstream deletes the leader in the foreground: it stays until the held worker goes.
            leader = api.get("v1", "pods", f"{name}-{group}", namespace=ns)
            return (
                leader is None
                or leader["metadata"]["uid"] != old_leader
                or bool(leader["metadata"].get("deletionTimestamp"))
            )

        testing.wait_for(
            leader_going,
            what=f"upstream LWS deleting the leader of group {group}, whose worker was deleted",
            state=testing.state_of(lambda: summary(api, ns)),
            timeout=TIMEOUT,
        )
    finally:
        api.patch(worker, {"metadata": {"finalizers": None}})


def wait_group_restarted(
    api: kube.Kube, ns: str, name: str, group: int, before: dict[str, str | None], *, replicas: int, size: int
) -> dict[str, str | None]:
    """Until every group runs again and group `group` records a domain other than in `before`; the group domains."""

    def restarted() -> dict[str, str | None] | None:
        after = group_domains(wait_groups_running(api, ns, name, replicas=replicas, size=size))
        return after if after[str(group)] != before[str(group)] else None

    return testing.wait_for(
        restarted,
        what=f"group {group} running with a new domain",
        state=testing.state_of(lambda: summary(api, ns)),
        timeout=TIMEOUT,
    )


def roll_worker_image(
    api: kube.Kube, ns: str, name: str, image: str, *, replicas: int, size: int
) -> dict[str, str | None]:
    """Make the workers' containers one vllm of `image` and wait until groups 0 to `replicas - 1` run it; their
    domains."""
    container = {"name": "vllm", "image": image, "resources": {"limits": {keys.GPU_RESOURCE: "4"}}}
    patch_lws(
        api, ns, name, {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [container]}}}}}
    )

    def rolled() -> dict[str, str | None] | None:
        pods = wait_groups_running(api, ns, name, replicas=replicas, size=size)
        if any(c["image"] != image for p in pods for c in p["spec"]["containers"]):
            return None
        found = group_domains(pods)
        # With a surge, the surge group and all but one of the others can be the ones running the new template
        # while that one is replaced: the rollout is done only when the groups below `replicas` are.
        return found if set(found) == {str(index) for index in range(replicas)} else None

    return testing.wait_for(rolled, what=f"{name}: every group on the new template", timeout=TIMEOUT)


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


def domain_by_hand(api: kube.Kube, ns: str, name: str) -> str:
    """A ComputeDomain someone made by hand, once the driver made its claim template; returns the template's name."""
    create_foreign_domain(api, ns, name, {})
    template = f"{name}-channel"
    testing.wait_for(
        lambda: api.get("resource.k8s.io/v1", "resourceclaimtemplates", template, namespace=ns) is not None,
        what=f"the driver to make {template}",
        timeout=TIMEOUT,
    )
    return template


def in_use_teardowns(api: kube.Kube, ns: str) -> list[dict[str, Any]]:
    return [t for t in testing.teardowns(api, ns) if t["referencing_pods"]]


def create_lws_with_warnings(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> tuple[kube.Object, list[str]]:
    """Create an LWS, and return it with the warnings the API server sent back in `Warning` response headers
    (admission warnings among them), which `kube.Kube.request` does not expose."""
    return create_with_warnings(api, kube.path_of(LWS_API, "leaderworkersets", namespace=ns), manifest)


def create_with_warnings(api: kube.Kube, path: str, manifest: dict[str, Any]) -> tuple[kube.Object, list[str]]:
    """POST `manifest` to `path`; the created object and the API server's `Warning` headers."""
    _, url, headers, payload, _ = api.api.param_serialize(
        method="POST",
        resource_path=path,
        header_params={"Accept": kube.JSON, "Content-Type": kube.JSON},
        body=manifest,
        auth_settings=["BearerToken"],
    )
    response = api.api.call_api("POST", url, header_params=headers, body=payload)
    data: bytes = response.read()  # type: ignore[no-untyped-call]
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


# --- DisaggregatedSets ----------------------------------------------------------------------------------------

#: The seed's Option 1 example, as the seed has it (the demo applies it too).
LWS_EXAMPLE = pathlib.Path(__file__).parents[1] / "packages/mnnvl-testbed/src/mnnvl_testbed/examples/deepseek-r1.yaml"
#: The seed's Option 2 example, shrunk to fit a testbed clique per slice (the demo applies it too).
DS_EXAMPLE = pathlib.Path(__file__).parents[1] / "packages/mnnvl-testbed/src/mnnvl_testbed/examples/llm-serving.yaml"


def ds_example() -> dict[str, Any]:
    example: dict[str, Any] = yaml.safe_load(DS_EXAMPLE.read_text())
    return example


def ds_path(ns: str, name: str | None = None) -> str:
    return kube.path_of(DS_API, keys.DS_PLURAL, namespace=ns, name=name)


def create_ds(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> kube.Object:
    return api.request("POST", ds_path(ns), body=manifest)


def patch_ds(api: kube.Kube, ns: str, name: str, merge_patch: dict[str, Any]) -> kube.Object:
    return api.request("PATCH", ds_path(ns, name), body=merge_patch, content_type=kube.MERGE_PATCH)


def set_role_image(api: kube.Kube, ns: str, name: str, role_index: int, image: str) -> kube.Object:
    """A new image for one role: a new revision of the whole set."""
    path = f"/spec/roles/{role_index}/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/image"
    return api.request(
        "PATCH", ds_path(ns, name), body=[{"op": "replace", "path": path, "value": image}], content_type=kube.JSON_PATCH
    )


def children(api: kube.Kube, ns: str, ds: str) -> list[kube.Object]:
    """The child LeaderWorkerSets of `ds` that are not being deleted."""
    return [
        lws
        for lws in api.list_objects(
            LWS_API, "leaderworkersets", namespace=ns, labelSelector=f"{keys.DS_NAME_LABEL}={ds}"
        )
        if not lws["metadata"].get("deletionTimestamp")
    ]


def revision_of(obj: kube.Object) -> str:
    return str(obj["metadata"]["labels"][keys.DS_REVISION_LABEL])


def slice_of(obj: kube.Object) -> int:
    return int(obj["metadata"]["labels"].get(keys.DS_SLICE_LABEL, "0"))


def role_of(obj: kube.Object) -> str:
    return str(obj["metadata"]["labels"][keys.DS_ROLE_LABEL])


def ds_pods(api: kube.Kube, ns: str, ds: str) -> list[kube.Object]:
    return testing.pods(api, ns, f"{keys.DS_NAME_LABEL}={ds}")


def slice_domain(ds: str, slice_index: int, revision: str) -> str:
    return names.slice_domain_name(ds, slice_index, revision)


def ds_summary(api: kube.Kube, ns: str, ds: str) -> dict[str, Any]:
    return {
        "children": sorted((c["metadata"]["name"], c["spec"]["replicas"]) for c in children(api, ns, ds)),
        **summary(api, ns),
    }


def wait_slices_running(
    api: kube.Kube, ns: str, ds: str, *, pods_per_slice: dict[int, int]
) -> dict[int, list[kube.Object]]:
    """Until exactly `pods_per_slice[slice]` pods of `ds` exist per slice, all of one revision per slice, Running
    and ungated, and no pod of another slice is left; slice → its pods."""

    def settled() -> dict[int, list[kube.Object]] | None:
        pods = ds_pods(api, ns, ds)
        by_slice: dict[int, list[kube.Object]] = {}
        for pod in pods:
            by_slice.setdefault(slice_of(pod), []).append(pod)
        if {s: len(p) for s, p in by_slice.items()} != pods_per_slice:
            return None
        if any(p["metadata"].get("deletionTimestamp") or is_gated(p) for p in pods) or len(
            testing.running(pods)
        ) != len(pods):
            return None
        if any(len({revision_of(p) for p in members}) != 1 for members in by_slice.values()):
            return None
        return {s: sorted(p, key=lambda pod: pod["metadata"]["name"]) for s, p in by_slice.items()}

    return testing.wait_for(
        settled,
        what=f"pods of {ds} Running per slice: {pods_per_slice}",
        state=testing.state_of(lambda: ds_summary(api, ns, ds)),
        timeout=180,
    )


def create_ds_with_warnings(api: kube.Kube, ns: str, manifest: dict[str, Any]) -> tuple[kube.Object, list[str]]:
    return create_with_warnings(api, ds_path(ns), manifest)


def events(api: kube.Kube, ns: str, reason: str) -> list[kube.Object]:
    return api.list_objects("v1", "events", namespace=ns, fieldSelector=f"reason={reason}")


def domain_labelled_as(ns: str, name: str, manager: str) -> dict[str, Any]:
    """A ComputeDomain carrying the labels `manager` puts on the domains it creates (a fresh owner UID)."""
    return {
        "apiVersion": CD_API,
        "kind": keys.COMPUTE_DOMAIN_KIND,
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {keys.OWNER_UID_LABEL: str(uuid.uuid4()), keys.MANAGED_BY_LABEL: manager},
        },
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


LWS_LEASE_PATH = kube.path_of(
    "coordination.k8s.io/v1", "leases", namespace=controllers.NAMESPACE, name=keys.LWS_CONTROLLER
)


def replica_metrics(replica: controllers.Replica, *, ca: pathlib.Path | None = None, token: str | None = None) -> str:
    """The metrics `replica` serves: plain HTTP, or with `ca` HTTPS trusting it (secure metrics), sending `token` as
    the bearer token when given. A refusal raises urllib.error.HTTPError (its `code` the status)."""
    request = urllib.request.Request(f"{'http' if ca is None else 'https'}://127.0.0.1:{replica.metrics_port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = None if ca is None else ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen(request, timeout=5, context=context) as response:
        return str(response.read().decode())


def metric_values(text: str, name: str, labels: Mapping[str, str] | None = None) -> list[float]:
    """The values of the samples `name` in the metrics `text` whose labels include `labels` (all of them when none
    are given), in the order served."""
    wanted = (labels or {}).items()
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and wanted <= sample.labels.items()
    ]


def metric(replica: controllers.Replica, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sum of `replica`'s samples `name` whose labels include `labels` (every label set when none are given);
    0 when it serves none."""
    return sum(metric_values(replica_metrics(replica), name, labels))


def admissions(replica: controllers.Replica) -> float:
    """How many admission requests `replica` answered."""
    return metric(replica, "mnnvl_admission_requests_total")


def lease_held(replica: controllers.Replica) -> bool:
    return metric(replica, "mnnvl_lease_held") == 1.0


@contextlib.contextmanager
def lws_lease_taken(api: kube.Kube, replica: controllers.Replica) -> Iterator[None]:
    """mnnvl-lws's Lease held by the test, so nothing reconciles meanwhile (pod webhooks still answer); given back
    afterwards.

    A merge patch, not read-then-PUT: the controller renews concurrently, and a PUT of what was read would meet its
    renewal as a conflict. Its own next renewal then sees another holder and steps down."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {"spec": {"holderIdentity": "e2e-test", "leaseDurationSeconds": 3600, "renewTime": now}}
    api.request("PATCH", LWS_LEASE_PATH, body=held, content_type=kube.MERGE_PATCH)
    try:
        testing.wait_for(lambda: not lease_held(replica), what="mnnvl-lws to see it lost the Lease", timeout=30)
        yield
    finally:
        api.request(
            "PATCH",
            LWS_LEASE_PATH,
            body={"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}},
            content_type=kube.MERGE_PATCH,
        )


def leader_behind_a_foreign_domain(api: kube.Kube, ns: str, replica: controllers.Replica, name: str = "clash") -> str:
    """An opted-in LWS `name` of one group whose leader's domain name a foreign ComputeDomain takes first (put in place
    while the test holds mnnvl-lws's Lease, so nothing reconciles meanwhile, and while a ResourceQuota of no
    ComputeDomains refuses the create the pod webhook starts at admission); the domain's name."""
    with lws_lease_taken(api, replica), no_domains_created(api, ns):
        create_lws(api, ns, lws_manifest(name, replicas=1, size=2))
        leader = testing.wait_for(
            lambda: api.get("v1", "pods", f"{name}-0", namespace=ns), what="the leader pod", timeout=60
        )
        domain = domain_of(leader)
        assert domain is not None
    create_foreign_domain(api, ns, domain, {"team": "someone-else"})
    return domain


@contextlib.contextmanager
def no_domains_created(api: kube.Kube, ns: str) -> Iterator[None]:
    """While inside, a ResourceQuota refuses every new ComputeDomain in `ns` (once the quota controller has counted
    them: until then the API server does not enforce it)."""
    quota = f"count/{keys.COMPUTE_DOMAIN_PLURAL}.{keys.COMPUTE_DOMAIN_GROUP}"
    path = kube.path_of("v1", "resourcequotas", namespace=ns)
    api.request(
        "POST",
        path,
        body={
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-domains"},
            "spec": {"hard": {quota: "0"}},
        },
    )
    testing.wait_for(
        lambda: (
            quota
            in ((api.get("v1", "resourcequotas", "no-domains", namespace=ns) or {}).get("status") or {}).get("hard", {})
        ),
        what="the quota of no ComputeDomains in force",
        timeout=60,
    )
    try:
        yield
    finally:
        api.request("DELETE", f"{path}/no-domains")


@contextlib.contextmanager
def deleted_but_one_worker(
    api: kube.Kube, ns: str, name: str, worker: str, *, timeout: float = TIMEOUT
) -> Iterator[str]:
    """The LWS `name` deleted while its pod `worker` is held Terminating (non-terminal, still using its domain) by a
    finalizer, as a kubelet's grace period would; yields the pod's path, and lets the pod go afterwards."""
    path = kube.path_of("v1", "pods", namespace=ns, name=worker)
    api.patch(path, {"metadata": {"finalizers": [HOLD_FINALIZER]}})
    try:
        api.request("DELETE", lws_path(ns, name))
        testing.wait_for(
            lambda: [p["metadata"]["name"] for p in testing.pods(api, ns)] == [worker],
            what="every pod of the workload gone but the held worker",
            state=testing.state_of(lambda: summary(api, ns)),
            timeout=timeout,
        )
        yield path
    finally:
        api.patch(path, {"metadata": {"finalizers": None}})
