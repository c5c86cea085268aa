"""A pytest plugin for `tox -e unit`: the property tests of the safety suite (`tests/unit/safety`, those Hypothesis
drives) are deselected there, because `tox -e guards` runs every one of them on an unmutated copy as its first check
(`test_the_property_suite_passes_on_the_unmutated_copy`) before removing any guard; running them in both cost
`./dev test` about four minutes. The guards run them derandomized and unshrunk (`properties_only.py`): a failure
there shows an unshrunk example, so to investigate one run `pytest tests/unit/safety`, which runs them all with
shrinking. Their example tests, every property test outside the safety suite, and the mixed-version models (which
the guard runs leave out: `catalogue.MIXED_VERSIONS`) still run in `unit`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import is_hypothesis_test

from .catalogue import MIXED_VERSIONS as MIXED_VERSIONS_FILE
from .catalogue import PROPERTY_SUITE

SAFETY_SUITE = Path(__file__).resolve().parents[2] / PROPERTY_SUITE
MIXED_VERSIONS = Path(__file__).resolve().parents[2] / MIXED_VERSIONS_FILE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    properties = [
        item
        for item in items
        if item.path.is_relative_to(SAFETY_SUITE)
        and not item.path.is_relative_to(MIXED_VERSIONS)
        and is_hypothesis_test(getattr(item, "obj", None))
    ]
    if properties:
        config.hook.pytest_deselected(items=properties)
        items[:] = [item for item in items if item not in properties]
