"""The image itself: the unchanged Dockerfile built with buildah (chroot isolation) from local stand-ins for its two
bases (mnnvl_testbed.image), then checked as built: its configuration and labels, its files and bill of materials,
and each console script started in a container of it as the image's user.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
import subprocess
import tomllib
from collections.abc import Iterator

import pytest
import uv
from packaging import utils
from requirements import sbom

from mnnvl_api import keys
from mnnvl_testbed import image

ROOT = pathlib.Path(__file__).parents[2]
VENV = "/opt/mnnvl"
NON_ROOT = "65532:65532"
SBOM = f"{VENV}/sbom.cdx.json"
CLI_SCRIPT = keys.CLI
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)", re.MULTILINE)
NO_CREDENTIALS = (
    "no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST is unset) and no kubeconfig "
    "(set KUBECONFIG, or run in a Pod with a ServiceAccount token)"
)
#: Build tools the runtime stage must not carry: uv, compilers, linkers.
BUILD_TOOL = re.compile(
    r"^(uvx?|cc|c\+\+|cpp|as|ld|ld\.(bfd|gold)|(gcc|g\+\+|clang|clang\+\+)(-[\d.]+)?|.*-linux-gnu-(gcc|g\+\+|as|ld).*)$"
)
#: Where a command is found: the image's PATH, and the build stage's place for uv.
COMMAND_DIRECTORIES = ("/opt/mnnvl/bin", "/usr/local/bin", "/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: The labels a release sets (docs/release.md) and the one naming the bill of materials.
LABELS = (
    "org.opencontainers.image.source",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "dev.mnnvl.sbom",
)
#: Directories anyone may write to that a Pod's `readOnlyRootFilesystem: true` closes (chroot cannot: docs/image.md).
STICKY_SCRATCH = {"/tmp", "/var/tmp", "/run/lock", "/dev/shm"}


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


@pytest.fixture(scope="session")
def arguments() -> dict[str, str]:
    """The build arguments the image is built with, as the testbed passes them."""
    return image.build_arguments(ROOT)


@pytest.fixture(scope="session")
def built(request: pytest.FixtureRequest, arguments: dict[str, str]) -> str:
    """The image id of the Dockerfile built as it is; its size is printed in the test report."""
    image_id = image.build(ROOT, pathlib.Path(uv.find_uv_bin()), arguments)
    size = image.buildah("images", "--format", "{{.Size}}", image_id).strip()
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\nimage {image.TAG} ({image_id[:12]}): {size}")
    return image_id


@pytest.fixture(scope="session")
def configuration(built: str) -> dict[str, object]:
    inspected = json.loads(image.buildah("inspect", "--type", "image", built))
    found: dict[str, object] = inspected["OCIv1"]["config"]
    return found


@pytest.fixture(scope="session")
def container(built: str) -> Iterator[str]:
    name = image.fresh_container(built, "mnnvl-image-checks")
    yield name
    image.buildah("rm", name)


@pytest.fixture(scope="session")
def root_filesystem(container: str) -> pathlib.Path:
    return pathlib.Path(image.buildah("mount", container).strip())


@pytest.fixture(scope="session")
def installed(container: str) -> dict[str, str]:
    """Every distribution in the image, by canonical name, with its version, as the image's own Python reads them."""
    listing = run(
        container,
        [
            "python",
            "-c",
            "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version "
            "for d in m.distributions()}))",
        ],
    )
    assert listing.returncode == 0, listing.stderr
    return {utils.canonicalize_name(name): version for name, version in json.loads(listing.stdout).items()}


#: What `buildah run` itself puts in a container's root filesystem (as a kubelet mounts them into a Pod's), not the
#: program's doing.
RUN_PROVIDED = {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv"}


def tree(root: pathlib.Path) -> dict[str, tuple[int, int] | None]:
    """Every path under `root` (as the container sees it): a file with its size and modification time, a directory
    (None). Device nodes and what `buildah run` provides are left out."""
    found: dict[str, tuple[int, int] | None] = {}
    for directory, subdirectories, files in os.walk(root):
        for name in [*subdirectories, *files]:
            path = pathlib.Path(directory) / name
            inside = "/" + str(path.relative_to(root))
            if inside in RUN_PROVIDED or inside.startswith("/dev/"):
                continue
            status = path.lstat()
            found[inside] = None if stat.S_ISDIR(status.st_mode) else (status.st_size, status.st_mtime_ns)
    return found


def run(container: str, command: list[str], **environment: str) -> subprocess.CompletedProcess[str]:
    """`command` in the container as the image's user, with only the image's environment and `environment`."""
    arguments = ["run", "--isolation", "chroot", "--cap-drop", "ALL"]
    arguments += [option for name, value in environment.items() for option in ("--env", f"{name}={value}")]
    return subprocess.run(
        ["buildah", *image.storage_options(), *arguments, container, "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def program_error(result: subprocess.CompletedProcess[str]) -> str:
    """The program's standard error without what buildah adds when the command exits non-zero."""
    lines = result.stderr.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(("subprocess exited", "Error: exit status")))


def test_it_runs_as_65532_with_no_command_of_its_own(configuration: dict[str, object]) -> None:
    assert configuration["User"] == NON_ROOT
    # The stand-in base's `python3` command is cleared by `CMD []`; neither an entrypoint nor a shell form is left.
    assert not configuration.get("Entrypoint")
    assert not configuration.get("Cmd")
    assert "PYTHONDONTWRITEBYTECODE=1" in configuration["Env"]  # type: ignore[operator]


def test_the_runtime_stage_has_no_uv_and_no_compiler(root_filesystem: pathlib.Path) -> None:
    commands = [path for path in tree(root_filesystem) if path.rsplit("/", 1)[0] in COMMAND_DIRECTORIES]
    assert "/usr/bin/python3.11" in commands  # the walk sees the image's commands
    assert sorted(path for path in commands if BUILD_TOOL.match(path.rsplit("/", 1)[-1])) == []


def test_nothing_in_the_root_filesystem_is_writable_by_the_image_user_but_scratch_directories(
    root_filesystem: pathlib.Path,
) -> None:
    uid, gid = (int(part) for part in NON_ROOT.split(":"))
    writable = set()
    paths = tree(root_filesystem)
    assert "/opt/mnnvl/bin/python" in paths  # the walk sees the image's files
    for path in paths:
        status = (root_filesystem / path.lstrip("/")).lstat()
        if not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
            continue
        mode = status.st_mode
        if (
            (status.st_uid == uid and mode & stat.S_IWUSR)
            or (status.st_gid == gid and mode & stat.S_IWGRP)
            or mode & stat.S_IWOTH
        ):
            writable.add(path)
    assert writable <= STICKY_SCRATCH
    assert all((root_filesystem / path.lstrip("/")).stat().st_mode & stat.S_ISVTX for path in writable)


def test_it_is_labelled_with_its_source_version_revision_and_bill_of_materials(
    configuration: dict[str, object], arguments: dict[str, str]
) -> None:
    found: dict[str, str] = configuration["Labels"]  # type: ignore[assignment]
    assert {name: found.get(name) for name in LABELS} == {
        "org.opencontainers.image.source": "https://github.com/mnnvl/mnnvl",
        "org.opencontainers.image.version": arguments["VERSION"],
        "org.opencontainers.image.revision": arguments["REVISION"],
        "dev.mnnvl.sbom": SBOM,
    }
    assert "org.opencontainers.image.created" not in found


def test_its_bill_of_materials_lists_exactly_what_it_holds(
    root_filesystem: pathlib.Path, installed: dict[str, str], arguments: dict[str, str]
) -> None:
    document = json.loads((root_filesystem / SBOM.lstrip("/")).read_text())
    # The document the generator makes of this tree for this version, written at build time ...
    assert document == sbom.read(ROOT, arguments["VERSION"])
    assert (document["specVersion"], document["metadata"]["component"]["version"]) == ("1.5", arguments["VERSION"])
    # ... names every distribution the image holds, at the version it holds, and nothing else.
    listed = {component["name"]: component["version"] for component in document["components"]}
    assert listed == installed
    assert all(
        component["purl"] == f"pkg:pypi/{component['name']}@{component['version']}"
        for component in document["components"]
    )


def test_it_holds_exactly_the_locked_packages_and_ours(installed: dict[str, str]) -> None:
    locked = {
        utils.canonicalize_name(m["name"]): m["version"]
        for m in PIN.finditer((ROOT / "requirements" / "runtime.txt").read_text())
    }
    ours = {utils.canonicalize_name(str(p["name"])): str(p["version"]) for p in product_packages()}
    third_party = {name: version for name, version in installed.items() if name not in ours}
    assert {name: installed.get(name) for name in ours} == ours
    # Every pin applies to CPython 3.11 on Linux (the lock's two markers exclude PyPy only).
    assert third_party == locked
    assert "mnnvl-testbed" not in installed


def test_it_has_a_console_script_per_controller_and_the_cli(root_filesystem: pathlib.Path) -> None:
    assert console_scripts() == [CLI_SCRIPT, "mnnvl-ds", "mnnvl-guardian", "mnnvl-lws", "mnnvl-topology"]
    assert all((root_filesystem / VENV.lstrip("/") / "bin" / script).is_file() for script in console_scripts())


def test_the_cli_without_cluster_credentials_says_so_in_one_line(container: str, root_filesystem: pathlib.Path) -> None:
    before = tree(root_filesystem)
    result = run(container, [CLI_SCRIPT, "status"])
    assert (result.returncode, program_error(result)) == (
        2,
        f"error: {NO_CREDENTIALS}; pass --kubeconfig or set KUBECONFIG\n",
    )
    assert tree(root_filesystem) == before


@pytest.mark.parametrize("script", controller_scripts())
def test_a_controller_without_cluster_credentials_says_so_and_writes_nothing(
    container: str, root_filesystem: pathlib.Path, script: str
) -> None:
    before = tree(root_filesystem)
    result = run(container, [script])
    assert (result.returncode, program_error(result)) == (1, f"{script}: cannot start: {NO_CREDENTIALS}\n")
    assert tree(root_filesystem) == before


@pytest.mark.parametrize("script", controller_scripts())
def test_a_controller_with_a_bad_setting_names_it(container: str, script: str) -> None:
    result = run(container, [script], MNNVL_LOG_LEVEL="loud")
    assert (result.returncode, program_error(result)) == (
        2,
        f"{script}: invalid environment: MNNVL_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any "
        "case); got 'loud'\n",
    )
