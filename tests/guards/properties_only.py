"""A pytest plugin for the guard runs (`runner.run_properties`): only the property tests of the suite run (those
Hypothesis drives: a state machine's `runTest` or a `@given` test), since a guard must matter to a property, not
only to a scripted example (the mixed-version models aside: `catalogue.MIXED_VERSIONS`); their runs are reproducible
(derandomized, no example database), so a guard caught once stays caught until the code changes; and a failure is
not shrunk, since only whether one exists matters here. Each failure records the exceptions it raised (`exception`,
a junit property), from which the runner tells a failed invariant (an AssertionError) from a crash."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import Phase, is_hypothesis_test, settings

from . import catalogue

#: Not run here, but in `unit` (`catalogue.MIXED_VERSIONS`).
MIXED_VERSIONS = Path(__file__).resolve().parents[2] / catalogue.MIXED_VERSIONS

settings.register_profile(
    "guards",
    derandomize=True,
    database=None,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.generate),
)
settings.load_profile("guards")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    examples = [
        item
        for item in items
        if not is_hypothesis_test(getattr(item, "obj", None)) or item.path.is_relative_to(MIXED_VERSIONS)
    ]
    if examples:
        config.hook.pytest_deselected(items=examples)
        items[:] = [item for item in items if item not in examples]


def raised(error: BaseException) -> list[str]:
    """The names of the exceptions `error` stands for: itself, or the leaves of an exception group."""
    if isinstance(error, BaseExceptionGroup):
        return [name for inner in error.exceptions for name in raised(inner)]
    return [type(error).__name__]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if call.excinfo is not None:
        # on the item: junit writes the properties of the teardown report, which copies the item's
        item.user_properties.append(("exception", " ".join(raised(call.excinfo.value))))
    return report
