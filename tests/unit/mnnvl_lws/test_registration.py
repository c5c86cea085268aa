"""The webhook configurations of mnnvl-lws: LeaderWorkerSets reach its webhooks only when they concern it.

The API server evaluates the CEL match condition; the e2e tests (e2e/test_availability.py) prove what it
lets through. Here: its structure, and that it can never fail to evaluate on a well-formed object.
"""

from __future__ import annotations

from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_lws import scope
from mnnvl_runtime import webhooks

from ..mnnvl_runtime import cel


def client_config(path: str) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:8443{path}"}


def webhooks_by_name() -> dict[str, dict[str, Any]]:
    return {
        webhook["name"]: webhook
        for configuration in scope.CONTROLLER.configurations(client_config)
        for webhook in configuration["webhooks"]
    }


LWS_WEBHOOKS = ("mutate-leaderworkerset.mnnvl-lws.mnnvl.dev", "validate-leaderworkerset.mnnvl-lws.mnnvl.dev")


@pytest.mark.parametrize("name", LWS_WEBHOOKS)
def test_the_leaderworkerset_webhooks_fail_closed_only_for_leaderworkersets_that_concern_us(name: str) -> None:
    webhook = webhooks_by_name()[name]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["matchConditions"] == webhooks_by_name()[LWS_WEBHOOKS[0]]["matchConditions"]
    assert webhook["rules"] == [
        {
            "apiGroups": [keys.LWS_GROUP],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["leaderworkersets"],
        }
    ]
    assert "objectSelector" not in webhook


def test_the_pod_webhook_selects_replica_scope_pods_by_label_and_needs_no_condition() -> None:
    webhook = webhooks_by_name()["mutate-pod.mnnvl-lws.mnnvl.dev"]
    assert webhook["objectSelector"] == {"matchLabels": {keys.SCOPE_LABEL: keys.SCOPE_REPLICA}}
    assert "matchConditions" not in webhook


def test_the_condition_looks_at_the_object_and_on_update_at_the_old_object() -> None:
    object_condition = scope.concerns_auto_compute_domain("object")
    old_object_condition = scope.concerns_auto_compute_domain("oldObject")
    [condition] = webhooks_by_name()[LWS_WEBHOOKS[0]]["matchConditions"]
    assert condition == {
        "name": "concerns-auto-compute-domain",
        "expression": f"({object_condition}) || ({old_object_condition})",
    }
    for variable in ("object", "oldObject"):
        assert scope.concerns_auto_compute_domain(variable).startswith(f"{variable} != null && (")


def test_the_condition_matches_the_opt_in_annotation_our_template_keys_and_the_channel_claim() -> None:
    condition = scope.concerns_auto_compute_domain("object")
    assert f'"{keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION}" in object.metadata.annotations' in condition
    for field in ("leaderTemplate", "workerTemplate"):
        template = f"object.spec.leaderWorkerTemplate.{field}"
        for kind in ("annotations", "labels"):
            assert f'{template}.metadata.{kind}.exists(key, key.startsWith("{keys.TEMPLATE_KEY_PREFIX}"))' in condition
        assert (
            f'{template}.spec.resourceClaims.exists(claim, has(claim.name) && claim.name == "{keys.CHANNEL_CLAIM_NAME}")'
            in condition
        )


def test_every_field_the_condition_reads_is_first_tested_with_has() -> None:
    """A field read without has() errors when absent, and an erroring condition rejects the request."""
    for variable in ("object", "oldObject"):
        condition = scope.concerns_auto_compute_domain(variable)
        assert cel.unguarded_reads(condition, (variable,)) == []


@pytest.mark.parametrize(
    "key",
    [
        keys.COMPUTE_DOMAIN_PREFIX_ANNOTATION,
        keys.COMPUTE_DOMAIN_NAME_ANNOTATION,
        keys.COMPUTE_DOMAIN_CONTAINERS_ANNOTATION,
        keys.SCOPE_LABEL,
    ],
)
def test_every_template_key_of_ours_starts_with_the_matched_prefix(key: str) -> None:
    assert key.startswith(keys.TEMPLATE_KEY_PREFIX)


@pytest.mark.parametrize(
    "key",
    [keys.LWS_NAME_LABEL, keys.LWS_GROUP_INDEX_LABEL, keys.LWS_WORKER_INDEX_LABEL, keys.LWS_LEADER_NAME_ANNOTATION],
)
def test_upstream_template_keys_do_not_match_the_prefix(key: str) -> None:
    assert not key.startswith(keys.TEMPLATE_KEY_PREFIX)


def test_a_webhook_without_match_conditions_has_none() -> None:
    webhook = webhooks.entry("mnnvl-x", "validate-thing", {}, client_config)
    assert "matchConditions" not in webhook


@pytest.mark.parametrize(
    ("root", "fields", "expected"),
    [
        pytest.param("o", ("a",), "has(o.a)", id="one"),
        pytest.param("o", ("a", "b", "c"), "has(o.a) && has(o.a.b) && has(o.a.b.c)", id="path"),
    ],
)
def test_cel_has_tests_every_step_of_the_path(root: str, fields: tuple[str, ...], expected: str) -> None:
    assert webhooks.cel_has(root, *fields) == expected


def test_cel_strings_escape_quotes_and_backslashes() -> None:
    assert webhooks.cel_string('a"b\\c') == r'"a\"b\\c"'
