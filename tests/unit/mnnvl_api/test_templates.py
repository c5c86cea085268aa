"""Template stamps that never overwrite a user's value, and who controls an object by its ownerReferences."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from mnnvl_api import keys
from mnnvl_api.decisions import ownership, templates

SCOPES = (keys.SCOPE_SLICE, keys.SCOPE_REPLICA)
BASE = ("spec", "template", "metadata")


def stamped(template: dict[str, Any], value: str | None) -> dict[str, Any]:
    stamp = templates.Stamp(field="labels", key=keys.SCOPE_LABEL, value=value, ours=SCOPES)
    body = {"spec": {"template": template}}
    patch = templates.stamp_patch(template, BASE, (stamp,))
    result: dict[str, dict[str, dict[str, Any]]] = jsonpatch.apply_patch(body, patch)
    return result["spec"]["template"]


@pytest.mark.parametrize(
    ("template", "value", "expected"),
    [
        pytest.param({}, keys.SCOPE_SLICE, {"metadata": {"labels": {keys.SCOPE_LABEL: "slice"}}}, id="no-metadata"),
        pytest.param({}, None, {}, id="nothing-to-remove"),
        pytest.param(
            {"metadata": {"labels": {"app": "x"}}},
            keys.SCOPE_SLICE,
            {"metadata": {"labels": {"app": "x", keys.SCOPE_LABEL: "slice"}}},
            id="kept-user-labels",
        ),
        pytest.param(
            {"metadata": {"labels": {keys.SCOPE_LABEL: "slice"}}},
            keys.SCOPE_REPLICA,
            {"metadata": {"labels": {keys.SCOPE_LABEL: "replica"}}},
            id="one-of-ours-replaced",
        ),
        pytest.param(
            {"metadata": {"labels": {keys.SCOPE_LABEL: "slice"}}}, None, {"metadata": {"labels": {}}}, id="removed"
        ),
        pytest.param(
            {"metadata": {"labels": {keys.SCOPE_LABEL: "mine"}}},
            keys.SCOPE_SLICE,
            {"metadata": {"labels": {keys.SCOPE_LABEL: "mine"}}},
            id="a-users-value-left-for-validation",
        ),
    ],
)
def test_a_stamp_sets_or_removes_only_what_is_ours(
    template: dict[str, Any], value: str | None, expected: dict[str, Any]
) -> None:
    assert stamped(template, value) == expected


def owner(**changes: Any) -> dict[str, Any]:
    reference = {
        "apiVersion": keys.DS_API_VERSION,
        "kind": keys.DS_KIND,
        "name": "llm",
        "uid": "u1",
        "controller": True,
    }
    return {"labels": {keys.DS_NAME_LABEL: "llm"}, "ownerReferences": [{**reference, **changes}]}


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        pytest.param(owner(), True, id="controlled-by-the-named-set"),
        pytest.param(owner(name="other"), False, id="another-set-than-the-label-names"),
        pytest.param(owner(apiVersion="example.com/v1"), False, id="another-api-group"),
        pytest.param(owner(controller=False), False, id="not-the-controller"),
        pytest.param({**owner(), "labels": {}}, False, id="no-label"),
    ],
)
def test_only_the_controller_reference_the_label_names_counts(meta: dict[str, Any], expected: bool) -> None:
    assert ownership.controlled_by_disaggregated_set(meta) is expected
