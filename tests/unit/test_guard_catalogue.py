"""The guard catalogue (`tests/guards/catalogue.py`) is well formed, and the guard runner judges runs as it says:
fast checks, without running the property suite (`tox -e guards` does that)."""

from __future__ import annotations

import ast
import re

import pytest

from tests.guards import runner
from tests.guards.catalogue import GUARDS, PROPERTY_SUITE, Guard

KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


def test_guard_names_are_unique_and_kebab_case() -> None:
    names = [guard.name for guard in GUARDS]
    assert [name for name in names if not KEBAB.fullmatch(name)] == []
    assert sorted({name for name in names if names.count(name) > 1}) == []


@pytest.mark.parametrize("guard", GUARDS, ids=[guard.name for guard in GUARDS])
def test_each_mutation_applies_exactly_once_and_leaves_valid_python(guard: Guard) -> None:
    assert guard.keeps.strip(), "say in a few words which promise the guard keeps"
    text = (runner.REPOSITORY / guard.path).read_text()
    changed = runner.mutated(text, guard)  # raises unless `find` occurs exactly once and `replace` differs
    assert changed != text
    if guard.path.endswith(".py"):
        ast.parse(changed, filename=guard.path)


@pytest.mark.parametrize("guard", GUARDS, ids=[guard.name for guard in GUARDS])
def test_each_guard_names_property_tests_of_the_suite(guard: Guard) -> None:
    assert guard.suite, "name the property tests that must catch the removal"
    for test in guard.suite:
        path = test.partition("::")[0]
        assert path.startswith(PROPERTY_SUITE), f"{test} is not in the property suite {PROPERTY_SUITE}"
        assert (runner.REPOSITORY / path).exists(), f"{path} does not exist"


def test_a_mutation_whose_text_is_not_there_exactly_once_is_refused() -> None:
    guard = Guard(name="twice", keeps="nothing", path="x.py", find="a = 1", replace="a = 2")
    with pytest.raises(runner.MutationError, match=r"guard twice: `find` occurs 2 times in x\.py"):
        runner.mutated("a = 1\na = 1\n", guard)
    with pytest.raises(runner.MutationError, match="occurs 0 times"):
        runner.mutated("b = 1\n", guard)
    same = Guard(name="same", keeps="nothing", path="x.py", find="a = 1", replace="a = 1")
    with pytest.raises(runner.MutationError, match="changes nothing"):
        runner.mutated("a = 1\n", same)


def _report(*cases: str) -> str:
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


def _failed(raised: str, *, name: str = "runTest") -> str:
    """A failed test case as junit reports it, with the exceptions `properties_only` records."""
    return (
        f'<testcase classname="tests.unit.safety.test_x.test_props" name="{name}">'
        f'<properties><property name="exception" value="{raised}"/></properties>'
        '<failure message="assert False">trace</failure></testcase>'
    )


PASSED = '<testcase classname="tests.unit.safety.test_x.test_props" name="runTest"/>'
ERROR = '<testcase classname="t" name=""><error message="collection failure">t</error></testcase>'


def test_an_assertion_failure_catches_the_mutation() -> None:
    verdict = runner.verdict_of(1, _report(PASSED, _failed("AssertionError")))
    assert verdict.outcome is runner.Outcome.CAUGHT
    assert verdict.caught_by == ("tests.unit.safety.test_x.test_props::runTest",)


def test_a_group_of_failures_with_an_assertion_among_them_catches_the_mutation() -> None:
    assert runner.verdict_of(1, _report(_failed("KeyError AssertionError"))).outcome is runner.Outcome.CAUGHT


def test_only_passing_property_tests_miss_the_mutation() -> None:
    assert runner.verdict_of(0, _report(PASSED, PASSED)).outcome is runner.Outcome.MISSED


@pytest.mark.parametrize(
    ("exit_code", "report"),
    [
        # a mutation that makes the code crash with another exception breaks the code, it does not remove a guard
        (1, _report(_failed("NameError"))),
        # a failure whose exception was not recorded cannot be judged
        (1, _report('<testcase classname="t" name="runTest"><failure message="assert False">t</failure></testcase>')),
        # a collection error (an ImportError, a SyntaxError) is an error, not a failure
        (2, _report(ERROR)),
        # an assertion failure does not count beside an error
        (1, _report(_failed("AssertionError"), ERROR)),
        (5, _report()),  # no property test collected
        (4, ""),  # pytest wrote no report (a usage error)
    ],
    ids=[
        "other-exception",
        "unrecorded-exception",
        "collection-error",
        "assertion-beside-an-error",
        "no-tests",
        "no-report",
    ],
)
def test_a_run_that_cannot_judge_the_guard_is_broken(exit_code: int, report: str) -> None:
    verdict = runner.verdict_of(exit_code, report)
    assert verdict.outcome is runner.Outcome.BROKEN
    assert verdict.problems
