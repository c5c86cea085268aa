"""docs/architecture.md stays true: every module, object and file it names exists."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
#: `mnnvl_x.y.Z` as the page writes them (in backticks), and the repository files it names.
DOTTED = sorted(set(re.findall(r"`(mnnvl_\w+(?:\.\w+)*)`", DOC)))
FILES = sorted(set(re.findall(r"`((?:tests|docs|packages|charts|config)/[\w./-]+)`", DOC)))


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module, or an attribute path inside one."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_the_page_names_modules_and_files() -> None:
    assert len(DOTTED) > 30
    assert FILES


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_named_module_exists(dotted: str) -> None:
    assert resolves(dotted), f"docs/architecture.md names {dotted}, which does not exist"


@pytest.mark.parametrize("path", FILES)
def test_every_named_file_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which does not exist"


def test_a_name_that_does_not_exist_is_caught() -> None:
    assert not resolves("mnnvl_runtime.scopes.NoSuchThing")
    assert not resolves("mnnvl_nothing")
