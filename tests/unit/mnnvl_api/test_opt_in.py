from __future__ import annotations

import pytest

from mnnvl_api import errors, keys
from mnnvl_api.decisions import opt_in

LWS_KEY = keys.LWS_AUTO_COMPUTE_DOMAIN_ANNOTATION


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({LWS_KEY: "enabled"}, opt_in.OptIn.ENABLED, id="enabled"),
        pytest.param({LWS_KEY: "disabled"}, opt_in.OptIn.DISABLED, id="disabled"),
        pytest.param({}, None, id="unset"),
        pytest.param({keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "enabled"}, None, id="other-key-ignored"),
    ],
)
def test_valid_values_are_read_exactly(annotations: dict[str, str], expected: opt_in.OptIn | None) -> None:
    assert opt_in.read_opt_in(annotations, LWS_KEY) is expected


@pytest.mark.parametrize("value", ["true", "Enabled", " enabled", "enabled ", "", "yes", "ENABLED", "on"])
def test_anything_else_is_an_error_naming_key_value_and_choices(value: str) -> None:
    result = opt_in.read_opt_in({LWS_KEY: value}, LWS_KEY)
    assert isinstance(result, errors.FieldError)
    quoted = '"' + value + '"'
    assert str(result) == (
        f"metadata.annotations[leaderworkerset.sigs.k8s.io/auto-compute-domain]: Unsupported value: {quoted}: "
        'supported values: "enabled", "disabled"; or remove the annotation'
    )


def test_errors_on_a_role_name_the_role_path() -> None:
    result = opt_in.read_opt_in(
        {keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION: "true"}, keys.DS_AUTO_COMPUTE_DOMAIN_ANNOTATION, path="spec.roles[2]"
    )
    assert isinstance(result, errors.FieldError)
    assert str(result).startswith(
        'spec.roles[2].metadata.annotations[disaggregatedset.x-k8s.io/auto-compute-domain]: Unsupported value: "true"'
    )


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({LWS_KEY: "enabled"}, True, id="enabled"),
        pytest.param({LWS_KEY: "disabled"}, False, id="disabled"),
        pytest.param({}, False, id="unset-same-as-disabled"),
        pytest.param({LWS_KEY: "true"}, False, id="invalid-is-not-opted-in"),
    ],
)
def test_only_enabled_opts_in(annotations: dict[str, str], expected: bool) -> None:
    assert opt_in.is_opted_in(annotations, LWS_KEY) is expected
