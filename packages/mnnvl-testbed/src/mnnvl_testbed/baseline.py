"""An earlier mnnvl, taken from this repository's git history: what the upgrade tests install first and upgrade from
(and roll back to), and what the safety model runs beside the current controllers.

The tree of the commit is written once under `<cache>/baselines/<commit>/` (outside the repository, like the
built binaries) by `git archive`; a clone that lacks the commit (a shallow one) fetches it from `origin` first.
Its packages are run from their sources (`python_path`), with the dependencies installed for this tree: a
baseline whose locked dependencies differ would need an environment of its own.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import pathlib
import subprocess
import tarfile
import urllib.parse
import urllib.request

from . import building

#: main as it stood before the upgrade tests existed (issue 26). Move it forward with each release: the upgrade
#: tests then prove the step from the last release to this tree (docs/upgrades.md).
UPGRADE_BASELINE = "5b20148e622ba29247bf1db1d1ff3e6a51c033c3"
#: The root of the tree this module is in: a clone, or a scratch copy of one (the guard runs import a copy's).
REPOSITORY = pathlib.Path(__file__).resolve().parents[4]


class BaselineError(RuntimeError):
    """The baseline commit cannot be had: neither in the clone nor from its `origin`."""


def tree(commit: str = UPGRADE_BASELINE) -> pathlib.Path:
    """The repository's files at `commit`, unpacked once into the cache."""
    target = building.cache_root() / "baselines" / commit
    if (target / ".complete").exists():
        return target
    repository = clone()
    _ensure_commit(repository, commit)
    archive = subprocess.run(
        ["git", "-C", str(repository), "archive", "--format=tar", commit], capture_output=True, check=True
    ).stdout
    partial = target.with_name(f"{commit}.partial-{os.getpid()}")
    with tarfile.open(fileobj=io.BytesIO(archive)) as unpacked:
        unpacked.extractall(partial, filter="data")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        partial.rename(target)
    except OSError:
        # Another process unpacked it first; its copy is the same commit.
        subprocess.run(["rm", "-rf", str(partial)], check=True)
    (target / ".complete").touch()
    return target


def clone() -> pathlib.Path:
    """The git clone whose history holds the baselines: this tree, or, when it is a scratch copy without history,
    the clone the testbed package is installed from (editable, as it always is)."""
    if (REPOSITORY / ".git").exists():
        return REPOSITORY
    described = importlib.metadata.distribution("mnnvl-testbed").read_text("direct_url.json")
    url = json.loads(described or "{}").get("url", "")
    installed = pathlib.Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)).parents[1]
    if not (installed / ".git").exists():
        raise BaselineError(
            f"neither {REPOSITORY} nor {installed} (where mnnvl-testbed is installed from) is a git clone"
        )
    return installed


def _ensure_commit(repository: pathlib.Path, commit: str) -> None:
    def present() -> bool:
        probe = ["git", "-C", str(repository), "cat-file", "-e", f"{commit}^{{commit}}"]
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0

    if present():
        return
    fetched = subprocess.run(
        ["git", "-C", str(REPOSITORY), "fetch", "--quiet", "origin", commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if fetched.returncode != 0 or not present():
        raise BaselineError(
            f"commit {commit} (mnnvl_testbed.baseline.UPGRADE_BASELINE) is not in {REPOSITORY} and `git fetch origin "
            f"{commit}` failed: {fetched.stderr.strip() or 'no such commit'}. Clone with history (no --depth)."
        )


def package_sources(root: pathlib.Path) -> list[pathlib.Path]:
    """The `src` directory of every package of the tree at `root`."""
    return sorted(path for path in (root / "packages").glob("*/src") if path.is_dir())


def python_path(root: pathlib.Path) -> str:
    """A PYTHONPATH that makes the tree's packages shadow the installed ones."""
    return os.pathsep.join(str(path) for path in package_sources(root))
