"""The shared domain writer against an in-memory API: guarded release, identity, permanent errors reported once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains
from mnnvl_runtime import domain_writer, kube

from .memory_api import DELETED_AT, MemoryApi

NS = "serving"
NAME = "dsr1-0-bbbbb"
WORKLOAD = domain_writer.involved(keys.LWS_API_VERSION, "LeaderWorkerSet", NS, "dsr1", "uid-dsr1")


def domain_manifest(name: str = NAME) -> dict[str, Any]:
    labels = {keys.OWNER_UID_LABEL: "uid-dsr1", keys.MANAGED_BY_LABEL: keys.LWS_CONTROLLER}
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels, "finalizers": [keys.PROTECTION_FINALIZER]},
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }


def managed(facts: domains.DomainFacts) -> bool:
    return facts.managed


def writer(api: MemoryApi) -> domain_writer.DomainWriter:
    return domain_writer.DomainWriter(
        api.client(keys.LWS_CONTROLLER), component="mnnvl-lws", scope="replica", fence_seconds=0
    )


def user_pod(api: MemoryApi, *, records: str) -> None:
    pod = {
        "metadata": {"name": "leader", "namespace": NS, "annotations": {keys.COMPUTE_DOMAIN_NAME_ANNOTATION: records}}
    }
    api.put("pods", {**pod, "spec": {"containers": []}, "status": {"phase": "Running"}}, manager="kubelet")


def test_a_deleted_domain_is_released_only_once_no_pod_records_it() -> None:
    api = MemoryApi()
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_manifest(), manager=keys.LWS_CONTROLLER)
    user_pod(api, records=NAME)
    api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    release = writer(api).release(NS, NAME, belongs=managed, workload=WORKLOAD)
    assert asyncio.run(release) is None
    assert api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME) is not None
    api.delete("pods", NS, "leader")
    assert asyncio.run(writer(api).release(NS, NAME, belongs=managed, workload=WORKLOAD)) == DELETED_AT
    assert api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME) is None


def test_a_live_domain_keeps_its_protection() -> None:
    """A same-named successor of a deleted domain is never unprotected: only a domain being deleted is released."""
    api = MemoryApi()
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_manifest(), manager=keys.LWS_CONTROLLER)
    assert asyncio.run(writer(api).release(NS, NAME, belongs=managed, workload=WORKLOAD)) is None
    found = api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    assert found is not None
    assert found["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]


def test_a_look_alike_is_neither_condemned_deleted_nor_released() -> None:
    api = MemoryApi()
    api.put(keys.COMPUTE_DOMAIN_PLURAL, domain_manifest(), manager="kubectl")
    writes = len(api.events)
    deletion = asyncio.run(writer(api).fenced_delete(NS, NAME, belongs=managed, workload=WORKLOAD))
    assert deletion == domain_writer.Deletion()
    assert len(api.events) == writes  # not condemned, not deleted: nothing written
    api.delete(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)  # someone deletes it: it stays held by the finalizer
    assert asyncio.run(writer(api).release(NS, NAME, belongs=managed, workload=WORKLOAD)) is None
    found = api.get(keys.COMPUTE_DOMAIN_PLURAL, NS, NAME)
    assert found is not None
    assert found["metadata"]["finalizers"] == [keys.PROTECTION_FINALIZER]


class Forbidden:
    """A client whose writes are refused by RBAC; it records the Events posted."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def arequest(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.events.append(kwargs["body"])
        return {}

    async def acreate(self, manifest: dict[str, Any], plural: str) -> dict[str, Any]:
        raise kube.ApiError(status=403, reason="Forbidden")


def test_a_write_refused_for_good_is_reported_once_and_retried_with_back_off() -> None:
    client = Forbidden()
    refused_writer = domain_writer.DomainWriter(client, component="mnnvl-lws", scope="replica", fence_seconds=0)  # type: ignore[arg-type]
    counted = domain_writer.PERMANENT_ERRORS.labels(action="create", status="403")
    before = counted._value.get()
    for _ in range(3):
        with pytest.raises(kube.ApiError):
            asyncio.run(refused_writer.create(domain_manifest(), workload=WORKLOAD))
    assert [(e["reason"], e["type"]) for e in client.events] == [("ComputeDomainWriteFailed", "Warning")]
    assert "Could not create ComputeDomain dsr1-0-bbbbb: 403 Forbidden" in client.events[0]["message"]
    assert counted._value.get() == before + 1


#: The Status the API server answers a DELETE with when the guardian's webhook refuses it (Deny mode).
GUARDIAN_DENIAL = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'admission webhook "validate-computedomain-delete.mnnvl-guardian.mnnvl.dev" denied the request: '
        "ComputeDomain dsr1-0-bbbbb is in use by pods dsr1-0, dsr1-0-1: deleting it now would tear down IMEX",
        "code": 403,
    }
)
#: The Status of a DELETE that RBAC forbids.
RBAC_DENIAL = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'computedomains.resource.nvidia.com "dsr1-0-bbbbb" is forbidden: User '
        '"system:serviceaccount:mnnvl-system:mnnvl-lws" cannot delete resource "computedomains" in API group '
        '"resource.nvidia.com" in the namespace "serving"',
        "reason": "Forbidden",
        "details": {"name": "dsr1-0-bbbbb", "group": "resource.nvidia.com", "kind": "computedomains"},
        "code": 403,
    }
)


#: A ValidatingAdmissionPolicy's refusal as the API server words it (charts/mnnvl/templates/admissionpolicy.yaml).
POLICY_DENIAL = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'computedomains.resource.nvidia.com "dsr1-0-bbbbb" is forbidden: ValidatingAdmissionPolicy '
        "'mnnvl-lws-computedomains' with binding 'mnnvl-lws-computedomains' denied request: mnnvl-lws may only "
        "delete a ComputeDomain it has condemned first",
        "reason": "Forbidden",
        "code": 403,
    }
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (GUARDIAN_DENIAL, json.loads(GUARDIAN_DENIAL)["message"]),
        (POLICY_DENIAL, json.loads(POLICY_DENIAL)["message"]),
        (RBAC_DENIAL, None),
        ("", None),
        ("<html>not json</html>", None),
        ('["a list"]', None),
    ],
    ids=["webhook", "policy", "rbac", "empty", "not-json", "not-a-status"],
)
def test_an_admission_denial_is_told_apart_from_any_other_refusal(body: str, expected: str | None) -> None:
    assert kube.admission_denial(kube.ApiError(status=403, reason="Forbidden", body=body)) == expected


def refused_delete(body: str) -> tuple[dict[str, Any], float]:
    """The event a delete refused with the 403 `body` posts, and how much the write-error metric grew."""
    client = Forbidden()
    refused_writer = domain_writer.DomainWriter(client, component="mnnvl-lws", scope="replica", fence_seconds=0)  # type: ignore[arg-type]
    counted = domain_writer.PERMANENT_ERRORS.labels(action="delete", status="403")
    before = counted._value.get()

    async def refused() -> bool:
        raise kube.ApiError(status=403, reason="Forbidden", body=body)

    with pytest.raises(kube.ApiError):
        asyncio.run(refused_writer.guarded("delete", f"ComputeDomain {NAME}", WORKLOAD, refused))
    [event] = client.events
    return event, counted._value.get() - before


def test_a_deletion_the_guardian_refuses_is_reported_as_in_use_not_as_an_rbac_problem() -> None:
    event, counted = refused_delete(GUARDIAN_DENIAL)
    assert event["reason"] == "ComputeDomainWriteFailed"
    assert event["message"] == (
        "Could not delete ComputeDomain dsr1-0-bbbbb, refused at admission: admission webhook "
        '"validate-computedomain-delete.mnnvl-guardian.mnnvl.dev" denied the request: ComputeDomain dsr1-0-bbbbb '
        "is in use by pods dsr1-0, dsr1-0-1: deleting it now would tear down IMEX; retried with back-off"
    )
    assert "RBAC" not in event["message"]
    assert counted == 0  # not a write error of ours


def test_a_write_an_admission_policy_refuses_is_reported_and_counted_as_a_write_error() -> None:
    event, counted = refused_delete(POLICY_DENIAL)
    assert "refused at admission: computedomains.resource.nvidia.com" in event["message"]
    assert "ValidatingAdmissionPolicy 'mnnvl-lws-computedomains'" in event["message"]
    assert counted == 1  # a write of ours the policy does not expect: the alert must show it


def gated_pod(api: MemoryApi, gates: list[str]) -> Any:
    pod = {
        "metadata": {"name": "leader", "namespace": NS, "creationTimestamp": "2026-11-30T00:00:00Z"},
        "spec": {"containers": [], "schedulingGates": [{"name": gate} for gate in gates]},
        "status": {"phase": "Pending"},
    }
    return api.put("pods", pod, manager="lws")


def gates_of(api: MemoryApi) -> list[str]:
    found = api.get("pods", NS, "leader")
    assert found is not None
    return [gate["name"] for gate in found["spec"].get("schedulingGates") or []]


class ReadCounting:
    """Counts the read-then-patch fallbacks a writer takes."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def amodify(self, path: str, change: Any) -> Any:
        self.reads += 1
        return await self.client.amodify(path, change)


def counting_writer(api: MemoryApi) -> tuple[domain_writer.DomainWriter, ReadCounting]:
    client = ReadCounting(api.client(keys.LWS_CONTROLLER))
    return domain_writer.DomainWriter(client, component="mnnvl-lws", scope="replica", fence_seconds=0), client


def test_a_gate_where_the_watch_saw_it_goes_in_one_patch_without_a_read() -> None:
    api = MemoryApi()
    uid = gated_pod(api, ["other/gate", keys.SCHEDULING_GATE])["metadata"]["uid"]
    counted_writer, client = counting_writer(api)
    asyncio.run(counted_writer.ungate(NS, "leader", uid=uid, gate_at=1, workload=WORKLOAD))
    assert gates_of(api) == ["other/gate"]
    assert client.reads == 0


def test_a_gate_that_moved_since_the_watch_saw_it_is_removed_after_a_fresh_read() -> None:
    api = MemoryApi()
    uid = gated_pod(api, ["other/gate", keys.SCHEDULING_GATE])["metadata"]["uid"]
    counted_writer, client = counting_writer(api)
    asyncio.run(counted_writer.ungate(NS, "leader", uid=uid, gate_at=0, workload=WORKLOAD))  # stale position
    assert gates_of(api) == ["other/gate"]
    assert client.reads == 1


def test_a_new_incarnation_of_the_pod_name_is_never_ungated_for_the_old_one() -> None:
    api = MemoryApi()
    gated_pod(api, [keys.SCHEDULING_GATE])
    counted_writer, _ = counting_writer(api)
    asyncio.run(counted_writer.ungate(NS, "leader", uid="uid-of-the-deleted-incarnation", gate_at=0, workload=WORKLOAD))
    assert gates_of(api) == [keys.SCHEDULING_GATE]
