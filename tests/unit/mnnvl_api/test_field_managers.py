"""Only a field manager's own process may write a ComputeDomain as that field manager."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import domains, field_managers

MANAGER = keys.LWS_CONTROLLER
OURS = "system:serviceaccount:mnnvl-system:mnnvl-lws"
SOMEONE = "system:serviceaccount:serving:deployer"
IDENTITY: dict[str, Any] = {f"f:{label}": {} for label in domains.IDENTITY_LABELS}


def entry(manager: str, fields: dict[str, Any], time: str = "2026-12-01T10:00:00Z") -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "time": time,
        "fieldsV1": {"f:metadata": {"f:labels": fields}},
    }


def meta(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"name": "deepseek-r1-0-x7k2b", "managedFields": list(entries)}


CREATED = meta(entry(MANAGER, IDENTITY))


def refusal(requester: str, new: dict[str, Any], old: dict[str, Any] | None) -> str | None:
    return field_managers.impersonation_refusal(MANAGER, requester=requester, own_user=OURS, meta=new, old_meta=old)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        pytest.param(CREATED, None, id="creating-a-domain-as-our-manager"),
        pytest.param(
            meta(entry(MANAGER, IDENTITY, time="2026-12-01T11:00:00Z")), CREATED, id="changing-our-labels-as-us"
        ),
        pytest.param(meta(entry(MANAGER, {**IDENTITY, "f:extra": {}})), CREATED, id="taking-a-field-under-our-name"),
        pytest.param(meta(entry(MANAGER, IDENTITY)), meta(entry("kubectl", IDENTITY)), id="relabelling-as-us"),
    ],
)
def test_a_write_as_our_field_manager_by_anyone_else_is_refused(
    new: dict[str, Any], old: dict[str, Any] | None
) -> None:
    found = refusal(SOMEONE, new, old)
    assert found is not None
    assert found.startswith(
        f'metadata.managedFields: Forbidden: only mnnvl-lws (user "{OURS}") may write a ComputeDomain as field manager '
        f'"mnnvl-lws", not user "{SOMEONE}"; use another field manager'
    )
    assert refusal(OURS, new, old) is None  # the controller itself may


@pytest.mark.parametrize(
    ("new", "old"),
    [
        pytest.param(meta(entry("kubectl", IDENTITY)), None, id="creating-a-domain-as-someone-else"),
        pytest.param(
            meta(entry(MANAGER, IDENTITY), entry("nvidia-dra-driver", {"f:other": {}})),
            CREATED,
            id="another-manager-adding-its-own-fields",
        ),
        pytest.param(
            meta(
                entry(MANAGER, {"f:" + keys.OWNER_UID_LABEL: {}}), entry("kubectl", {"f:" + keys.MANAGED_BY_LABEL: {}})
            ),
            CREATED,
            id="another-manager-taking-one-of-our-fields",
        ),
    ],
)
def test_writes_that_are_not_as_our_field_manager_are_not_ours_to_refuse(
    new: dict[str, Any], old: dict[str, Any] | None
) -> None:
    """Another writer takes what it writes; a domain relabelled that way is no longer ours (`identity_owner`)."""
    assert refusal(SOMEONE, new, old) is None


def test_an_unchanged_object_was_not_written_as_anyone() -> None:
    assert not field_managers.wrote_as(MANAGER, CREATED, copy.deepcopy(CREATED))
