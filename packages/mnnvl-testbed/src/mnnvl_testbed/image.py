"""The product's image, built from the repository's unchanged Dockerfile with buildah, and controllers run from it.

No container daemon runs here and no image registry is reachable. buildah needs neither: it builds and runs with
chroot isolation. The base images the Dockerfile names are stand-ins made on this machine under exactly those
names: the Python base is a Debian bookworm root filesystem (mmdebstrap) whose python3.11 is linked where the
official image has its interpreter, uv's image holds the `uv` binary of the wheel the tests install. Images live in
a buildah store under the testbed's cache, outside the repository (docs/image.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable

import yaml

from . import building, dockerfile

#: What the built image is tagged.
TAG = "localhost/mnnvl:dev"
#: Set to an image id, controllers on the testbed start from that image (`controllers.start`).
CONTROLLER_IMAGE_VARIABLE = "MNNVL_TESTBED_CONTROLLER_IMAGE"
#: Where a Pod has its ServiceAccount's token, CA and namespace.
SERVICE_ACCOUNT_DIRECTORY = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The webhook certificate directory of a configuration that names none (the chart always names one).
DEFAULT_CERT_DIR = "/var/run/mnnvl/webhook-certs"
#: Labels a stand-in base with the hash of what it was made from, so a changed recipe makes it again.
RECIPE_LABEL = "io.mnnvl.testbed.stand-in-recipe"
#: Labels the built image with the hash of its build context and bases, so an unchanged tree is not built again.
CONTEXT_LABEL = "io.mnnvl.testbed.build-context"
#: The one Python base the stand-in is made for: bookworm's python3.11 stands in for nothing else.
PYTHON_BASE = "docker.io/library/python:3.11-slim-bookworm"
#: What `.dockerignore` keeps out of the context below `requirements/` and `packages/`.
CONTEXT_EXCLUDED_PACKAGE = "mnnvl-testbed"
#: The chart whose appVersion the image's version label carries.
CHART = pathlib.Path("charts") / "mnnvl" / "Chart.yaml"
#: How a reference pins its image by digest (`name:tag@sha256:…`).
DIGEST_SEPARATOR = "@sha256:"

DEBIAN_SUITE = "bookworm"
DEBIAN_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: The official image's interpreter is /usr/local/bin/python3.11 (the Dockerfile's build stage names it); bookworm's
#: python3.11 is the same minor version, at /usr/bin.
PYTHON_STAND_IN_PACKAGES = ("python3.11", "ca-certificates")
PYTHON_STAND_IN_LINKS = ("python3.11", "python3", "python")
PYTHON_STAND_IN_ENVIRONMENT = ("PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
PYTHON_STAND_IN_COMMAND = "python3"
#: Documentation the image never reads, left out as the slim image leaves it out.
PYTHON_STAND_IN_EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")


class ImageError(RuntimeError):
    """Building or running the image failed; the message says which step and shows its output's tail."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseImages:
    """The images the Dockerfile builds from, by the fully qualified names buildah looks them up by."""

    python: str
    uv: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mount:
    """A host path mounted read-only, as a Pod's ConfigMap, Secret and token volumes are."""

    source: pathlib.Path
    target: str

    def option(self) -> str:
        return f"{self.source}:{self.target}:ro"


def qualified(reference: str) -> str:
    """`reference` as a container engine resolves a Docker Hub short name: `python:3.11` is
    `docker.io/library/python:3.11`, `user/app` is `docker.io/user/app`; names with a registry stay as they are."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def unpinned(reference: str) -> str:
    """`reference` without its digest: `python:3.11@sha256:…` is `python:3.11`."""
    return reference.split(DIGEST_SEPARATOR, 1)[0]


def stand_in_arguments(dockerfile_text: str) -> dict[str, str]:
    """The build arguments that name the stand-ins: each ARG whose default pins a base by digest, given with the tag
    alone. A `name:tag@digest` reference is looked up by its digest alone (buildah ignores the tag), and no stand-in
    made here has the registry's digest, so the build names the bases by tag (docs/image.md)."""
    return {
        name: unpinned(value)
        for name, value in dockerfile.global_arguments(dockerfile_text).items()
        if DIGEST_SEPARATOR in value
    }


def base_images(dockerfile_text: str) -> BaseImages:
    """The two external bases of the Dockerfile, as the build with `stand_in_arguments` names them: the Python image
    its build and runtime stages share, and uv's."""
    stages = dockerfile.parse(dockerfile_text, stand_in_arguments(dockerfile_text))
    names = {stage.name for stage in stages}
    external = [stage.base for stage in stages if stage.base not in names]
    pinned = sorted({base for base in external if DIGEST_SEPARATOR in base})
    if pinned:
        raise ImageError(
            f"the Dockerfile pins {pinned} by digest in a FROM line: pin it in the default of a global ARG the "
            "FROM line names, so that the build can name the local stand-in by its tag instead"
        )
    uv = [base for base in external if base.startswith("ghcr.io/astral-sh/uv:")]
    python = [base for base in external if base.split("/")[-1].startswith("python:")]
    if len(set(uv)) != 1 or len(set(python)) != 1 or len(set(external)) != 2:
        raise ImageError(f"the Dockerfile's bases are {sorted(set(external))}: expected one python image and uv's")
    return BaseImages(python=qualified(python[0]), uv=qualified(uv[0]))


def python_stand_in_recipe() -> str:
    """The hash of everything the Python stand-in is made from."""
    recipe = [
        DEBIAN_SUITE,
        DEBIAN_MIRROR,
        PYTHON_STAND_IN_PACKAGES,
        PYTHON_STAND_IN_LINKS,
        PYTHON_STAND_IN_ENVIRONMENT,
        PYTHON_STAND_IN_COMMAND,
        PYTHON_STAND_IN_EXCLUDED,
        "no /dev",
    ]
    return hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:16]


def revision(head: str | None, *, modified: bool) -> str:
    """The image's revision label: the commit the tree is at, marked `-dirty` when files differ from it, and
    `unknown` outside a git work tree."""
    if head is None:
        return "unknown"
    return f"{head}-dirty" if modified else head


def run_command(
    container: str,
    command: list[str],
    *,
    environment: dict[str, str],
    mounts: list[Mount],
    user: str | None,
) -> list[str]:
    """`buildah run` of `command` in `container` as a Pod's container would run it: on the host's network (the
    testbed's API server and webhook ports are the host's), as `user` (None: the image's USER), with no capabilities,
    only `environment` added to the image's, and `mounts`."""
    return [
        "buildah",
        *storage_options(),
        "run",
        "--isolation",
        "chroot",
        "--network",
        "host",
        *(("--user", user) if user is not None else ()),
        "--cap-drop",
        "ALL",
        *(option for mount in mounts for option in ("--volume", mount.option())),
        *(option for name, value in sorted(environment.items()) for option in ("--env", f"{name}={value}")),
        container,
        "--",
        *command,
    ]


# The imperative part: buildah and mmdebstrap.


def store() -> pathlib.Path:
    return building.cache_root() / "image"


def storage_options() -> list[str]:
    # vfs: overlay mounts are not available in every sandbox, and a build here is small enough to copy layers.
    return ["--root", str(store() / "storage"), "--runroot", str(store() / "run"), "--storage-driver", "vfs"]


def buildah(*arguments: str) -> str:
    result = subprocess.run(["buildah", *storage_options(), *arguments], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise ImageError(f"`buildah {' '.join(arguments)}` failed:\n{tail}")
    return result.stdout


def ensure_tools() -> None:
    """buildah and mmdebstrap on PATH: installed from Debian's packages when missing and this is root on Debian."""
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(
            f"building the image needs {' and '.join(missing)} on PATH: install them (Debian: "
            f"`apt-get install buildah mmdebstrap`) and run again"
        )
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "buildah", "mmdebstrap"]):
        result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ImageError(f"`{' '.join(command)}` failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


def label(image: str, name: str) -> str | None:
    """The value of label `name` of `image`; None when the image is not in the store or lacks the label."""
    result = subprocess.run(
        ["buildah", *storage_options(), "inspect", "--type", "image", image],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return None
    labels: dict[str, str] = json.loads(result.stdout)["OCIv1"]["config"].get("Labels") or {}
    return labels.get(name)


def ensure_python_stand_in(name: str) -> None:
    """`name` in the store: a bookworm root filesystem with python3.11 where the official image has it."""
    if name != PYTHON_BASE:
        raise ImageError(
            f"the Dockerfile builds on {name}, but the local stand-in is made for {PYTHON_BASE} only "
            "(Debian bookworm's python3.11): change PYTHON_STAND_IN_* and DEBIAN_SUITE in mnnvl_testbed/image.py too"
        )
    recipe = python_stand_in_recipe()
    if label(name, RECIPE_LABEL) == recipe:
        return
    store().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=store()) as scratch:
        root_filesystem = pathlib.Path(scratch) / "root.tar"
        links = "; ".join(f'ln -s /usr/bin/python3.11 "$1/usr/local/bin/{link}"' for link in PYTHON_STAND_IN_LINKS)
        command = [
            "mmdebstrap",
            "--variant=minbase",
            f"--include={','.join(PYTHON_STAND_IN_PACKAGES)}",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in PYTHON_STAND_IN_EXCLUDED),
            f"--customize-hook={links}",
            "--skip=output/dev",  # an image has no device nodes: the runtime provides /dev
            "--format=tar",
            DEBIAN_SUITE,
            str(root_filesystem),
            DEBIAN_MIRROR,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ImageError(f"mmdebstrap failed:\n{result.stderr[-3000:]}")
        container = buildah("from", "scratch").strip()
        try:
            buildah("add", container, str(root_filesystem), "/")
            configuration = [option for value in PYTHON_STAND_IN_ENVIRONMENT for option in ("--env", value)]
            buildah(
                "config",
                *configuration,
                "--cmd",
                PYTHON_STAND_IN_COMMAND,
                "--label",
                f"{RECIPE_LABEL}={recipe}",
                container,
            )
            buildah("commit", "--quiet", container, name)
        finally:
            buildah("rm", container)


def ensure_uv_stand_in(name: str, uv_binary: pathlib.Path) -> None:
    """`name` in the store: uv's image is its binary at /uv; `uv_binary` must be the version the name carries."""
    wanted = name.rsplit(":", 1)[1]
    reported = subprocess.run([str(uv_binary), "--version"], capture_output=True, text=True, check=True).stdout
    if reported.split()[1:2] != [wanted]:
        raise ImageError(f"{uv_binary} is {reported.strip()!r}, but the Dockerfile builds with uv {wanted}")
    digest = hashlib.sha256(uv_binary.read_bytes()).hexdigest()[:16]
    if label(name, RECIPE_LABEL) == digest:
        return
    container = buildah("from", "scratch").strip()
    try:
        buildah("copy", "--chmod", "0755", container, str(uv_binary), "/uv")
        buildah("config", "--label", f"{RECIPE_LABEL}={digest}", container)
        buildah("commit", "--quiet", container, name)
    finally:
        buildah("rm", container)


def chart_version(root: pathlib.Path) -> str:
    """The appVersion of `root`'s chart: the version the chart deploys, and so the image's version label."""
    return str(yaml.safe_load((root / CHART).read_text())["appVersion"])


def source_revision(root: pathlib.Path) -> str:
    """`revision` of `root`'s git work tree."""

    def git(*arguments: str) -> subprocess.CompletedProcess[str]:
        # No optional locks: a status taken beside a commit in progress must not get in its way.
        command = ["git", "--no-optional-locks", "-C", str(root), *arguments]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    head = git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return revision(None, modified=False)
    return revision(head.stdout.strip(), modified=bool(git("status", "--porcelain").stdout.strip()))


def build_arguments(root: pathlib.Path) -> dict[str, str]:
    """What the build of `root` passes with `--build-arg`: the stand-ins' names, and the version and revision the
    image is labelled with (a release passes the same two: docs/release.md)."""
    return {
        **stand_in_arguments((root / "Dockerfile").read_text()),
        "VERSION": chart_version(root),
        "REVISION": source_revision(root),
    }


def host_certificates() -> pathlib.Path:
    """The CA bundle this machine trusts (it may hold a TLS-inspecting proxy's authority that Debian's lacks)."""
    candidates = (os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile, DEBIAN_CA_BUNDLE)
    for candidate in candidates:
        if candidate and pathlib.Path(candidate).is_file():
            return pathlib.Path(candidate)
    raise ImageError(f"no CA bundle found on this machine (looked at {DEBIAN_CA_BUNDLE}; set SSL_CERT_FILE to one)")


def build(root: pathlib.Path, uv_binary: pathlib.Path, arguments: dict[str, str] | None = None) -> str:
    """Build `root`'s Dockerfile as it is, tagged TAG, from the stand-in bases, with `arguments` (by default
    `build_arguments(root)`); return the image id.

    The RUN steps see this machine's CA bundle and a uv configuration that trusts it (bind mounts, never part of a
    layer, and only /opt/mnnvl leaves the build stage): package downloads then pass a TLS-inspecting proxy.
    """
    ensure_tools()
    bases = base_images((root / "Dockerfile").read_text())
    ensure_python_stand_in(bases.python)
    ensure_uv_stand_in(bases.uv, uv_binary)
    arguments = build_arguments(root) if arguments is None else arguments
    digest = context_digest(root, [label(base, RECIPE_LABEL) or "" for base in (bases.python, bases.uv)], arguments)
    if label(TAG, CONTEXT_LABEL) == digest:
        return buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", TAG).strip()
    uv_configuration = store() / "uv.toml"
    uv_configuration.write_text("system-certs = true\n")
    with tempfile.TemporaryDirectory(dir=store()) as scratch:
        image_id_file = pathlib.Path(scratch) / "image-id"
        buildah(
            "bud",
            "--isolation",
            "chroot",
            "--pull=never",
            "--layers=false",
            "--volume",
            Mount(source=host_certificates(), target=DEBIAN_CA_BUNDLE).option(),
            "--volume",
            Mount(source=uv_configuration, target="/etc/uv/uv.toml").option(),
            *(option for name, value in sorted(arguments.items()) for option in ("--build-arg", f"{name}={value}")),
            "--label",
            f"{CONTEXT_LABEL}={digest}",
            "--iidfile",
            str(image_id_file),
            "--tag",
            TAG,
            "--file",
            str(root / "Dockerfile"),
            str(root),
        )
        image_id = image_id_file.read_text().strip().removeprefix("sha256:")
    # buildah leaves a working container for a stage that only names an image (`FROM … AS uv`).
    remove_containers(lambda _, image_name: image_name == bases.uv)
    # Earlier builds' untagged images; one a replica's container still uses stays until that container is replaced.
    subprocess.run(["buildah", *storage_options(), "rmi", "--prune"], capture_output=True, check=False)
    return image_id


def context_digest(root: pathlib.Path, bases: list[str], arguments: dict[str, str]) -> str:
    """A hash of what a build of `root` reads: the Dockerfile, `.dockerignore`, every file of the context
    (`requirements/`, `packages/` but the testbed's; caches and build leftovers aside: more is only a needless
    rebuild), `bases`, the stand-ins' recipes, and the build `arguments`. The revision among them changes with
    every commit, so each commit is built once: an image reused from another commit would carry its labels."""
    digest = hashlib.sha256(json.dumps([bases, sorted(arguments.items())]).encode())
    files = [root / "Dockerfile", root / ".dockerignore"]
    for top in ("requirements", "packages"):
        for directory, subdirectories, names in os.walk(root / top):
            subdirectories[:] = sorted(
                name
                for name in subdirectories
                if not (name == "__pycache__" or name.endswith(".egg-info") or name.startswith("."))
                and not (directory == str(root / "packages") and name == CONTEXT_EXCLUDED_PACKAGE)
            )
            files.extend(pathlib.Path(directory) / name for name in sorted(names))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def remove_containers(chosen: Callable[[str, str], bool]) -> None:
    """Remove every working container of the store for which `chosen(name, image name)` holds."""
    listing = buildah("containers", "--format", "{{.ContainerName}} {{.ImageName}}")
    for line in listing.splitlines():
        name, _, image_name = line.strip().partition(" ")
        if name and chosen(name, image_name.strip()):
            remove_container(name)


def remove_container(name: str) -> None:
    """Remove working container `name`, if there is one."""
    subprocess.run(["buildah", *storage_options(), "rm", name], capture_output=True, check=False)


def remove_testbed_containers(state_dir: pathlib.Path) -> None:
    """Remove the replica containers of the testbed in `state_dir` (none where buildah never ran)."""
    if shutil.which("buildah") is not None and (store() / "storage").is_dir():
        prefix = container_prefix(state_dir)
        remove_containers(lambda name, _: name.startswith(prefix))


def replica_container(state_dir: pathlib.Path, replica: str) -> str:
    """The container name of `replica` of the testbed in `state_dir`: testbeds share the image store."""
    return f"{container_prefix(state_dir)}{replica}"


def container_prefix(state_dir: pathlib.Path) -> str:
    return f"mnnvl-testbed-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]}-"


def fresh_container(image: str, name: str) -> str:
    """A new working container `name` of `image` (an earlier one of that name removed): one per controller replica,
    as each Pod gets a container of its own."""
    remove_container(name)
    buildah("from", "--pull=never", "--name", name, image)
    return name


def resolved(root: pathlib.Path, path: str) -> str:
    """`path` with its links followed inside the root filesystem `root`. buildah resolves a mount target's links on
    the host instead (a mount at `/var/run/…` would land under the host's `/run`, as `/var/run` links there), so
    mounts name the target the container would reach."""
    pending = [part for part in path.split("/") if part not in {"", "."}]
    done: list[str] = []
    for _ in range(256):  # parts plus links followed; more means a loop of links
        if not pending:
            return "/" + "/".join(done)
        part = pending.pop(0)
        if part == "..":
            done = done[:-1]
            continue
        candidate = root.joinpath(*done, part)
        if candidate.is_symlink():
            target = os.readlink(candidate)
            done = [] if target.startswith("/") else done
            pending = [piece for piece in target.split("/") if piece not in {"", "."}] + pending
            continue
        done.append(part)
    raise ImageError(f"{path}: too many links in {root}")


def container_root(name: str) -> pathlib.Path:
    """The root filesystem of working container `name` on the host."""
    return pathlib.Path(buildah("mount", name).strip())


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    parents = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents


def container_process(pid: int) -> int | None:
    """The command `buildah run` `pid` runs. Below buildah come its chroot runtime (on the host's root), then its exec
    helper, the first process in the container's root, whose child is the command."""
    parents = _parents()

    def children(of: int) -> list[int]:
        return sorted(child for child, parent in parents.items() if parent == of)

    pending = [pid]
    while pending:
        current = pending.pop(0)
        for child in children(current):
            try:
                in_container = os.readlink(f"/proc/{child}/root") != "/"
            except OSError:
                continue
            if in_container:
                return next(iter(children(child)), None)
            pending.append(child)
    return None


def end_run(pid: int, *, timeout: float = 15.0) -> None:
    """End the `buildah run` with pid `pid` as a kubelet ends a container: SIGTERM to the command in it, then wait
    for it to exit. (buildah answers a SIGTERM of its own by killing the command at once.)"""
    inner = container_process(pid)
    if inner is None:
        return
    try:
        os.kill(inner, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pathlib.Path(f"/proc/{inner}").exists():
        time.sleep(0.1)
