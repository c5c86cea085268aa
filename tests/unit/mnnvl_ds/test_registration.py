"""The webhook configurations of mnnvl-ds: only objects that concern it reach its webhooks, which fail closed for
those; a plain DisaggregatedSet, or an LWS outside the slice scope, never waits for it.

The API server evaluates the CEL match conditions (the e2e tests prove what they let through); here: their
structure, and that they can never fail to evaluate on a well-formed object."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mnnvl_api import keys
from mnnvl_ds import scope, state

from ..mnnvl_runtime import cel

#: The variables the conditions read: the request's objects and the ones macros bind.
VARIABLES = ("object", "oldObject", "role", "claim", "key")


def client_config(path: str) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:8443{path}"}


def configurations() -> dict[str, dict[str, Any]]:
    return {
        configuration["metadata"]["name"]: configuration
        for configuration in scope.CONTROLLER.configurations(client_config)
    }


def webhooks_by_name() -> dict[str, dict[str, Any]]:
    return {
        webhook["name"]: webhook for configuration in configurations().values() for webhook in configuration["webhooks"]
    }


def test_mnnvl_ds_has_its_own_configurations_named_after_it() -> None:
    assert sorted(configurations()) == ["mnnvl-ds-mutating", "mnnvl-ds-validating"]
    assert sorted(webhooks_by_name()) == [
        "mutate-disaggregatedset.mnnvl-ds.mnnvl.dev",
        "mutate-pod.mnnvl-ds.mnnvl.dev",
        "validate-computedomain.mnnvl-ds.mnnvl.dev",
        "validate-disaggregatedset.mnnvl-ds.mnnvl.dev",
        "validate-leaderworkerset.mnnvl-ds.mnnvl.dev",
    ]


def test_every_webhook_path_is_a_handler_of_this_controller() -> None:
    handlers = {handler.id for handler in state.registry._webhooks.get_all_handlers()}
    for webhook in webhooks_by_name().values():
        assert webhook["clientConfig"]["url"].rpartition("/")[2] in handlers


@pytest.mark.parametrize(
    "name", ["mutate-disaggregatedset.mnnvl-ds.mnnvl.dev", "validate-disaggregatedset.mnnvl-ds.mnnvl.dev"]
)
def test_the_disaggregatedset_webhooks_fail_closed_only_for_sets_that_concern_us(name: str) -> None:
    webhook = webhooks_by_name()[name]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["matchConditions"] == [
        {
            "name": "concerns-auto-compute-domain",
            "expression": (
                f"({scope.concerns_auto_compute_domain('object')}) || "
                f"({scope.concerns_auto_compute_domain('oldObject')})"
            ),
        }
    ]
    assert webhook["rules"] == [
        {
            "apiGroups": [keys.DS_GROUP],
            "apiVersions": [keys.DS_VERSION],
            "operations": ["CREATE", "UPDATE"],
            "resources": [keys.DS_PLURAL],
        }
    ]


def test_the_leaderworkerset_webhook_sees_only_slice_scope_leaderworkersets_of_sets() -> None:
    webhook = webhooks_by_name()["validate-leaderworkerset.mnnvl-ds.mnnvl.dev"]
    assert webhook["failurePolicy"] == "Fail"
    [condition] = webhook["matchConditions"]
    assert condition == {"name": "slice-scope-leaderworkerset", "expression": scope.slice_scope_child("object")}
    assert f'"{keys.DS_NAME_LABEL}" in object.metadata.labels' in condition["expression"]
    for field in ("leaderTemplate", "workerTemplate"):
        labels = f"object.spec.leaderWorkerTemplate.{field}.metadata.labels"
        assert f'{labels}["{keys.SCOPE_LABEL}"] == "{keys.SCOPE_SLICE}"' in condition["expression"]


def test_the_pod_webhook_selects_slice_scope_pods_by_label() -> None:
    webhook = webhooks_by_name()["mutate-pod.mnnvl-ds.mnnvl.dev"]
    assert webhook["objectSelector"] == {"matchLabels": {keys.SCOPE_LABEL: keys.SCOPE_SLICE}}
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert "matchConditions" not in webhook


def test_the_set_condition_looks_at_the_object_and_on_update_at_the_old_object() -> None:
    [condition] = webhooks_by_name()["validate-disaggregatedset.mnnvl-ds.mnnvl.dev"]["matchConditions"]
    assert condition["expression"] == (
        f"({scope.concerns_auto_compute_domain('object')}) || ({scope.concerns_auto_compute_domain('oldObject')})"
    )


def test_the_set_condition_matches_the_opt_ins_on_the_set_and_its_roles_and_our_template_marks() -> None:
    condition = scope.concerns_auto_compute_domain("object")
    assert f'"{keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION}" in object.metadata.annotations' in condition
    for key in (keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION):
        assert f'"{key}" in role.metadata.annotations' in condition
    for field in ("leaderTemplate", "workerTemplate"):
        template = f"role.spec.leaderWorkerTemplate.{field}"
        assert f'{template}.metadata.labels.exists(key, key.startsWith("{keys.TEMPLATE_KEY_PREFIX}"))' in condition
        assert f'claim.name == "{keys.CHANNEL_CLAIM_NAME}"' in condition


def all_conditions() -> list[str]:
    return [
        scope.concerns_auto_compute_domain("object"),
        scope.concerns_auto_compute_domain("oldObject"),
        scope.slice_scope_child("object"),
    ]


@pytest.mark.parametrize("condition", all_conditions(), ids=["set-object", "set-old-object", "child"])
def test_every_field_a_condition_reads_is_first_tested_with_has(condition: str) -> None:
    """A field read without has() errors when absent, and an erroring condition rejects the request."""
    assert cel.unguarded_reads(condition, VARIABLES) == []


@pytest.mark.parametrize("condition", all_conditions(), ids=["set-object", "set-old-object", "child"])
def test_a_condition_first_tests_that_its_object_is_there(condition: str) -> None:
    """`oldObject` is null on CREATE."""
    assert re.match(r"(object|oldObject) != null && ", condition)
