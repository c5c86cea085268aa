"""Identity of managed domains (from what the API server records), readiness and admission refusals."""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import domains

from . import domain_builders

LABELS = (keys.OWNER_UID_LABEL, keys.MANAGED_BY_LABEL)


def with_fields(entries: list[dict[str, Any]]) -> dict[str, Any]:
    body = domain_builders.domain_object("deepseek-r1-0-bbbbb")
    body["metadata"]["managedFields"] = entries
    return body


@pytest.mark.parametrize(
    ("entries", "owner"),
    [
        pytest.param(
            domain_builders.managed_fields(keys.LWS_CONTROLLER, *LABELS), keys.LWS_CONTROLLER, id="created-by-us"
        ),
        pytest.param(
            [
                *domain_builders.managed_fields(keys.LWS_CONTROLLER, *LABELS),
                {"manager": keys.GUARDIAN_CONTROLLER, "fieldsV1": {"f:metadata": {"f:finalizers": {}}}},
            ],
            keys.LWS_CONTROLLER,
            id="finalizer-added-by-the-guardian",
        ),
        pytest.param([], None, id="no-managed-fields"),
        pytest.param(
            domain_builders.managed_fields("kubectl-label", *LABELS), "kubectl-label", id="labelled-by-someone-else"
        ),
        pytest.param(
            domain_builders.managed_fields(keys.LWS_CONTROLLER, keys.OWNER_UID_LABEL)
            + domain_builders.managed_fields("kubectl-label", keys.MANAGED_BY_LABEL),
            None,
            id="one-label-changed-by-someone-else",
        ),
        pytest.param(
            domain_builders.managed_fields(keys.LWS_CONTROLLER, *LABELS)
            + domain_builders.managed_fields("helm", *LABELS),
            None,
            id="co-owned",
        ),
    ],
)
def test_a_domain_is_ours_only_when_the_api_server_records_us_alone_as_its_labels_owner(
    entries: list[dict[str, Any]], owner: str | None
) -> None:
    facts = domains.facts_of(with_fields(entries))
    assert facts.created_by == owner
    assert facts.managed is (owner == keys.LWS_CONTROLLER)


def test_a_condemned_domain_is_not_ready_and_admits_no_pod() -> None:
    body = domain_builders.domain_object("deepseek-r1-0-bbbbb")
    body["metadata"]["annotations"] = {keys.CONDEMNED_ANNOTATION: keys.LWS_CONTROLLER}
    facts = domains.facts_of(body)
    assert facts.condemned
    assert not domains.is_ready(facts, owner_uid=domain_builders.UID, manager=keys.LWS_CONTROLLER, template_exists=True)
    assert domains.admission_refusal(facts) == "ComputeDomain deepseek-r1-0-bbbbb is about to be deleted"


def test_a_deleting_domain_admits_no_pod_and_a_missing_one_does() -> None:
    body = domain_builders.domain_object("deepseek-r1-0-bbbbb")
    body["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert domains.admission_refusal(domains.facts_of(body)) == "ComputeDomain deepseek-r1-0-bbbbb is being deleted"
    assert domains.admission_refusal(None) is None
    assert domains.admission_refusal(domains.facts_of(domain_builders.domain_object("deepseek-r1-0-bbbbb"))) is None


def test_a_domain_is_ready_once_ours_alive_and_its_template_exists() -> None:
    facts = domains.facts_of(domain_builders.domain_object("deepseek-r1-0-bbbbb"))
    assert domains.is_ready(facts, owner_uid=domain_builders.UID, manager=keys.LWS_CONTROLLER, template_exists=True)
    assert not domains.is_ready(
        facts, owner_uid=domain_builders.UID, manager=keys.LWS_CONTROLLER, template_exists=False
    )
    assert not domains.is_ready(facts, owner_uid="other", manager=keys.LWS_CONTROLLER, template_exists=True)
