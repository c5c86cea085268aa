"""A pytest plugin for `tox -e unit`: the property tests of the safety suite (`tests/unit/safety`, those Hypothesis
drives) are deselected there, because `tox -e guards` runs exactly them, with the same derandomized examples, as its
first check (`test_the_property_suite_passes_on_the_unmutated_copy`) before removing any guard; running them twice
cost `./dev test` about four minutes. Their example tests, and every property test elsewhere, still run in `unit`.
To run the safety properties alone: `pytest tests/unit/safety`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import is_hypothesis_test

SAFETY_SUITE = Path(__file__).resolve().parents[1] / "unit" / "safety"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    properties = [
        item
        for item in items
        if item.path.is_relative_to(SAFETY_SUITE) and is_hypothesis_test(getattr(item, "obj", None))
    ]
    if properties:
        config.hook.pytest_deselected(items=properties)
        items[:] = [item for item in items if item not in properties]
