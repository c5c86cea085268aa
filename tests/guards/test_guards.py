"""`tox -e guards`: every guard of the catalogue matters to a property test.

Each guard is removed in a scratch copy of the repository and the property suite (`tests/unit/safety`) must
fail an assertion on it; a guard whose removal no property test notices fails here as a finding. The suite
must pass on the unmutated copy, and the copy must be what the suite imports, or no verdict means anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import runner
from .catalogue import GUARDS, Guard


def _explained(verdict: runner.Verdict) -> str:
    return "\n".join([*verdict.problems, "--- pytest output (tail) ---", verdict.output])


def test_the_property_suite_passes_on_the_unmutated_copy(tmp_path: Path) -> None:
    verdict = runner.run_properties(runner.scratch_copy(tmp_path))
    assert verdict.outcome is runner.Outcome.MISSED, _explained(verdict)


def test_the_suite_imports_the_mutated_copy(tmp_path: Path) -> None:
    """A canary mutation that breaks an import of the copy's `mnnvl_runtime` must break the run: the suite does not
    fall back on the editable installs of the repository itself."""
    root = runner.scratch_copy(tmp_path)
    module = root / "packages/mnnvl-runtime/src/mnnvl_runtime/domain_writer.py"
    module.write_text(module.read_text() + '\nraise ImportError("guards canary")\n')
    verdict = runner.run_properties(root)
    assert verdict.outcome is runner.Outcome.BROKEN
    assert "guards canary" in verdict.output, _explained(verdict)


@pytest.mark.parametrize("guard", GUARDS, ids=[guard.name for guard in GUARDS])
def test_removing_the_guard_fails_a_property_test(guard: Guard, tmp_path: Path) -> None:
    root = runner.scratch_copy(tmp_path)
    runner.apply(guard, root)
    verdict = runner.run_properties(root, suite=guard.suite)
    if verdict.outcome is runner.Outcome.MISSED:
        pytest.fail(f"finding: no property test notices the removal of {guard.name} ({guard.keeps})", pytrace=False)
    assert verdict.outcome is runner.Outcome.CAUGHT, f"{guard.name}: the run could not judge the guard\n" + _explained(
        verdict
    )
