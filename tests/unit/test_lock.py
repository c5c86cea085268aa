"""The image's hashed locks (requirements/) satisfy what the product's packages declare, so they cannot rot.

`requirements/install` runs `pip check` after installing, but only where an image or a venv is built; these
tests read the files alone, in milliseconds.
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from typing import Any

import pytest
from packaging import requirements, utils, version

ROOT = pathlib.Path(__file__).parents[2]
REQUIREMENTS = ROOT / "requirements"
#: Development only: never in the image, so never in the lock.
DEV_PACKAGES = frozenset({"mnnvl-testbed"})
#: `name==version` at the start of a lock entry, before any environment marker or hash.
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)", re.MULTILINE)


def listed_packages() -> list[pathlib.Path]:
    """The package directories requirements/runtime.in names, in order."""
    lines = (REQUIREMENTS / "runtime.in").read_text().splitlines()
    return [ROOT / line.strip() for line in lines if line.strip() and not line.startswith("#")]


def pyproject(package: pathlib.Path) -> dict[str, Any]:
    return tomllib.loads((package / "pyproject.toml").read_text())


def pins(lock: str) -> dict[str, version.Version]:
    text = (REQUIREMENTS / lock).read_text()
    return {utils.canonicalize_name(m["name"]): version.Version(m["version"]) for m in PIN.finditer(text)}


def own_versions() -> dict[str, version.Version]:
    return {
        utils.canonicalize_name(project["name"]): version.Version(project["version"])
        for project in (pyproject(package)["project"] for package in listed_packages())
    }


def unsatisfied(declared: list[str], available: dict[str, version.Version]) -> list[str]:
    """Each requirement (for Python 3.11, the image's) that no version in `available` satisfies."""
    problems = []
    for line in declared:
        requirement = requirements.Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"python_version": "3.11"}):
            continue
        found = available.get(utils.canonicalize_name(requirement.name))
        if found is None:
            problems.append(f"{line}: not in the lock")
        elif not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{line}: the lock has {found}")
    return problems


def test_every_product_package_is_listed_for_the_image() -> None:
    on_disk = {path.name for path in (ROOT / "packages").iterdir() if (path / "pyproject.toml").exists()}
    assert sorted(path.name for path in listed_packages()) == sorted(on_disk - DEV_PACKAGES)


def test_each_listed_directory_is_named_after_its_distribution() -> None:
    """requirements/lock derives `--no-emit-package NAME` from the directory name."""
    assert [path.name for path in listed_packages()] == [
        pyproject(path)["project"]["name"] for path in listed_packages()
    ]


@pytest.mark.parametrize("package", [path.name for path in listed_packages()])
def test_the_runtime_lock_satisfies_the_package_dependencies(package: str) -> None:
    declared = pyproject(ROOT / "packages" / package)["project"].get("dependencies", [])
    assert unsatisfied(declared, {**pins("runtime.txt"), **own_versions()}) == []


@pytest.mark.parametrize("package", [path.name for path in listed_packages()])
def test_the_build_lock_satisfies_the_package_build_backend(package: str) -> None:
    declared = pyproject(ROOT / "packages" / package)["build-system"]["requires"]
    assert unsatisfied(declared, pins("build.txt")) == []


def test_the_lock_pins_no_package_of_ours_and_nothing_for_development() -> None:
    """Our packages come from this tree (a directory has no hash), and the testbed's tools stay out of the image."""
    pinned = set(pins("runtime.txt"))
    assert pinned & (set(own_versions()) | DEV_PACKAGES) == set()
    assert pinned & {"pytest", "hypothesis", "mypy", "ruff", "hatchling", "pytest-kind-ng"} == set()


def test_every_pin_carries_a_hash() -> None:
    """`--require-hashes` refuses a pin without one; catch a hand edit here rather than in an image build."""
    for lock in ("runtime.txt", "build.txt"):
        entries = re.split(r"\n(?=\S)", (REQUIREMENTS / lock).read_text())
        unhashed = [entry.split()[0] for entry in entries if PIN.match(entry) and "--hash=sha256:" not in entry]
        assert unhashed == [], lock
