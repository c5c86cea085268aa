"""ComputeDomains for tests, as facts and as the API returns them: by default those mnnvl-lws made for the groups of
LeaderWorkerSet deepseek-r1 in namespace serving (the API's decisions name no scope; the scopes' tests use them)."""

from __future__ import annotations

from typing import Any

from mnnvl_api import keys, names
from mnnvl_api.decisions import domains, plans

UID = "6f1c1e0a-0000-4000-8000-000000000001"


def domain(
    name: str,
    *,
    owner_uid: str | None = UID,
    manager: str | None = keys.LWS_CONTROLLER,
    deleting: bool = False,
    protected: bool = True,
    workload_name: str | None = "deepseek-r1",
    condemned: bool = False,
    created_by: str | None = "manager",
) -> domains.DomainFacts:
    """A domain's facts; by default created by `manager` (the API server records it as the labels' owner)."""
    if manager == keys.LWS_CONTROLLER and owner_uid is None:
        raise ValueError("a domain mnnvl-lws manages always carries the owner-uid label")
    return domains.DomainFacts(
        uid=f"uid-{name}",
        resource_version="7",
        group=name.split("-")[-2] if manager and name.count("-") >= 1 else None,
        condemned=condemned,
        created_by=manager if created_by == "manager" else created_by,
        name=name,
        namespace="serving",
        owner_uid=owner_uid,
        managed_by=manager,
        workload=workload_name,
        claim_template=names.claim_template_name(name),
        deleting=deleting,
        protected=protected,
    )


def managed_fields(manager: str, *labels: str) -> list[dict[str, Any]]:
    """`metadata.managedFields` saying that `manager` set `labels` (as the API server records a create)."""
    owned: dict[str, dict[str, Any]] = {f"f:{label}": {} for label in labels}
    return [{"manager": manager, "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": owned}}}]


def domain_object(name: str, *, group: int = 0, uid: str | None = None, version: str = "7") -> dict[str, Any]:
    """A ComputeDomain as the API returns one that mnnvl-lws created for group `group` of deepseek-r1."""
    workload = plans.WorkloadFacts(namespace="serving", name="deepseek-r1", uid=UID)
    position = {keys.GROUP_INDEX_LABEL: str(group)}
    labels = plans.domain_labels(workload, manager=keys.LWS_CONTROLLER, scope=keys.SCOPE_REPLICA, position=position)
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "uid": uid or f"uid-{name}",
            "resourceVersion": version,
            "labels": labels,
            "finalizers": [keys.PROTECTION_FINALIZER],
            "managedFields": managed_fields(keys.LWS_CONTROLLER, *labels),
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": names.claim_template_name(name)}}},
    }
