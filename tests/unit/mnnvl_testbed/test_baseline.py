"""The upgrade baseline: an earlier commit's tree, unpacked from this clone's history."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from mnnvl_testbed import baseline, building


@pytest.fixture
def cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("MNNVL_TESTBED_CACHE", str(tmp_path))
    return tmp_path


def test_the_baseline_tree_is_the_commit_s_files_and_its_packages_come_first_on_the_path(cache: pathlib.Path) -> None:
    root = baseline.tree()
    assert root == building.cache_root() / "baselines" / baseline.UPGRADE_BASELINE
    listed = subprocess.run(
        ["git", "-C", str(baseline.REPOSITORY), "ls-tree", "--name-only", baseline.UPGRADE_BASELINE, "packages/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(str(path.relative_to(root).parent) for path in baseline.package_sources(root)) == sorted(listed)
    keys = "packages/mnnvl-api/src/mnnvl_api/keys.py"
    at_commit = subprocess.run(
        ["git", "-C", str(baseline.REPOSITORY), "show", f"{baseline.UPGRADE_BASELINE}:{keys}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (root / keys).read_text() == at_commit
    assert baseline.python_path(root).split(":")[0] == str(root / "packages" / "mnnvl-api" / "src")
    # Unpacked once: a second call reuses the tree.
    (root / "marker").touch()
    assert (baseline.tree() / "marker").exists()


def test_a_commit_the_clone_cannot_have_is_refused_with_what_to_do(cache: pathlib.Path) -> None:
    with pytest.raises(baseline.BaselineError, match="Clone with history"):
        baseline.tree("0" * 40)
    assert not (cache / "baselines" / ("0" * 40)).exists()
