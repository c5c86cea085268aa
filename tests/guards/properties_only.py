"""A pytest plugin for the guard runs (`runner.run_properties`): only the property tests of the suite run (those
Hypothesis drives: a state machine's `runTest` or a `@given` test), since a guard must matter to a property,
not only to a scripted example; their runs are reproducible (derandomized, no example database), so a guard
caught once stays caught until the code changes; and a failure is not shrunk, since only whether one exists
matters here."""

from __future__ import annotations

import pytest
from hypothesis import Phase, is_hypothesis_test, settings

settings.register_profile(
    "guards",
    derandomize=True,
    database=None,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.generate),
)
settings.load_profile("guards")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    examples = [item for item in items if not is_hypothesis_test(getattr(item, "obj", None))]
    if examples:
        config.hook.pytest_deselected(items=examples)
        items[:] = [item for item in items if item not in examples]
