"""The product installs into a clean environment from the lock alone, as the image's build stage installs it
(the same script, requirements/install), and each controller it installs starts and explains why it stops.

uv's cache (its default, outside the repository) keeps the second run fast; the first downloads the locked
wheels from PyPI.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator

import pytest
import uv
from packaging import utils

from mnnvl_api import keys

ROOT = pathlib.Path(__file__).parents[2]
CLI_SCRIPT = keys.CLI
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)", re.MULTILINE)
NO_CREDENTIALS = (
    "no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST is unset) and no kubeconfig "
    "(set KUBECONFIG, or run in a Pod with a ServiceAccount token)"
)


def product_packages() -> list[dict[str, object]]:
    """The `[project]` table of each package requirements/runtime.in lists."""
    lines = (ROOT / "requirements" / "runtime.in").read_text().splitlines()
    paths = [ROOT / line.strip() / "pyproject.toml" for line in lines if line.strip() and not line.startswith("#")]
    return [tomllib.loads(path.read_text())["project"] for path in paths]


def console_scripts() -> list[str]:
    return sorted(name for project in product_packages() for name in dict(project.get("scripts", {})))  # type: ignore[call-overload]


def controller_scripts() -> list[str]:
    """The controllers' console scripts (the image also ships `kubectl-mnnvl`, the command-line tool)."""
    return [script for script in console_scripts() if script != CLI_SCRIPT]


def install(venv: pathlib.Path, *, offline: bool) -> pathlib.Path:
    binary = uv.find_uv_bin()
    subprocess.run([binary, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {**os.environ, "UV": binary, **({"UV_OFFLINE": "1"} if offline else {})}
    result = subprocess.run(
        [str(ROOT / "requirements" / "install"), str(python)], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return venv


def installed(venv: pathlib.Path) -> dict[utils.NormalizedName, str]:
    freeze = subprocess.run(
        [uv.find_uv_bin(), "pip", "freeze", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[utils.NormalizedName, str] = {}
    for line in freeze.splitlines():
        name, _, rest = line.partition("==") if "==" in line else line.partition(" @ ")
        found[utils.canonicalize_name(name)] = rest
    return found


@pytest.fixture(scope="session")
def product(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A fresh environment with the product installed from the lock (online: PyPI, through uv's cache)."""
    return install(tmp_path_factory.mktemp("image") / "venv", offline=False)


@pytest.fixture
def empty_home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    home = tmp_path / "home"
    home.mkdir()
    yield home
    assert list(home.iterdir()) == [], "a controller wrote into HOME, which a read-only root filesystem refuses"


def test_the_environment_holds_exactly_the_locked_packages_and_ours(product: pathlib.Path) -> None:
    locked = {
        utils.canonicalize_name(m["name"]): m["version"]
        for m in PIN.finditer((ROOT / "requirements" / "runtime.txt").read_text())
    }
    ours = {utils.canonicalize_name(str(p["name"])) for p in product_packages()}
    found = installed(product)
    third_party = {name: version for name, version in found.items() if name not in ours}
    assert sorted(set(found) & ours) == sorted(ours)
    assert {name: locked.get(name) for name in third_party} == third_party
    assert "mnnvl-testbed" not in found


def test_an_install_from_the_cache_alone_needs_no_network(
    product: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Once the locked wheels are cached the product reinstalls offline, identically."""
    again = install(tmp_path_factory.mktemp("offline") / "venv", offline=True)
    assert installed(again).keys() == installed(product).keys()


def files_of(venv: pathlib.Path) -> set[pathlib.Path]:
    return set(venv.rglob("*"))


def start(
    product: pathlib.Path, script: str, home: pathlib.Path, **environment: str
) -> subprocess.CompletedProcess[str]:
    """Run a console script as the image would (bytecode writing off), with only PATH, HOME and `environment`."""
    env = {"PATH": f"{product / 'bin'}:/usr/bin:/bin", "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1", **environment}
    return subprocess.run(
        [str(product / "bin" / script)], env=env, cwd=home, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_environment_has_a_console_script_per_controller_and_the_cli(product: pathlib.Path) -> None:
    assert console_scripts() == [CLI_SCRIPT, "mnnvl-ds", "mnnvl-guardian", "mnnvl-lws", "mnnvl-topology"]
    assert all((product / "bin" / script).is_file() for script in console_scripts())


def test_the_cli_without_cluster_credentials_says_so_in_one_line(
    product: pathlib.Path, empty_home: pathlib.Path
) -> None:
    before = files_of(product)
    result = subprocess.run(
        [str(product / "bin" / CLI_SCRIPT), "status"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(empty_home), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (2, f"error: {NO_CREDENTIALS}; pass --kubeconfig or set KUBECONFIG\n")
    assert files_of(product) == before


@pytest.mark.parametrize("script", controller_scripts())
def test_a_controller_without_cluster_credentials_says_so_and_writes_nothing(
    product: pathlib.Path, script: str, empty_home: pathlib.Path
) -> None:
    before = files_of(product)
    result = start(product, script, empty_home)
    assert (result.returncode, result.stderr) == (1, f"{script}: cannot start: {NO_CREDENTIALS}\n")
    assert files_of(product) == before


@pytest.mark.parametrize("script", controller_scripts())
def test_a_controller_with_a_bad_setting_names_it(product: pathlib.Path, script: str, empty_home: pathlib.Path) -> None:
    result = start(product, script, empty_home, MNNVL_LOG_LEVEL="loud")
    assert (result.returncode, result.stderr) == (
        2,
        f"{script}: invalid environment: MNNVL_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case); got 'loud'\n",
    )
