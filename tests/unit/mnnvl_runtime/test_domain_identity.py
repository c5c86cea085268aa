"""The scope controllers' ComputeDomain identity webhook: registered for their own domains only, it refuses a
write as their field manager by any other user (the decision itself: tests/unit/mnnvl_api/test_field_managers.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from mnnvl_api import keys
from mnnvl_runtime import admission, webhooks

from .memory_api import MemoryApi, MemoryClient

OURS = "system:serviceaccount:mnnvl-system:mnnvl-lws"
AS_US = {
    "name": "deepseek-r1-0-x7k2b",
    "managedFields": [
        {
            "manager": keys.LWS_CONTROLLER,
            "operation": "Update",
            "time": "2026-12-01T10:00:00Z",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{keys.MANAGED_BY_LABEL}": {}}}},
        }
    ],
}


class Reviews(MemoryClient):
    """Answers SelfSubjectReviews as the API server does, naming `user`; counts them."""

    def __init__(self, user: str) -> None:
        super().__init__(MemoryApi(), keys.LWS_CONTROLLER, sender="")
        self.user = user
        self.asked = 0

    async def arequest(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews")
        self.asked += 1
        return {"status": {"userInfo": {"username": self.user, "groups": ["system:authenticated"]}}}


def check(client: Reviews, own: admission.OwnUser, requester: str, *, old: dict[str, Any] | None = None) -> None:
    asyncio.run(
        admission.refuse_impersonation(
            keys.LWS_CONTROLLER,
            client,
            own,
            operation="CREATE" if old is None else "UPDATE",
            requester=requester,
            body={"metadata": AS_US},
            old=old,
        )
    )


def test_a_write_as_our_field_manager_by_another_user_is_refused_and_ours_is_not() -> None:
    client, own = Reviews(OURS), admission.OwnUser()
    with pytest.raises(kopf.AdmissionError, match='not user "mallory"') as refused:
        check(client, own, "mallory")
    assert refused.value.code == 403
    check(client, own, OURS)
    assert client.asked == 1  # asked once, then known


def test_a_write_that_is_not_as_our_field_manager_never_asks_who_we_are() -> None:
    client = Reviews(OURS)
    check(client, admission.OwnUser(), "mallory", old={"metadata": AS_US})
    assert client.asked == 0


@pytest.mark.parametrize(
    ("controller", "scope"), [(keys.LWS_CONTROLLER, keys.SCOPE_REPLICA), (keys.DS_CONTROLLER, keys.SCOPE_SLICE)]
)
def test_each_scope_controller_guards_its_own_domains_only(controller: str, scope: str) -> None:
    """What `webhooks.scope_configurations` (every scope controller's registration) registers for domains."""
    configurations = webhooks.scope_configurations(
        controller, lambda path: {"path": path}, scope=scope, mutating=[], validating=[]
    )
    [validating] = [c for c in configurations if c["kind"] == "ValidatingWebhookConfiguration"]
    [webhook] = [w for w in validating["webhooks"] if w["name"].startswith(webhooks.DOMAIN_IDENTITY_WEBHOOK)]
    assert webhook["objectSelector"] == {"matchLabels": {keys.MANAGED_BY_LABEL: controller}}
    assert webhook["rules"] == [webhooks.DOMAIN_WRITE_RULE]
    assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert webhook["clientConfig"] == {"path": f"/{webhooks.DOMAIN_IDENTITY_WEBHOOK}"}


def test_only_writes_that_change_the_controllers_managed_fields_reach_its_identity_webhook() -> None:
    """The driver's and the guardian's writes to a domain labelled ours (finalizers, status-like fields) change
    none of the controller's managedFields entries, so they never wait on the controller's webhook."""
    webhook = webhooks.domain_identity_entry(keys.LWS_CONTROLLER, lambda path: {"path": path})
    [condition] = webhook["matchConditions"]
    assert condition["name"] == f"writes-as-{keys.LWS_CONTROLLER}"
    entries = webhooks.cel_manager_entries("object", keys.LWS_CONTROLLER)
    assert condition["expression"].startswith(f"{entries} != (oldObject == null ? [] : ")
    assert f'e.manager == "{keys.LWS_CONTROLLER}"' in entries
