"""Runs the property suite against a scratch copy of the repository with one guard removed.

The copy holds the working tree's files as git knows them (tracked and untracked-but-not-ignored, so uncommitted
work is measured too), and the suite runs in a subprocess with the same interpreter and `PYTHONPATH` on the
copy's `packages/*/src`, ahead of the editable installs, so the mutated code is what it imports (proven by
`test_guards.test_the_suite_imports_the_mutated_copy`).

Only an assertion failure of a property test (an invariant, or an assertion of the harness) counts as catching a
mutation: a collection error, an import or
syntax error, a crash with another exception, or a timeout says the mutation is broken, not the guard noticed.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from .catalogue import PROPERTY_SUITE, Guard

REPOSITORY = Path(__file__).resolve().parents[2]
#: The plugin that keeps only the suite's property (Hypothesis) tests and makes their runs reproducible.
PROPERTIES_ONLY = "tests.guards.properties_only"
#: Longest run of the suite on one mutation; a mutation that makes it hang is reported as such.
TIMEOUT_SECONDS = 900.0


class MutationError(ValueError):
    """The catalogue's mutation cannot be applied as written."""


def scratch_copy(into: Path, *, repository: Path = REPOSITORY) -> Path:
    """Copies the repository's files (as git lists them, from the working tree) into `into`; returns `into`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repository,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = repository / relative
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            target = into / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def mutated(text: str, guard: Guard) -> str:
    """`text` with the guard's `find` replaced; `find` must occur exactly once."""
    count = text.count(guard.find)
    if count != 1:
        raise MutationError(
            f"guard {guard.name}: `find` occurs {count} times in {guard.path} (must be exactly once); "
            "update the catalogue entry to the guard's current text"
        )
    if guard.replace == guard.find:
        raise MutationError(f"guard {guard.name}: `replace` equals `find`, the mutation changes nothing")
    return text.replace(guard.find, guard.replace)


def apply(guard: Guard, root: Path) -> None:
    """Removes the guard from the copy at `root`."""
    path = root / guard.path
    if not path.is_file():
        raise MutationError(f"guard {guard.name}: {guard.path} does not exist; update the catalogue entry")
    path.write_text(mutated(path.read_text(), guard))


class Outcome(enum.Enum):
    CAUGHT = "caught"  # a property test failed an assertion
    MISSED = "missed"  # every property test passed: no property test notices the guard's removal
    BROKEN = "broken"  # the run did not get to judge the guard (collection or import error, crash, no tests)
    TIMEOUT = "timeout"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    outcome: Outcome
    #: The tests that failed an assertion (node ids), and everything else that went wrong, one line each.
    caught_by: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    #: The tail of pytest's output, for the failure message.
    output: str = ""


def _raised(case: ElementTree.Element) -> list[str]:
    """The exceptions a test case raised, as `properties_only` records them."""
    return [
        name
        for found in case.iter("property")
        if found.get("name") == "exception"
        for name in (found.get("value") or "").split()
    ]


def verdict_of(exit_code: int, report: str, output: str = "") -> Verdict:
    """Judges one run from pytest's exit code and its junit xml `report` (empty: pytest wrote none)."""
    tail = "\n".join(output.splitlines()[-40:])
    if not report:
        return Verdict(outcome=Outcome.BROKEN, problems=(f"pytest exited {exit_code} without a report",), output=tail)
    caught: list[str] = []
    problems: list[str] = []
    ran = 0
    for case in ElementTree.fromstring(report).iter("testcase"):
        ran += 1
        node = f"{case.get('classname')}::{case.get('name')}"
        for error in case.iter("error"):
            problems.append(f"{node}: error: {error.get('message')}")
        for failure in case.iter("failure"):
            raised = _raised(case)
            if "AssertionError" in raised:
                caught.append(node)
            else:
                problems.append(
                    f"{node}: failed with {' '.join(raised) or 'an unrecorded exception'}: {failure.get('message')}"
                )
    if exit_code not in (0, 1):
        problems.append(f"pytest exited {exit_code} (0: passed, 1: tests failed)")
    if ran == 0:
        problems.append("no property test ran")
    if problems:
        return Verdict(outcome=Outcome.BROKEN, caught_by=tuple(caught), problems=tuple(problems), output=tail)
    outcome = Outcome.CAUGHT if caught else Outcome.MISSED
    return Verdict(outcome=outcome, caught_by=tuple(caught), output=tail)


def suite_environment(root: Path) -> dict[str, str]:
    """The environment of the suite's run on the copy at `root`: its packages and its root first on the path."""
    sources = sorted(str(src) for src in (root / "packages").glob("*/src"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*sources, str(root)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_properties(
    root: Path, *, suite: tuple[str, ...] = (PROPERTY_SUITE,), timeout: float = TIMEOUT_SECONDS
) -> Verdict:
    """Runs the property tests `suite` names (by default the whole property suite) of the copy at `root`, stopping
    at the first failure, and judges the run."""
    report = root / "guards-report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *suite,
        "-x",
        "-q",
        "-p",
        PROPERTIES_ONLY,
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
    ]
    try:
        done = subprocess.run(
            command, check=False, cwd=root, env=suite_environment(root), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Verdict(outcome=Outcome.TIMEOUT, problems=(f"the property suite ran longer than {timeout:.0f} s",))
    written = report.read_text() if report.is_file() else ""
    return verdict_of(done.returncode, written, done.stdout + done.stderr)
