"""Conventions that review alone would miss, checked on every run."""

from __future__ import annotations

import ast
import pathlib
import re

from mnnvl_api import events

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "packages"
CONTRACT_PREFIXES = ("leaderworkerset.sigs.k8s.io/", "disaggregatedset.x-k8s.io/")
API_VERSION = re.compile(r"[a-z0-9.-]+/v\d+(alpha\d+|beta\d+)?")  # an apiVersion, not a key
KEYS_MODULE = PACKAGES / "mnnvl-api" / "src" / "mnnvl_api" / "keys.py"


def package_sources() -> list[pathlib.Path]:
    return sorted(PACKAGES.glob("*/src/**/*.py"))


def test_contract_keys_are_spelled_only_in_the_keys_module() -> None:
    offenders = []
    for source in package_sources():
        if source == KEYS_MODULE:
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith(CONTRACT_PREFIXES)
                and not API_VERSION.fullmatch(node.value)
            ):
                offenders.append(f"{source.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert offenders == []


def test_event_reasons_are_upper_camel_case_constants() -> None:
    reasons = {name: value for name, value in vars(events).items() if name.endswith("_REASON")}
    assert reasons, "mnnvl_api.events defines no reasons"
    for name, value in reasons.items():
        assert re.fullmatch(r"[A-Z][a-zA-Z]+", value), f"{name} = {value!r} is not UpperCamelCase"


def test_every_package_has_its_own_version_and_typed_marker() -> None:
    for project in sorted(PACKAGES.glob("*/pyproject.toml")):
        package = project.parent / "src" / project.parent.name.replace("-", "_")
        assert (package / "py.typed").exists(), f"{package} lacks py.typed"
        assert re.search(r'^version = "\d+\.\d+\.\d+"$', project.read_text(), re.MULTILINE), f"{project} has no version"
