from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys, models
from mnnvl_api.decisions import enrollment

DS_KEY = keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION
LWS_KEY = keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION
SLICE = enrollment.RoleScope.SLICE
REPLICA = enrollment.RoleScope.REPLICA
NONE = enrollment.RoleScope.NONE


def disaggregated_set(ds_annotations: dict[str, str], **role_annotations: dict[str, str]) -> models.DisaggregatedSet:
    roles: list[dict[str, Any]] = [
        {"name": name, "metadata": {"annotations": annotations}, "spec": {"replicas": 1}}
        for name, annotations in role_annotations.items()
    ]
    return models.DisaggregatedSet.model_validate(
        {"metadata": {"name": "llm-serving", "annotations": ds_annotations}, "spec": {"roles": roles}}
    )


@pytest.mark.parametrize(
    ("ds_annotations", "roles", "expected"),
    [
        pytest.param(
            {DS_KEY: "enabled"},
            {"prefill": {}, "decode": {}, "encoder": {DS_KEY: "disabled"}},
            {"prefill": SLICE, "decode": SLICE, "encoder": NONE},
            id="seed-example-encoder-opted-out",
        ),
        pytest.param(
            {},
            {"prefill": {LWS_KEY: "enabled"}, "decode": {LWS_KEY: "enabled"}},
            {"prefill": REPLICA, "decode": REPLICA},
            id="intra-role-mnnvl-per-replica",
        ),
        pytest.param(
            {DS_KEY: "enabled"},
            {"prefill": {}, "encoder": {DS_KEY: "disabled", LWS_KEY: "enabled"}},
            {"prefill": SLICE, "encoder": REPLICA},
            id="opted-out-role-with-its-own-replica-domains",
        ),
        pytest.param({DS_KEY: "disabled"}, {"a": {}, "b": {}}, {"a": NONE, "b": NONE}, id="ds-disabled"),
        pytest.param({}, {"a": {}, "b": {}}, {"a": NONE, "b": NONE}, id="nothing-set"),
        pytest.param({}, {"a": {DS_KEY: "enabled"}, "b": {}}, {"a": SLICE, "b": NONE}, id="role-enrolls-itself"),
    ],
)
def test_each_role_gets_one_scope(
    ds_annotations: dict[str, str], roles: dict[str, dict[str, str]], expected: dict[str, enrollment.RoleScope]
) -> None:
    result = enrollment.enroll_roles(disaggregated_set(ds_annotations, **roles))
    assert result.errors == []
    assert result.scopes == expected


def test_a_role_in_the_slice_domain_that_asks_for_replica_domains_is_a_conflict_with_the_fix() -> None:
    result = enrollment.enroll_roles(disaggregated_set({DS_KEY: "enabled"}, prefill={}, decode={LWS_KEY: "enabled"}))
    assert result.scopes == {"prefill": SLICE, "decode": NONE}
    assert [str(error) for error in result.errors] == [
        "spec.roles[1].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: "
        'Invalid value: "enabled": '
        'role "decode" is already enrolled in the slice ComputeDomain by the DisaggregatedSet\'s '
        "disaggregatedset.x-k8s.io/auto-compute-domain, and a pod can join only one ComputeDomain; set "
        'disaggregatedset.x-k8s.io/auto-compute-domain: "disabled" on this role to give it per-replica '
        "ComputeDomains, or remove this annotation to keep it in the slice ComputeDomain"
    ]


def test_invalid_values_are_reported_per_role_and_on_the_set() -> None:
    result = enrollment.enroll_roles(disaggregated_set({DS_KEY: "true"}, prefill={LWS_KEY: "Enabled"}, decode={}))
    assert [error.path for error in result.errors] == [
        "metadata.annotations[disaggregatedset.x-k8s.io/auto-compute-domain]",
        "spec.roles[0].metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]",
    ]
    assert result.slice_roles == []


def test_slice_roles_lists_enrolled_roles_in_spec_order() -> None:
    result = enrollment.enroll_roles(
        disaggregated_set({DS_KEY: "enabled"}, prefill={}, decode={}, encoder={DS_KEY: "disabled"})
    )
    assert result.slice_roles == ["prefill", "decode"]
